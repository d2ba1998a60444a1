#include "transform/message_event.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <charconv>
#include <utility>

namespace walrelay {
namespace {

// Deeper content is refused rather than risking the parser's recursion on hostile input.
constexpr int kMaxContentDepth = 64;

std::string Where(const LogicalMessage& message) {
  return MessageOrigin(message.prefix) + " at LSN " + message.lsn.ToString();
}

// The column type a JSON number gets (see the header).
const char* NumberTypeName(std::string_view digits) {
  if (digits.find_first_of(".eE") != std::string_view::npos) return "double precision";
  int32_t small = 0;
  auto [end32, ec32] = std::from_chars(digits.data(), digits.data() + digits.size(), small);
  if (ec32 == std::errc() && end32 == digits.data() + digits.size()) return "integer";
  int64_t big = 0;
  auto [end64, ec64] = std::from_chars(digits.data(), digits.data() + digits.size(), big);
  if (ec64 == std::errc() && end64 == digits.data() + digits.size()) return "bigint";
  return "numeric";
}

// SAX handler for the content: top-level members become columns; a nested object or array
// becomes one "json" column whose text is cut from the content itself, so its bytes are the
// application's (no re-serialization).
class ContentColumns : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, ContentColumns> {
 public:
  ContentColumns(std::string_view content, const rapidjson::MemoryStream& stream,
                 bool include_nulls, std::vector<Column>& columns)
      : content_(content), stream_(stream), include_nulls_(include_nulls), columns_(columns) {}

  bool StartObject() { return Open(); }
  bool EndObject(rapidjson::SizeType) { return Close(); }
  bool StartArray() {
    if (depth_ == 0) return Refuse("it is a JSON array");
    return Open();
  }
  bool EndArray(rapidjson::SizeType) { return Close(); }

  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (depth_ == 1) {
      name_.assign(s, n);
      value_start_ = stream_.Tell();
    }
    return true;
  }
  // Debezium infers an optional BYTES schema for a null member it keeps (JsonSchemaData with
  // OPTIONAL_BYTES); a NULL "bytea" column has that schema.
  bool Null() { return Scalar(ValueKind::kNull, "bytea", {}); }
  bool Bool(bool b) { return Scalar(ValueKind::kBool, "boolean", b ? "true" : "false"); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    const std::string_view digits(s, n);
    return Scalar(ValueKind::kNumber, NumberTypeName(digits), digits);
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    return Scalar(ValueKind::kString, "text", std::string_view(s, n));
  }

  // Set when the handler stopped the parse: why.
  const std::string& problem() const { return problem_; }

 private:
  bool Open() {
    if (++depth_ > kMaxContentDepth) {
      return Refuse("it nests deeper than " + std::to_string(kMaxContentDepth) + " levels");
    }
    return true;
  }
  bool Close() {
    --depth_;
    if (depth_ != 1) return true;
    // A nested value just ended: its text runs from after the member's key to here, past
    // the colon and blanks.
    std::string_view text = content_.substr(value_start_, stream_.Tell() - value_start_);
    const size_t start = text.find_first_of("{[");
    text.remove_prefix(start == std::string_view::npos ? text.size() : start);
    return Add(ValueKind::kString, "json", text);
  }
  bool Scalar(ValueKind kind, const char* type, std::string_view text) {
    if (depth_ == 0) return Refuse("it is a single JSON value");
    if (depth_ > 1) return true;  // part of a nested value, taken whole at its end
    if (kind == ValueKind::kNull && !include_nulls_) {
      Remove(name_);
      return true;
    }
    return Add(kind, type, text);
  }
  bool Add(ValueKind kind, const char* type, std::string_view text) {
    Remove(name_);
    Column& column = columns_.emplace_back();
    column.name = name_;
    column.type = type;
    column.kind = kind;
    column.text.assign(text);
    return true;
  }
  // A repeated member replaces the earlier one.
  void Remove(const std::string& name) {
    for (auto it = columns_.begin(); it != columns_.end(); ++it) {
      if (it->name == name) {
        columns_.erase(it);
        return;
      }
    }
  }
  bool Refuse(std::string why) {
    problem_ = std::move(why);
    return false;
  }

  const std::string_view content_;
  const rapidjson::MemoryStream& stream_;
  const bool include_nulls_;
  std::vector<Column>& columns_;
  int depth_ = 0;
  std::string name_;
  size_t value_start_ = 0;
  std::string problem_;
};

class DecodeMessageContentTransform final : public Transform {
 public:
  DecodeMessageContentTransform(std::string alias, bool include_nulls)
      : alias_(std::move(alias)), include_nulls_(include_nulls) {}

