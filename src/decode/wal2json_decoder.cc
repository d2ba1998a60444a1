#include "decode/wal2json_decoder.h"

#include <rapidjson/encodedstream.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

#include <algorithm>
#include <optional>

#include "common/pg_time.h"

namespace walrelay {
namespace {

Status DecodeError(Lsn at, const std::string& what) {
  return Status::Decode("wal2json message at LSN " + at.ToString() + ": " + what);
}

// wal2json's deepest structure is object > array > object; anything much deeper is not
// wal2json, and refusing it early bounds the reader's stack.
constexpr int kMaxDepth = 16;

enum class JsonType : uint8_t { kAbsent, kNull, kBool, kString, kObject, kArray };

// One scalar member of the top-level object, as first seen (later duplicates are ignored,
// as a DOM lookup would find the first).
struct Scalar {
  JsonType type = JsonType::kAbsent;
  bool boolean = false;
  std::string text;  // string or number digits

  bool is_string() const { return type == JsonType::kString; }
  std::string_view view() const { return text; }
};

// An array of column objects ("columns", "identity") or key objects ("pk").
struct ColumnArray {
  JsonType type = JsonType::kAbsent;
  size_t count = 0;  // entries written to the output vector
  bool entry_not_object = false;
  bool entry_without_name = false;
  std::string bad_value_column;  // first column whose value is an object or array
  bool bad_value = false;
};

}  // namespace

// A SAX handler for one wal2json format-version 2 message. It writes column entries straight
// into the caller's DecodedMessage (reusing their string capacity) instead of building a DOM
// and copying out of it: the decoder runs once per row, and the DOM's allocations and copies
// were most of its cost.
class Wal2JsonDecoder::Parser
    : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, Wal2JsonDecoder::Parser> {
 public:
  enum class Top {
    kNone,
    kAction,
    kXid,
    kTimestamp,
    kLsn,
    kNextLsn,
    kSchema,
    kTable,
    kTransactional,
    kPrefix,
    kContent,
    kColumns,
    kIdentity,
    kPk,
    kIgnored,
  };
  enum class Entry { kNone, kName, kType, kValue, kIgnored };

  Scalar action, xid, timestamp, lsn, nextlsn, schema, table, transactional, prefix, content;
  ColumnArray columns, identity, pk;
  bool top_is_object = false;
  bool too_deep = false;
  bool excluded = false;  // the filter refused the row's table; parsing stopped there
  TableFilter table_filter;
  size_t pk_names() const { return pk_names_; }  // names written to primary_key

  // Recreated after a very large message, whose text would otherwise stay allocated in the
  // reader's stack for the life of the stream.
  std::optional<rapidjson::Reader> reader{std::in_place};
  static constexpr size_t kLargeMessage = 256 * 1024;

  void Reset(RowChange& change) {
    for (Scalar* s : {&action, &xid, &timestamp, &lsn, &nextlsn, &schema, &table, &transactional,
                      &prefix, &content}) {
      s->type = JsonType::kAbsent;
      s->text.clear();
    }
    for (ColumnArray* a : {&columns, &identity, &pk}) *a = ColumnArray{};
    top_is_object = false;
    too_deep = false;
    excluded = false;
    depth_ = 0;
    top_ = Top::kNone;
    entry_field_ = Entry::kNone;
    change_ = &change;
    pk_names_ = 0;
  }

  // Handler events. Depth 1 is the message object, 2 an array member, 3 an entry object.
  bool StartObject() { return Open(JsonType::kObject); }
  bool StartArray() { return Open(JsonType::kArray); }
  bool EndObject(rapidjson::SizeType) { return Close(); }
  bool EndArray(rapidjson::SizeType) { return Close(); }
  bool Key(const char* str, rapidjson::SizeType len, bool) {
    const std::string_view key(str, len);
    if (depth_ == 1) {
      top_ = TopField(key);
    } else if (depth_ == 3 && current_array_ != nullptr) {
      entry_field_ = key == "name"    ? Entry::kName
                     : key == "type"  ? Entry::kType
                     : key == "value" ? Entry::kValue
                                      : Entry::kIgnored;
    }
    return true;
  }
  bool Null() { return Value(JsonType::kNull, false, {}); }
  bool Bool(bool b) { return Value(JsonType::kBool, b, {}); }
  bool String(const char* str, rapidjson::SizeType len, bool) {
    return Value(JsonType::kString, false, std::string_view(str, len));
  }
  // kParseNumbersAsStringsFlag: numbers arrive as their digits, so bigint and numeric keep
  // every digit; they are strings to the decoder, told apart by column type afterwards.
  bool RawNumber(const char* str, rapidjson::SizeType len, bool) {
    return Value(JsonType::kString, false, std::string_view(str, len));
  }

 private:
  Top TopField(std::string_view key) const {
    static constexpr std::pair<std::string_view, Top> kFields[] = {
        {"action", Top::kAction},
        {"xid", Top::kXid},
        {"timestamp", Top::kTimestamp},
        {"lsn", Top::kLsn},
        {"nextlsn", Top::kNextLsn},
        {"schema", Top::kSchema},
        {"table", Top::kTable},
        {"columns", Top::kColumns},
        {"identity", Top::kIdentity},
        {"pk", Top::kPk},
        {"transactional", Top::kTransactional},
        {"prefix", Top::kPrefix},
        {"content", Top::kContent},
    };
    for (const auto& [name, field] : kFields)
      if (name == key) return field;
    return Top::kIgnored;
  }

  Scalar* TopScalar() {
    switch (top_) {
      case Top::kAction: return &action;
      case Top::kXid: return &xid;
      case Top::kTimestamp: return &timestamp;
      case Top::kLsn: return &lsn;
      case Top::kNextLsn: return &nextlsn;
      case Top::kSchema: return &schema;
      case Top::kTable: return &table;
      case Top::kTransactional: return &transactional;
      case Top::kPrefix: return &prefix;
      case Top::kContent: return &content;
      default: return nullptr;
    }
  }
  ColumnArray* TopArray() {
    switch (top_) {
      case Top::kColumns: return &columns;
      case Top::kIdentity: return &identity;
      case Top::kPk: return &pk;
      default: return nullptr;
    }
  }
  std::vector<Column>* ColumnsOf(const ColumnArray* array) {
    if (array == &columns) return &change_->columns;
    if (array == &identity) return &change_->identity;
    return nullptr;  // pk entries only contribute their name
  }

  bool Open(JsonType type) {
    if (++depth_ > kMaxDepth) {
      too_deep = true;
      return false;
    }
    if (depth_ == 1) {
      top_is_object = type == JsonType::kObject;
      return true;
    }
    if (depth_ == 2) {
      // A member's value is a container: only the three arrays are of interest.
      if (Scalar* s = TopScalar(); s && s->type == JsonType::kAbsent) s->type = type;
      ColumnArray* array = TopArray();
      if (array && array->type == JsonType::kAbsent) {
        array->type = type;
        current_array_ = type == JsonType::kArray ? array : nullptr;
      } else {
        current_array_ = nullptr;
      }
      return true;
    }
    if (depth_ == 3 && current_array_ != nullptr) {
      if (type != JsonType::kObject) {
        current_array_->entry_not_object = true;
        return true;
      }
      BeginEntry();
      return true;
    }
    if (depth_ == 4 && current_array_ != nullptr && entry_field_ == Entry::kValue) {
      // A column value that is an object or array: wal2json renders json as a string.
      MarkBadValue();
    }
    return true;
  }

  bool Close() {
    if (depth_ == 3 && current_array_ != nullptr && in_entry_) EndEntry();
    if (depth_ == 2) current_array_ = nullptr;
    --depth_;
    return true;
  }

  bool Value(JsonType type, bool boolean, std::string_view text) {
    if (depth_ == 0) return true;  // a bare scalar document: not an object, reported later
    if (depth_ == 1) {
      if (Scalar* s = TopScalar(); s && s->type == JsonType::kAbsent) {
        s->type = type;
        s->boolean = boolean;
        s->text.assign(text);
        if ((s == &schema || s == &table) && RefusedByFilter()) {
          excluded = true;
          return false;  // stops the reader: the rest of the row is never looked at
        }
      } else if (ColumnArray* a = TopArray(); a && a->type == JsonType::kAbsent) {
        a->type = type;
      }
      return true;
    }
    if (depth_ == 2 && current_array_ != nullptr) {
      current_array_->entry_not_object = true;
      return true;
    }
    if (depth_ == 3 && current_array_ != nullptr && in_entry_) EntryValue(type, boolean, text);
    return true;
  }

  void BeginEntry() {
    in_entry_ = true;
    seen_name_ = seen_type_ = seen_value_ = false;
    name_is_string_ = false;
    entry_field_ = Entry::kNone;
    std::vector<Column>* cols = ColumnsOf(current_array_);
    if (cols) {
      if (cols->size() <= current_array_->count) cols->emplace_back();
      Column& col = (*cols)[current_array_->count];
      col.name.clear();
      col.type.clear();
      col.text.clear();
      col.kind = ValueKind::kNull;
    } else {
      pk_name_.clear();
    }
  }

  void EntryValue(JsonType type, bool boolean, std::string_view text) {
    std::vector<Column>* cols = ColumnsOf(current_array_);
    Column* col = cols ? &(*cols)[current_array_->count] : nullptr;
    switch (entry_field_) {
      case Entry::kName:
        if (seen_name_) return;
        seen_name_ = true;
        name_is_string_ = type == JsonType::kString;
        if (name_is_string_) (col ? col->name : pk_name_).assign(text);
        return;
      case Entry::kType:
        if (seen_type_ || !col) return;
        seen_type_ = true;
        if (type == JsonType::kString) col->type.assign(text);
        return;
      case Entry::kValue:
        if (seen_value_ || !col) return;
        seen_value_ = true;
        if (type == JsonType::kBool) {
          col->kind = ValueKind::kBool;
          col->text = boolean ? "true" : "false";
        } else if (type == JsonType::kString) {
          col->kind = ValueKind::kString;
          col->text.assign(text);
        }
        return;
      default: return;
    }
  }

  void MarkBadValue() {
    if (seen_value_) return;
    seen_value_ = true;
    current_array_->bad_value = true;
    bad_value_pending_ = true;
  }

  void EndEntry() {
    in_entry_ = false;
    std::vector<Column>* cols = ColumnsOf(current_array_);
    if (bad_value_pending_) {
      bad_value_pending_ = false;
      if (current_array_->bad_value_column.empty() && cols)
        current_array_->bad_value_column = (*cols)[current_array_->count].name;
    }
    if (!name_is_string_) {
      // pk entries without a name are skipped; a column must have one.
      if (cols) current_array_->entry_without_name = true;
      return;
    }
    if (!cols) {
      if (pk_names_ < change_->primary_key.size()) {
        change_->primary_key[pk_names_] = pk_name_;
      } else {
        change_->primary_key.push_back(pk_name_);
      }
      ++pk_names_;
      ++current_array_->count;
      return;
    }
    ++current_array_->count;
  }

  // wal2json writes "schema" and "table" before the columns, so the filter can answer before
  // any column is read.
  bool RefusedByFilter() const {
    return table_filter && schema.is_string() && table.is_string() &&
           !table_filter(schema.view(), table.view());
  }

  int depth_ = 0;
  Top top_ = Top::kNone;
  ColumnArray* current_array_ = nullptr;
  Entry entry_field_ = Entry::kNone;
  bool in_entry_ = false;
  bool seen_name_ = false, seen_type_ = false, seen_value_ = false;
  bool name_is_string_ = false;
  bool bad_value_pending_ = false;
  std::string pk_name_;
  size_t pk_names_ = 0;
  RowChange* change_ = nullptr;
};

Wal2JsonDecoder::Wal2JsonDecoder() : parser_(std::make_unique<Parser>()) {}
Wal2JsonDecoder::Wal2JsonDecoder(DecoderOptions options)
    : parser_(std::make_unique<Parser>()), options_(std::move(options)) {}
Wal2JsonDecoder::~Wal2JsonDecoder() = default;
Wal2JsonDecoder::Wal2JsonDecoder(Wal2JsonDecoder&&) noexcept = default;
Wal2JsonDecoder& Wal2JsonDecoder::operator=(Wal2JsonDecoder&&) noexcept = default;

void Wal2JsonDecoder::SetTableFilter(TableFilter filter) {
  parser_->table_filter = std::move(filter);
}

Result<int64_t> Wal2JsonDecoder::CommitTime(std::string_view text) {
  if (text == last_timestamp_text_) return last_timestamp_us_;
  auto us = ParsePgTimestampMicros(text);
  if (!us.ok()) return us.status();
  last_timestamp_text_.assign(text);
  last_timestamp_us_ = *us;
  return *us;
}

namespace {

Status CheckColumns(const ColumnArray& array, Lsn at, const char* field) {
  if (array.type != JsonType::kArray)
    return DecodeError(at, std::string("'") + field + "' is not an array");
  if (array.entry_not_object)
    return DecodeError(at, std::string("'") + field + "' entry is not an object");
  if (array.entry_without_name)
    return DecodeError(at, std::string("'") + field + "' entry without a string 'name'");
  if (array.bad_value)
    return DecodeError(at, "column '" + array.bad_value_column + "' has an unsupported JSON value");
  return Status::Ok();
}

// A number rendered by wal2json arrives as a string token via kParseNumbersAsStringsFlag;
// mark it by the column type so consumers render it unquoted.
void MarkNumbers(std::vector<Column>& cols) {
  for (auto& c : cols) {
    if (c.kind != ValueKind::kString || c.text.empty()) continue;
    if (IsNumberTypeName(c.type)) c.kind = ValueKind::kNumber;
  }
}

// Primary-key columns are never NULL (Debezium's optional=false).
void MarkKeyColumns(RowChange& change) {
  for (auto* cols : {&change.columns, &change.identity}) {
    for (auto& c : *cols) {
      c.optional = std::find(change.primary_key.begin(), change.primary_key.end(), c.name) ==
                   change.primary_key.end();
    }
  }
}

}  // namespace

Status Wal2JsonDecoder::Decode(std::string_view json, Lsn data_start, DecodedMessage& out) {
  Parser& p = *parser_;
  p.Reset(out.change);
  rapidjson::MemoryStream memory(json.data(), json.size());
  rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> input(memory);
  // Iterative: the recursive parser overflows the stack on deeply nested input instead of
  // reporting it.
  const rapidjson::ParseResult parsed =
      p.reader->Parse<rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseIterativeFlag>(input,
                                                                                              p);
  if (json.size() > Parser::kLargeMessage) p.reader.emplace();
  if (p.excluded) {
    txn_has_changes_ = true;
    out.kind = MessageKind::kExcludedChange;
    out.change.schema.assign(p.schema.text);
    out.change.table.assign(p.table.text);
    auto lsn = p.lsn.is_string() ? Lsn::Parse(p.lsn.view()) : Result<Lsn>(data_start);
    out.change.lsn = lsn.ok() ? *lsn : data_start;
    return Status::Ok();
  }
  if (p.too_deep) {
    return DecodeError(data_start, "JSON nested deeper than " + std::to_string(kMaxDepth) +
                                       " levels, which wal2json never produces");
  }
  if (parsed.IsError()) {
    return DecodeError(data_start, std::string("invalid JSON (") +
                                       rapidjson::GetParseError_En(parsed.Code()) + " at offset " +
                                       std::to_string(parsed.Offset()) + ")");
  }
  if (!p.top_is_object) return DecodeError(data_start, "not a JSON object");
  if (!p.action.is_string() || p.action.text.size() != 1)
    return DecodeError(data_start, "missing or invalid 'action'");
  const char act = p.action.text[0];

  uint32_t xid = 0;
  if (p.xid.is_string()) xid = static_cast<uint32_t>(std::strtoul(p.xid.text.c_str(), nullptr, 10));
  int64_t time_us = current_commit_time_us_;
  if (p.timestamp.is_string()) {
    auto commit_time = CommitTime(p.timestamp.view());
    if (!commit_time.ok())
      return commit_time.status().WithContext("at LSN " + data_start.ToString());
    time_us = *commit_time;
  }
  const int64_t time_ms = time_us / 1000 - (time_us % 1000 < 0 ? 1 : 0);
  auto lsn_of = [&](const Scalar& field, const char* name) -> Result<Lsn> {
    if (!field.is_string()) return DecodeError(data_start, std::string("missing '") + name + "'");
    return Lsn::Parse(field.view());
  };

  switch (act) {
    case 'B': {
      out.kind = MessageKind::kBegin;
      out.begin.xid = xid;
      out.begin.commit_time_ms = time_ms;
      current_commit_time_us_ = time_us;
      auto first = lsn_of(p.lsn, "lsn");
      out.begin.first_lsn = first.ok() ? *first : data_start;
      return Status::Ok();
    }
    case 'C': {
      out.kind = MessageKind::kCommit;
      out.commit.xid = xid;
      out.commit.commit_time_ms = time_ms;
      // dataStart of a commit is the end of the commit record (what "nextlsn" also says).
      out.commit.end_lsn = data_start;
      if (p.nextlsn.is_string()) {
        auto next = Lsn::Parse(p.nextlsn.view());
        if (!next.ok()) return next.status().WithContext("commit at " + data_start.ToString());
        out.commit.end_lsn = *next;
      }
      // pgoutput sends no empty transaction (PostgreSQL 15), so Debezium never sees one.
      if (txn_has_changes_) previous_commit_end_ = out.commit.end_lsn;
      txn_has_changes_ = false;
      return Status::Ok();
    }
    case 'M': {
      txn_has_changes_ = true;
      out.kind = MessageKind::kMessage;
      out.message.lsn = data_start;
      out.message.transactional =
          p.transactional.type == JsonType::kBool && p.transactional.boolean;
      out.message.prefix = p.prefix.is_string() ? p.prefix.text : "";
      out.message.content = p.content.is_string() ? p.content.text : "";
      return Status::Ok();
    }
    case 'I':
    case 'U':
    case 'D':
    case 'T': break;
    default: return DecodeError(data_start, std::string("unknown action '") + act + "'");
  }

  txn_has_changes_ = true;
  RowChange& change = out.change;
  out.kind = MessageKind::kChange;
  change.op = act == 'I'   ? ChangeOp::kInsert
              : act == 'U' ? ChangeOp::kUpdate
              : act == 'D' ? ChangeOp::kDelete
                           : ChangeOp::kTruncate;
  auto lsn = lsn_of(p.lsn, "lsn");
  change.lsn = lsn.ok() ? *lsn : data_start;
  change.xid = xid;
  change.commit_time_ms = time_ms;
  change.commit_time_us = time_us;
  change.previous_commit_end = previous_commit_end_;
  change.before.clear();
  if (!p.schema.is_string() || !p.table.is_string())
    return DecodeError(data_start, "change without 'schema' and 'table'");
  change.schema.assign(p.schema.text);
  change.table.assign(p.table.text);

  const bool has_columns = p.columns.type != JsonType::kAbsent;
  if (has_columns) WALRELAY_RETURN_IF_ERROR(CheckColumns(p.columns, data_start, "columns"));
  change.columns.resize(has_columns ? p.columns.count : 0);
  if (change.op == ChangeOp::kInsert && !has_columns)
    return DecodeError(data_start, "insert into " + change.QualifiedTable() + " without 'columns'");
  const bool has_identity = p.identity.type != JsonType::kAbsent;
  if (has_identity) WALRELAY_RETURN_IF_ERROR(CheckColumns(p.identity, data_start, "identity"));
  change.identity.resize(has_identity ? p.identity.count : 0);
  change.primary_key.resize(p.pk.type == JsonType::kArray ? p.pk_names() : 0);
  MarkNumbers(change.columns);
  MarkNumbers(change.identity);
  MarkKeyColumns(change);
  if (change.op == ChangeOp::kUpdate && options_.catalog.table_columns) FillUnchangedToast(change);
  FillBefore(change);
  return Status::Ok();
}

void Wal2JsonDecoder::FillBefore(RowChange& change) {
  if (change.op == ChangeOp::kUpdate) {
    // wal2json writes the key as the identity of every update; pgoutput sends an old tuple,
    // and Debezium a before image, only when the key changed or under REPLICA IDENTITY FULL.
    bool old_tuple = false;
    for (const Column& old : change.identity) {
      const bool key = std::find(change.primary_key.begin(), change.primary_key.end(), old.name) !=
                       change.primary_key.end();
      const Column* now = change.Find(old.name);
      if (!key || now == nullptr || now->kind != old.kind || now->text != old.text) {
        old_tuple = true;
        break;
      }
    }
    if (!old_tuple) return;
  } else if (change.op != ChangeOp::kDelete) {
    return;
  }
  auto find = [&](const std::string& name) -> const Column* {
    for (const auto& c : change.identity)
      if (c.name == name) return &c;
    return nullptr;
  };
  // Every column of the table: the new row's for an update, the catalog's for a delete.
  std::optional<std::vector<CatalogColumn>> table;
  if (change.op == ChangeOp::kDelete && options_.catalog.table_columns)
    table = options_.catalog.table_columns(change.schema, change.table);
  if (change.op == ChangeOp::kDelete && !table) {
    change.before = change.identity;
    return;
  }
  const size_t count = table ? table->size() : change.columns.size();
  change.before.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string& name = table ? (*table)[i].name : change.columns[i].name;
    Column& out = change.before[i];
    if (const Column* old = find(name)) {
      out = *old;
      continue;
    }
    out.name = name;
    out.type = table ? (*table)[i].type : change.columns[i].type;
    out.optional = table ? !(*table)[i].not_null : change.columns[i].optional;
    out.kind = ValueKind::kNull;
    out.text.clear();
  }
}

