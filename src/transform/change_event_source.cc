#include "transform/change_event_source.h"

#include "transform/connect_column.h"

#ifndef WALRELAY_VERSION
#error "WALRELAY_VERSION must be defined (the build sets it from the project version)"
#endif

namespace walrelay {
namespace {

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string Base64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t n = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kBase64Alphabet[(n >> 18) & 63];
    out += kBase64Alphabet[(n >> 12) & 63];
    out += kBase64Alphabet[(n >> 6) & 63];
    out += kBase64Alphabet[n & 63];
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const uint32_t n = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (two ? static_cast<uint8_t>(bytes[i + 1]) << 8 : 0);
    out += kBase64Alphabet[(n >> 18) & 63];
    out += kBase64Alphabet[(n >> 12) & 63];
    out += two ? kBase64Alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// JSON's number grammar. wal2json only marks numeric types as numbers and turns NaN and
// Infinity into null, so this holds in practice; anything else is written as a string rather
// than producing invalid JSON.
bool IsJsonNumber(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (digits() == 0) {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

const Column* FindColumn(const std::vector<Column>& columns, std::string_view name) {
  for (const auto& c : columns)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace

bool IsBytea(const Column& column) { return column.type == "bytea"; }

std::optional<std::string> DecodeByteaHex(std::string_view hex) {
  if (hex.size() >= 2 && hex[0] == '\\' && hex[1] == 'x') hex.remove_prefix(2);
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexDigit(hex[i]);
    const int lo = HexDigit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>((hi << 4) | lo);
  }
  return out;
}

Result<std::optional<std::string>> ColumnBytes(const Column& column) {
  if (column.is_null()) return std::optional<std::string>();
  if (!IsBytea(column)) return std::optional<std::string>(column.text);
  auto bytes = DecodeByteaHex(column.text);
  if (!bytes) {
    return Status::Transform("bytea column '" + column.name + "' holds invalid hex '" +
                             column.text.substr(0, 32) + "'");
  }
  return bytes;
}

void WriteColumnJson(const Column& column, JsonWriter& writer) {
  switch (column.kind) {
    case ValueKind::kNull: writer.Null(); return;
    case ValueKind::kBool: writer.Bool(column.text == "true"); return;
    case ValueKind::kNumber:
      if (IsJsonNumber(column.text)) {
        // Raw digits: bigint and numeric must not round-trip through a double.
        writer.RawValue(column.text.data(), column.text.size(), rapidjson::kNumberType);
      } else {
        writer.String(column.text);
      }
      return;
    case ValueKind::kString:
      if (IsBytea(column)) {
        if (auto bytes = DecodeByteaHex(column.text)) {
          writer.String(Base64(*bytes));
          return;
        }
      }
      writer.String(column.text);
      return;
  }
}

std::string RenderColumnJson(const Column& column) {
  rapidjson::StringBuffer buffer;
  JsonWriter writer(buffer);
  WriteColumnJson(column, writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

void WriteColumnsObject(const std::vector<Column>& columns, JsonWriter& writer,
                        const ColumnModes& modes) {
  writer.StartObject();
  for (const auto& c : columns) {
    WriteJsonKey(writer, c.name);
    WriteColumnJson(c, modes, writer);
  }
  writer.EndObject();
}

namespace {
constexpr size_t kKeepKeyBufferBytes = 64 * 1024;
}  // namespace

void SetSourceTopicAndKey(Record& record, const RowChange& change, const SourceContext& ctx) {
  // Built in place: each `+` of a concatenation allocates, and this runs for every row.
  record.topic.reserve(ctx.topic_prefix.size() + change.schema.size() + change.table.size() + 2);
  record.topic.append(ctx.topic_prefix)
      .append(1, '.')
      .append(change.schema)
      .append(1, '.')
      .append(change.table);
  // Debezium keys a change by its primary key; a delete only has the old key image.
  const std::vector<Column>& image =
      change.op == ChangeOp::kDelete ? change.identity : change.columns;
  if (!change.primary_key.empty()) {
    std::vector<const Column*> key_columns;
    for (const auto& name : change.primary_key) {
      const Column* c = FindColumn(image, name);
      if (c == nullptr) break;
      key_columns.push_back(c);
    }
    if (key_columns.size() == change.primary_key.size()) {
      // One buffer per thread, cleared: a fresh one grows (reallocates) for every key.
      thread_local rapidjson::StringBuffer buffer;
      buffer.Clear();
      JsonWriter writer(buffer);
      writer.StartObject();
      for (const Column* c : key_columns) {
        WriteJsonKey(writer, c->name);
        WriteColumnJson(*c, ctx.modes, writer);
      }
      writer.EndObject();
      record.key = std::string(buffer.GetString(), buffer.GetSize());
      if (buffer.GetSize() > kKeepKeyBufferBytes) {
        buffer.Clear();
        buffer.ShrinkToFit();  // an outsized key's memory is not kept for the thread's life
      }
    }
  }
}

Record MakeSourceRecord(const RowChange& change, const SourceContext& ctx,
                        SourceTopicAndKey topic_and_key) {
  Record record;
  if (topic_and_key == SourceTopicAndKey::kBuild) SetSourceTopicAndKey(record, change, ctx);
  record.timestamp_ms = change.commit_time_ms;
  record.source.lsn = change.lsn;
  record.source.table.reserve(change.schema.size() + change.table.size() + 1);
  record.source.table.append(change.schema).append(1, '.').append(change.table);
  record.source.commit_time_ms = change.commit_time_ms;
  record.source.op = change.op;
  record.source.xid = change.xid;
  record.change = &change;
  return record;
}

Record MakeTombstoneRecord(const RowChange& change, const SourceContext& ctx,
                           SourceTopicAndKey topic_and_key) {
  Record record = MakeSourceRecord(change, ctx, topic_and_key);
  record.source.tombstone = true;
  return record;
}

namespace {

// The members every Debezium PostgreSQL source block starts with, after its opening brace.
void WriteSourceBlockHead(JsonWriter& w, const SourceContext& ctx, int64_t commit_time_ms) {
  w.StartObject();
  w.Key("version");
  w.String(WALRELAY_VERSION);
  w.Key("connector");
  w.String("postgresql");
  w.Key("name");
  w.String(ctx.topic_prefix);
  w.Key("ts_ms");
  w.Int64(commit_time_ms);
  w.Key("snapshot");
  w.String("false");
  w.Key("db");
  w.String(ctx.database);
}

}  // namespace

void WriteSourceBlock(JsonWriter& w, const SourceContext& ctx, std::string_view schema,
                      std::string_view table, int64_t commit_time_ms, uint32_t xid, Lsn lsn) {
  WriteSourceBlockHead(w, ctx, commit_time_ms);
  w.Key("schema");
  WriteJsonString(w, schema);
  w.Key("table");
  WriteJsonString(w, table);
  w.Key("txId");
  w.Uint(xid);
  w.Key("lsn");
  w.Uint64(lsn.value());
  w.EndObject();
}

namespace {

// Debezium's PostgreSQL source block of a change event.
void WriteChangeSourceBlock(JsonWriter& w, const SourceContext& ctx, const RowChange& change) {
  const int64_t commit_us =
      change.commit_time_us != 0 ? change.commit_time_us : change.commit_time_ms * 1000;
  WriteSourceBlockHead(w, ctx, change.commit_time_ms);
  // [last commit's end LSN, this change's LSN], both as decimal strings, as a JSON text.
  w.Key("sequence");
  const std::string lsn = std::to_string(change.lsn.value());
  const std::string sequence =
      "[" +
      (change.previous_commit_end
           ? "\"" + std::to_string(change.previous_commit_end->value()) + "\""
           : std::string("null")) +
      ",\"" + lsn + "\"]";
  WriteJsonString(w, sequence);
  w.Key("ts_us");
  w.Int64(commit_us);
  w.Key("ts_ns");
  w.Int64(commit_us * 1000);
  w.Key("schema");
  WriteJsonString(w, change.schema);
  w.Key("table");
  WriteJsonString(w, change.table);
  w.Key("txId");
  w.Uint(change.xid);
  w.Key("lsn");
  w.Uint64(change.lsn.value());
  // Debezium reads the slot's xmin only with xmin.fetch.interval.ms set, which walrelay does not.
  w.Key("xmin");
  w.Null();
  // Debezium 3.6 names the replication origin of a transaction applied by logical replication
  // (pgoutput's Origin message); walrelay's decoder does not read that message, so both are
  // null, as Debezium's are for every transaction written on this server itself.
  w.Key("origin");
  w.Null();
  w.Key("origin_lsn");
  w.Null();
  w.EndObject();
}

}  // namespace

std::string SerializeChangeEvent(const RowChange& change, const SourceContext& ctx,
                                 int64_t now_ms) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();

  w.Key("before");
  if (!change.before.empty() &&
      (change.op == ChangeOp::kDelete || change.op == ChangeOp::kUpdate)) {
    WriteColumnsObject(change.before, w, ctx.modes);
  } else {
    w.Null();
  }
  w.Key("after");
  if (change.op == ChangeOp::kInsert || change.op == ChangeOp::kUpdate) {
    WriteColumnsObject(change.columns, w, ctx.modes);
  } else {
    w.Null();
  }

  w.Key("source");
  WriteChangeSourceBlock(w, ctx, change);
  w.Key("transaction");
  w.Null();

  w.Key("op");
  const char op = static_cast<char>(change.op);
  w.String(&op, 1);
  w.Key("ts_ms");
  w.Int64(now_ms);
  w.Key("ts_us");
  w.Int64(now_ms * 1000);
  w.Key("ts_ns");
  w.Int64(now_ms * 1000000);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

namespace {

std::string JsonText(std::string_view s) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  WriteJsonString(w, s);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// A column's schema as a struct field: the schema with "field" as its last member.
std::string FieldSchema(const Column& column, const ColumnModes& modes) {
  std::string schema = ColumnSchemaJson(column, modes);
  schema.pop_back();
  return schema + ",\"field\":" + JsonText(column.name) + "}";
}

std::string StructSchema(const std::vector<const Column*>& columns, const ColumnModes& modes,
                         bool optional, const std::string& name) {
  std::string out = "{\"type\":\"struct\",\"fields\":[";
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) out += ',';
    out += FieldSchema(*columns[i], modes);
  }
  out += std::string("],\"optional\":") + (optional ? "true" : "false") +
         ",\"name\":" + JsonText(name);
  return out;
}

constexpr char kSourceSchema[] =
    R"({"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},)"
    R"({"type":"string","optional":false,"field":"connector"},)"
    R"({"type":"string","optional":false,"field":"name"},)"
    R"({"type":"int64","optional":false,"field":"ts_ms"},)"
    R"({"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,)"
    R"("parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,)"
    R"(last,false,incremental"},"default":"false","field":"snapshot"},)"
    R"({"type":"string","optional":false,"field":"db"},)"
    R"({"type":"string","optional":true,"field":"sequence"},)"
    R"({"type":"int64","optional":true,"field":"ts_us"},)"
    R"({"type":"int64","optional":true,"field":"ts_ns"},)"
    R"({"type":"string","optional":false,"field":"schema"},)"
    R"({"type":"string","optional":false,"field":"table"},)"
    R"({"type":"int64","optional":true,"field":"txId"},)"
    R"({"type":"int64","optional":true,"field":"lsn"},)"
    R"({"type":"int64","optional":true,"field":"xmin"},)"
    R"({"type":"string","optional":true,"field":"origin"},)"
    R"({"type":"int64","optional":true,"field":"origin_lsn"}],"optional":false,)"
    R"("name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"})";