  const std::string& alias() const override { return alias_; }

  Result<TransformOutcome> Apply(Record& record) override {
    if (record.message == nullptr) return TransformOutcome::kKeep;
    WALRELAY_RETURN_IF_ERROR(DecodeMessageContent(
        *record.message, record.source.xid, record.source.commit_time_ms, include_nulls_, row_));
    // Debezium's transform clears the key (the prefix) and makes the value an insert.
    record.key.reset();
    record.value.reset();
    record.key_shape = ConnectShape{};
    record.value_shape = ConnectShape{};
    record.change = &row_;
    record.message = nullptr;
    record.source.op = ChangeOp::kInsert;
    return TransformOutcome::kKeep;
  }

 private:
  const std::string alias_;
  const bool include_nulls_;
  RowChange row_;  // the record's change while it goes through the rest of the chain
};

}  // namespace

Record MakeMessageRecord(const LogicalMessage& message, uint32_t xid, int64_t commit_time_ms,
                         const SourceContext& ctx, int64_t now_ms) {
  Record record;
  record.topic = ctx.topic_prefix + kMessageTopicSuffix;
  {
    rapidjson::StringBuffer buffer;
    JsonWriter w(buffer);
    w.StartObject();
    w.Key("prefix");
    WriteJsonString(w, message.prefix);
    w.EndObject();
    record.key = std::string(buffer.GetString(), buffer.GetSize());
  }
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("op");
  w.String("m");
  w.Key("ts_ms");
  w.Int64(now_ms);
  w.Key("source");
  WriteSourceBlock(w, ctx, "", "", commit_time_ms, xid, message.lsn);
  w.Key("message");
  w.StartObject();
  w.Key("prefix");
  WriteJsonString(w, message.prefix);
  w.Key("content");
  WriteJsonString(w, Base64(message.content));
  w.EndObject();
  w.EndObject();
  record.value = std::string(buffer.GetString(), buffer.GetSize());
  // Structs, as Debezium's message key and event are; their Connect schemas are not written
  // (JsonConverter with schemas gives "schema":null for them).
  record.key_shape = ConnectShape{ConnectType::kStruct, ""};
  record.value_shape = ConnectShape{ConnectType::kStruct, ""};
  record.timestamp_ms = commit_time_ms;
  record.source.lsn = message.lsn;
  record.source.message_prefix = message.prefix;
  record.source.commit_time_ms = commit_time_ms;
  record.source.op = ChangeOp::kMessage;
  record.source.xid = xid;
  record.message = &message;
  return record;
}

Status DecodeMessageContent(const LogicalMessage& message, uint32_t xid, int64_t commit_time_ms,
                            bool include_null_members, RowChange& row) {
  row.op = ChangeOp::kInsert;
  row.lsn = message.lsn;
  row.xid = xid;
  row.commit_time_ms = commit_time_ms;
  row.schema.clear();
  row.table.clear();
  row.columns.clear();
  row.identity.clear();
  row.primary_key.clear();

  const std::string& content = message.content;
  rapidjson::MemoryStream stream(content.data(), content.size());
  ContentColumns handler(content, stream, include_null_members, row.columns);
  rapidjson::Reader reader;
  constexpr unsigned kFlags =
      rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseValidateEncodingFlag;
  const rapidjson::ParseResult parsed = reader.Parse<kFlags>(stream, handler);
  if (parsed) return Status::Ok();
  row.columns.clear();
  // The content itself stays out of the message: it may hold personal data.
  const std::string why = !handler.problem().empty()
                              ? handler.problem()
                              : std::string(rapidjson::GetParseError_En(parsed.Code())) +
                                    " at offset " + std::to_string(parsed.Offset());
  return Status::Transform("the content of the " + Where(message) +
                           " is not a JSON object: " + why +
                           "; pg_logical_emit_message() content for the outbox must be a JSON "
                           "object whose members are named like the outbox table's columns");
}

Result<std::unique_ptr<Transform>> MakeDecodeMessageContent(const std::string& alias,
                                                            const Properties& props) {
  auto include_nulls = props.GetBool("fields.null.include", false);
  if (!include_nulls.ok()) return include_nulls.status();
  return std::unique_ptr<Transform>(
      std::make_unique<DecodeMessageContentTransform>(alias, *include_nulls));
}

}  // namespace walrelay