void Wal2JsonDecoder::FillUnchangedToast(RowChange& change) {
  const auto table = options_.catalog.table_columns(change.schema, change.table);
  if (!table || table->size() <= change.columns.size()) return;
  auto find = [](std::vector<Column>& columns, const std::string& name) -> Column* {
    for (auto& c : columns)
      if (c.name == name) return &c;
    return nullptr;
  };
  // Only columns the catalog knows: a row with one it does not (the table changed since)
  // stays as wal2json wrote it.
  for (const auto& c : change.columns) {
    bool known = false;
    for (const auto& t : *table) known = known || t.name == c.name;
    if (!known) return;
  }
  filled_.resize(table->size());
  for (size_t i = 0; i < table->size(); ++i) {
    const CatalogColumn& t = (*table)[i];
    Column& out = filled_[i];
    if (Column* present = find(change.columns, t.name)) {
      out = std::move(*present);
    } else if (Column* old = find(change.identity, t.name)) {
      out = *old;  // REPLICA IDENTITY FULL: the old row holds the unchanged value
    } else {
      out.name = t.name;
      out.type = t.type;
      out.kind = ValueKind::kString;
      out.text.assign(t.type == "bytea" ? kUnavailableValuePlaceholderHex
                                        : kUnavailableValuePlaceholder);
    }
  }
  change.columns.swap(filled_);
}

Status Wal2JsonDecoder::Decode(std::string_view json, Lsn data_start) {
  pending_ = false;
  WALRELAY_RETURN_IF_ERROR(Decode(json, data_start, decoded_));
  pending_ = true;
  return Status::Ok();
}

const DecodedMessage* Wal2JsonDecoder::Next() {
  if (!pending_) return nullptr;
  pending_ = false;
  return &decoded_;
}

}  // namespace walrelay