constexpr char kTransactionSchema[] =
    R"({"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},)"
    R"({"type":"int64","optional":false,"field":"total_order"},)"
    R"({"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,)"
    R"("name":"event.block","version":1,"field":"transaction"})";

std::string SchemaNamePrefix(const RowChange& change, const SourceContext& ctx) {
  return ctx.topic_prefix + "." + change.schema + "." + change.table;
}

}  // namespace

std::string ChangeEventKeySchemaJson(const RowChange& change, const SourceContext& ctx) {
  const std::vector<Column>& image =
      change.op == ChangeOp::kDelete ? change.identity : change.columns;
  if (change.primary_key.empty()) return "";
  std::vector<const Column*> key;
  for (const auto& name : change.primary_key) {
    const Column* c = FindColumn(image, name);
    if (c == nullptr) return "";
    key.push_back(c);
  }
  return StructSchema(key, ctx.modes, false, SchemaNamePrefix(change, ctx) + ".Key") + "}";
}

std::string ChangeEventSchemaJson(const RowChange& change, const SourceContext& ctx) {
  // The table's columns: the new row's, or for a delete the before image's.
  const std::vector<Column>& image = change.op == ChangeOp::kDelete
                                         ? (change.before.empty() ? change.identity : change.before)
                                         : change.columns;
  std::vector<const Column*> columns;
  columns.reserve(image.size());
  for (const auto& c : image) columns.push_back(&c);
  const std::string prefix = SchemaNamePrefix(change, ctx);
  const std::string value = StructSchema(columns, ctx.modes, true, prefix + ".Value");
  std::string out = "{\"type\":\"struct\",\"fields\":[";
  out += value + ",\"field\":\"before\"},";
  out += value + ",\"field\":\"after\"},";
  out += kSourceSchema;
  out += ',';
  out += kTransactionSchema;
  out += R"(,{"type":"string","optional":false,"field":"op"},)"
         R"({"type":"int64","optional":true,"field":"ts_ms"},)"
         R"({"type":"int64","optional":true,"field":"ts_us"},)"
         R"({"type":"int64","optional":true,"field":"ts_ns"}],"optional":false,"name":)";
  out += JsonText(prefix + ".Envelope") + ",\"version\":2}";
  return out;
}

}  // namespace walrelay
