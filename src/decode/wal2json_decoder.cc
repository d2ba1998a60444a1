#include "decode/wal2json_decoder.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include "common/pg_time.h"

namespace walrelay {
namespace {

using JsonValue = rapidjson::Value;

Status DecodeError(Lsn at, const std::string& what) {
  return Status::Decode("wal2json message at LSN " + at.ToString() + ": " + what);
}

const JsonValue* Member(const JsonValue& obj, const char* name) {
  auto it = obj.FindMember(name);
  return it == obj.MemberEnd() ? nullptr : &it->value;
}

Status ReadColumns(const JsonValue& array, Lsn at, const char* field, std::vector<Column>& out) {
  if (!array.IsArray()) return DecodeError(at, std::string("'") + field + "' is not an array");
  const size_t n = array.Size();
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const JsonValue& item = array[static_cast<rapidjson::SizeType>(i)];
    if (!item.IsObject()) return DecodeError(at, std::string("'") + field + "' entry is not an object");
    Column& col = out[i];
    const JsonValue* name = Member(item, "name");
    if (!name || !name->IsString())
      return DecodeError(at, std::string("'") + field + "' entry without a string 'name'");
    col.name.assign(name->GetString(), name->GetStringLength());
    const JsonValue* type = Member(item, "type");
    if (type && type->IsString()) {
      col.type.assign(type->GetString(), type->GetStringLength());
    } else {
      col.type.clear();
    }
    const JsonValue* value = Member(item, "value");
    if (!value || value->IsNull()) {
      col.kind = ValueKind::kNull;
      col.text.clear();
    } else if (value->IsBool()) {
      col.kind = ValueKind::kBool;
      col.text = value->GetBool() ? "true" : "false";
    } else if (value->IsString()) {
      // Numbers arrive as strings too (kParseNumbersAsStringsFlag keeps their digits); the
      // column type tells them apart afterwards (see mark_numbers below).
      col.kind = ValueKind::kString;
      col.text.assign(value->GetString(), value->GetStringLength());
    } else {
      return DecodeError(at, "column '" + col.name + "' has an unsupported JSON value");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<int64_t> Wal2JsonDecoder::CommitTime(std::string_view text) {
  if (text == last_timestamp_text_) return last_timestamp_ms_;
  auto ms = ParsePgTimestampMillis(text);
  if (!ms.ok()) return ms.status();
  last_timestamp_text_.assign(text);
  last_timestamp_ms_ = *ms;
  return *ms;
}

Status Wal2JsonDecoder::Decode(std::string_view json, Lsn data_start, DecodedMessage& out) {
  rapidjson::Document doc;
  // Numbers stay text so bigint and numeric keep every digit. Iterative: the recursive
  // parser overflows the stack on deeply nested input instead of reporting it.
  doc.Parse<rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseIterativeFlag>(json.data(),
                                                                                     json.size());
  if (doc.HasParseError()) {
    return DecodeError(data_start, std::string("invalid JSON (") +
                                       rapidjson::GetParseError_En(doc.GetParseError()) +
                                       " at offset " + std::to_string(doc.GetErrorOffset()) + ")");
  }
  if (!doc.IsObject()) return DecodeError(data_start, "not a JSON object");
  const JsonValue* action = Member(doc, "action");
  if (!action || !action->IsString() || action->GetStringLength() != 1)
    return DecodeError(data_start, "missing or invalid 'action'");
  const char act = action->GetString()[0];

  uint32_t xid = 0;
  if (const JsonValue* x = Member(doc, "xid"); x && x->IsString()) {
    xid = static_cast<uint32_t>(std::strtoul(x->GetString(), nullptr, 10));
  }
  int64_t time_ms = current_commit_time_ms_;
  if (const JsonValue* ts = Member(doc, "timestamp"); ts && ts->IsString()) {
    auto parsed = CommitTime(std::string_view(ts->GetString(), ts->GetStringLength()));
    if (!parsed.ok()) return parsed.status().WithContext("at LSN " + data_start.ToString());
    time_ms = *parsed;
  }
  auto lsn_of = [&](const char* field) -> Result<Lsn> {
    const JsonValue* v = Member(doc, field);
    if (!v || !v->IsString()) return DecodeError(data_start, std::string("missing '") + field + "'");
    return Lsn::Parse(std::string_view(v->GetString(), v->GetStringLength()));
  };

  switch (act) {
    case 'B': {
      out.kind = MessageKind::kBegin;
      out.begin.xid = xid;
      out.begin.commit_time_ms = time_ms;
      current_commit_time_ms_ = time_ms;
      auto first = lsn_of("lsn");
      out.begin.first_lsn = first.ok() ? *first : data_start;
      return Status::Ok();
    }
    case 'C': {
      out.kind = MessageKind::kCommit;
      out.commit.xid = xid;
      out.commit.commit_time_ms = time_ms;
      // dataStart of a commit is the end of the commit record (what "nextlsn" also says).
      out.commit.end_lsn = data_start;
      if (const JsonValue* next = Member(doc, "nextlsn"); next && next->IsString()) {
        auto parsed = Lsn::Parse(std::string_view(next->GetString(), next->GetStringLength()));
        if (!parsed.ok()) return parsed.status().WithContext("commit at " + data_start.ToString());
        out.commit.end_lsn = *parsed;
      }
      return Status::Ok();
    }
    case 'M': {
      out.kind = MessageKind::kMessage;
      out.message.lsn = data_start;
      const JsonValue* tr = Member(doc, "transactional");
      out.message.transactional = tr && tr->IsBool() && tr->GetBool();
      const JsonValue* prefix = Member(doc, "prefix");
      const JsonValue* content = Member(doc, "content");
      out.message.prefix = prefix && prefix->IsString() ? prefix->GetString() : "";
      out.message.content.assign(content && content->IsString() ? content->GetString() : "",
                                 content && content->IsString() ? content->GetStringLength() : 0);
      return Status::Ok();
    }
    case 'I':
    case 'U':
    case 'D':
    case 'T':
      break;
    default:
      return DecodeError(data_start, std::string("unknown action '") + act + "'");
  }

  RowChange& change = out.change;
  out.kind = MessageKind::kChange;
  change.op = act == 'I'   ? ChangeOp::kInsert
              : act == 'U' ? ChangeOp::kUpdate
              : act == 'D' ? ChangeOp::kDelete
                           : ChangeOp::kTruncate;
  auto lsn = lsn_of("lsn");
  change.lsn = lsn.ok() ? *lsn : data_start;
  change.xid = xid;
  change.commit_time_ms = time_ms;
  const JsonValue* schema = Member(doc, "schema");
  const JsonValue* table = Member(doc, "table");
  if (!schema || !schema->IsString() || !table || !table->IsString())
    return DecodeError(data_start, "change without 'schema' and 'table'");
  change.schema.assign(schema->GetString(), schema->GetStringLength());
  change.table.assign(table->GetString(), table->GetStringLength());

  const JsonValue* columns = Member(doc, "columns");
  if (columns) {
    WALRELAY_RETURN_IF_ERROR(ReadColumns(*columns, data_start, "columns", change.columns));
  } else {
    change.columns.clear();
  }
  if (change.op == ChangeOp::kInsert && !columns)
    return DecodeError(data_start, "insert into " + change.QualifiedTable() + " without 'columns'");
  const JsonValue* identity = Member(doc, "identity");
  if (identity) {
    WALRELAY_RETURN_IF_ERROR(ReadColumns(*identity, data_start, "identity", change.identity));
  } else {
    change.identity.clear();
  }
  change.primary_key.clear();
  if (const JsonValue* pk = Member(doc, "pk"); pk && pk->IsArray()) {
    for (const auto& item : pk->GetArray()) {
      const JsonValue* name = item.IsObject() ? Member(item, "name") : nullptr;
      if (name && name->IsString()) change.primary_key.emplace_back(name->GetString());
    }
  }
  // A number rendered by wal2json arrives as a string token via kParseNumbersAsStringsFlag;
  // mark it by the column type so consumers render it unquoted.
  auto mark_numbers = [](std::vector<Column>& cols) {
    for (auto& c : cols) {
      if (c.kind != ValueKind::kString || c.text.empty()) continue;
      const std::string& t = c.type;
      if (t == "integer" || t == "bigint" || t == "smallint" || t == "real" ||
          t == "double precision" || t.rfind("numeric", 0) == 0 || t == "oid") {
        c.kind = ValueKind::kNumber;
      }
    }
  };
  mark_numbers(change.columns);
  mark_numbers(change.identity);
  return Status::Ok();
}

}  // namespace walrelay
