#include "transform/change_event_source.h"

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
    case ValueKind::kNull:
      writer.Null();
      return;
    case ValueKind::kBool:
      writer.Bool(column.text == "true");
      return;
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

void WriteColumnsObject(const std::vector<Column>& columns, JsonWriter& writer) {
  writer.StartObject();
  for (const auto& c : columns) {
    WriteJsonKey(writer, c.name);
    WriteColumnJson(c, writer);
  }
  writer.EndObject();
}

Record MakeSourceRecord(const RowChange& change, const SourceContext& ctx) {
  Record record;
  record.topic = ctx.topic_prefix + "." + change.schema + "." + change.table;
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
      rapidjson::StringBuffer buffer;
      JsonWriter writer(buffer);
      writer.StartObject();
      for (const Column* c : key_columns) {
        WriteJsonKey(writer, c->name);
        WriteColumnJson(*c, writer);
      }
      writer.EndObject();
      record.key = std::string(buffer.GetString(), buffer.GetSize());
    }
  }
  record.timestamp_ms = change.commit_time_ms;
  record.source.lsn = change.lsn;
  record.source.table = change.QualifiedTable();
  record.source.commit_time_ms = change.commit_time_ms;
  record.source.op = change.op;
  record.source.xid = change.xid;
  record.change = &change;
  return record;
}

void WriteSourceBlock(JsonWriter& w, const SourceContext& ctx, std::string_view schema,
                      std::string_view table, int64_t commit_time_ms, uint32_t xid, Lsn lsn) {
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

std::string SerializeChangeEvent(const RowChange& change, const SourceContext& ctx,
                                 int64_t now_ms) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();

  w.Key("before");
  const bool has_before = (change.op == ChangeOp::kDelete || change.op == ChangeOp::kUpdate) &&
                          !change.identity.empty();
  if (has_before) {
    WriteColumnsObject(change.identity, w);
  } else {
    w.Null();
  }
  w.Key("after");
  if (change.op == ChangeOp::kInsert || change.op == ChangeOp::kUpdate) {
    WriteColumnsObject(change.columns, w);
  } else {
    w.Null();
  }

  w.Key("source");
  WriteSourceBlock(w, ctx, change.schema, change.table, change.commit_time_ms, change.xid,
                   change.lsn);

  w.Key("op");
  const char op = static_cast<char>(change.op);
  w.String(&op, 1);
  w.Key("ts_ms");
  w.Int64(now_ms);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace walrelay
