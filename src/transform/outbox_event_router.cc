#include "transform/outbox_event_router.h"

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/pg_time.h"
#include "transform/change_event_source.h"
#include "transform/java_regex.h"
#include "transform/trace_context.h"

namespace walrelay {
namespace {

// Route values have low cardinality (one per aggregate type), so a plain map that is cleared
// when it grows this large keeps the regex off the hot path without an LRU.
constexpr size_t kTopicCacheLimit = 10000;
// Nesting limit for expanded JSON payloads; deeper documents are kept as text.
constexpr size_t kMaxJsonDepth = 512;

// ---------------------------------------------------------------------------------------------
// Configuration

enum class Placement { kHeader, kEnvelope, kPartition };

struct AdditionalField {
  std::string column;
  Placement placement = Placement::kHeader;
  std::string alias;  // header name or envelope member; unused for partition
};

enum class InvalidOpBehavior { kWarn, kError, kFatal };
enum class NameAdjustment { kNone, kAvro, kAvroUnicode };

struct RouterConfig {
  std::string id_column;
  std::string key_column;
  std::string payload_column;
  std::optional<std::string> timestamp_column;
  std::optional<std::string> schema_version_column;  // versions the envelope's schema
  std::vector<AdditionalField> additional;
  bool envelope_mode = false;  // at least one envelope placement, decided by config alone
  bool ignore_missing_additional = false;
  std::string route_column;
  bool tombstone_on_empty = false;
  InvalidOpBehavior invalid_op = InvalidOpBehavior::kWarn;
  bool expand_json = false;
  bool keep_json_nulls = false;         // table.json.payload.null.behavior=optional_bytes
  bool keep_empty_json_arrays = false;  // table.json.payload.empty.array.behavior=optional_string
  NameAdjustment name_adjustment = NameAdjustment::kNone;
  std::string trace_context_column;     // tracing.span.context.field
  bool trace_only_with_context = true;  // tracing.with.context.field.only

  // Full key names, for record-level messages.
  std::string id_key, key_key, payload_key, timestamp_key, route_key, placement_key, missing_key,
      invalid_op_key;
};

Status ConfigError(const Properties& props, const std::string& key, const std::string& what) {
  return Status::Config("'" + props.FullKey(key) + "' " + what);
}

// A key naming a column: trimmed (PostgreSQL column names do not start or end with blanks in
// practice, and property files often carry trailing spaces), and never empty.
Result<std::string> ReadColumnKey(const Properties& props, const std::string& key,
                                  const std::string& default_value) {
  const std::string value = Trim(props.GetString(key, default_value));
  if (value.empty()) return ConfigError(props, key, "must name a column");
  return value;
}

// An optional column key: unset or blank means "not used".
std::optional<std::string> ReadOptionalColumnKey(const Properties& props, const std::string& key) {
  auto value = props.Get(key);
  if (!value) return std::nullopt;
  std::string trimmed = Trim(*value);
  if (trimmed.empty()) return std::nullopt;
  return trimmed;
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.emplace_back(s.substr(start, at == std::string_view::npos ? s.npos : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

// `column:placement[:alias]` entries, comma-separated. Unlike Debezium, an unknown placement
// word, an empty entry or an empty alias is refused here rather than failing (or being
// silently tolerated) on the first record.
Status ReadPlacements(const Properties& props, RouterConfig& config) {
  const std::string key = "table.fields.additional.placement";
  auto raw = props.Get(key);
  if (!raw) return Status::Ok();
  if (Trim(*raw).empty()) {
    return ConfigError(props, key, "is empty; list column:placement[:alias] entries or remove it");
  }
  std::unordered_set<std::string> envelope_aliases;
  for (const std::string& untrimmed : Split(*raw, ',')) {
    const std::string entry = Trim(untrimmed);
    if (entry.empty()) {
      return ConfigError(props, key, "has an empty entry in '" + *raw + "'");
    }
    std::vector<std::string> parts = Split(entry, ':');
    if (parts.size() < 2 || parts.size() > 3) {
      return ConfigError(
          props, key, "entry '" + entry + "' must be column:placement or column:placement:alias");
    }
    for (auto& p : parts) p = Trim(p);
    AdditionalField field;
    field.column = parts[0];
    if (field.column.empty()) return ConfigError(props, key, "entry '" + entry + "' has no column");
    const std::string placement = ToLower(parts[1]);
    if (placement == "header") {
      field.placement = Placement::kHeader;
    } else if (placement == "envelope") {
      field.placement = Placement::kEnvelope;
    } else if (placement == "partition") {
      field.placement = Placement::kPartition;
    } else {
      return ConfigError(props, key,
                         "entry '" + entry + "' has unknown placement '" + parts[1] +
                             "' (allowed: header, envelope, partition)");
    }
    if (parts.size() == 3 && parts[2].empty()) {
      return ConfigError(props, key, "entry '" + entry + "' has an empty alias");
    }
    field.alias = parts.size() == 3 ? parts[2] : field.column;
    if (field.placement == Placement::kEnvelope) {
      // Debezium fails on the first record when an envelope member collides.
      if (field.alias == "payload") {
        return ConfigError(props, key,
                           "entry '" + entry +
                               "' would overwrite the envelope's 'payload' member; "
                               "give it another alias");
      }
      if (!envelope_aliases.insert(field.alias).second) {
        return ConfigError(props, key,
                           "entry '" + entry + "' repeats envelope member '" + field.alias + "'");
      }
      config.envelope_mode = true;
    }
    config.additional.push_back(std::move(field));
  }
  return Status::Ok();
}

Status ReadMissingBehavior(const Properties& props, RouterConfig& config) {
  const std::string key = "table.field.additional.missing";
  const std::string legacy_key = "table.fields.additional.error.on.missing";
  auto mode = props.GetEnum(key, "error", {"error", "ignore"});
  if (!mode.ok()) return mode.status();
  auto legacy = props.GetBool(legacy_key, true);
  if (!legacy.ok()) return legacy.status();
  const bool has_new = props.Has(key);
  const bool has_legacy = props.Has(legacy_key);
  if (has_new && has_legacy && (mode.value() == "ignore") == legacy.value()) {
    return Status::Config("'" + props.FullKey(key) + "' and its older form '" +
                          props.FullKey(legacy_key) + "' disagree; keep only '" +
                          props.FullKey(key) + "'");
  }
  config.ignore_missing_additional = has_new ? mode.value() == "ignore" : !legacy.value();
  return Status::Ok();
}

// Keys Debezium removed: silently ignoring them would route with defaults the user did not ask
// for, so they are refused with the new name.
Status RejectRemovedKeys(const Properties& props) {
  static const std::pair<const char*, const char*> kRemoved[] = {
      {"table.field.event.payload.id", "table.field.event.key"},
      {"debezium.op.invalid.behavior", "table.op.invalid.behavior"},
      {"debezium.expand.json.payload", "table.expand.json.payload"},
  };
  for (const auto& [old_key, new_key] : kRemoved) {
    if (props.Has(old_key)) {
      return Status::Config("'" + props.FullKey(old_key) + "' was removed from Debezium; use '" +
                            props.FullKey(new_key) + "'");
    }
  }
  return Status::Ok();
}

// tracing.* keys: the trace context column and which rows carry trace headers
// (trace_context.h). tracing.operation.name names Debezium's span, which walrelay does not
// create, so it is only accepted. Other tracing.* keys are accepted as Debezium accepts them.
Status ReadTracingKeys(const Properties& props, RouterConfig& config) {
  config.trace_context_column = props.GetString("tracing.span.context.field", "tracingspancontext");
  props.Has("tracing.operation.name");
  // Debezium's EventRouter turns this on when the key is absent, although the key's own
  // default is false: only rows that carry a context are traced unless it is set to false.
  auto only_with_context = props.GetBool("tracing.with.context.field.only", true);
  if (!only_with_context.ok()) return only_with_context.status();
  config.trace_only_with_context = only_with_context.value();
  const std::string prefix = props.FullKey("tracing.");
  for (auto it = props.values().lower_bound(prefix);
       it != props.values().end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    props.MarkRead(it->first);
  }
  return Status::Ok();
}

Result<RouterConfig> ReadConfig(const Properties& props) {
  WALRELAY_RETURN_IF_ERROR(RejectRemovedKeys(props));
  RouterConfig c;

  auto id = ReadColumnKey(props, "table.field.event.id", "id");
  if (!id.ok()) return id.status();
  c.id_column = id.value();
  auto key = ReadColumnKey(props, "table.field.event.key", "aggregateid");
  if (!key.ok()) return key.status();
  c.key_column = key.value();
  // The event type column only matters when a placement names it; read so it counts as known.
  auto type = ReadColumnKey(props, "table.field.event.type", "type");
  if (!type.ok()) return type.status();
  auto payload = ReadColumnKey(props, "table.field.event.payload", "payload");
  if (!payload.ok()) return payload.status();
  c.payload_column = payload.value();
  c.timestamp_column = ReadOptionalColumnKey(props, "table.field.event.timestamp");
  // Stamps a version on the envelope's Connect schema (JsonConverter with schemas).
  c.schema_version_column = ReadOptionalColumnKey(props, "table.field.event.schema.version");

  WALRELAY_RETURN_IF_ERROR(ReadPlacements(props, c));
  WALRELAY_RETURN_IF_ERROR(ReadMissingBehavior(props, c));

  auto route = ReadColumnKey(props, "route.by.field", "aggregatetype");
  if (!route.ok()) return route.status();
  c.route_column = route.value();

  auto tombstone = props.GetBool("route.tombstone.on.empty.payload", false);
  if (!tombstone.ok()) return tombstone.status();
  c.tombstone_on_empty = tombstone.value();

  auto invalid_op = props.GetEnum("table.op.invalid.behavior", "warn", {"warn", "error", "fatal"});
  if (!invalid_op.ok()) return invalid_op.status();
  c.invalid_op = invalid_op.value() == "warn"    ? InvalidOpBehavior::kWarn
                 : invalid_op.value() == "error" ? InvalidOpBehavior::kError
                                                 : InvalidOpBehavior::kFatal;

  auto expand = props.GetBool("table.expand.json.payload", false);
  if (!expand.ok()) return expand.status();
  c.expand_json = expand.value();
  auto nulls =
      props.GetEnum("table.json.payload.null.behavior", "ignore", {"ignore", "optional_bytes"});
  if (!nulls.ok()) return nulls.status();
  c.keep_json_nulls = nulls.value() == "optional_bytes";
  auto arrays = props.GetEnum("table.json.payload.empty.array.behavior", "ignore",
                              {"ignore", "optional_string"});
  if (!arrays.ok()) return arrays.status();
  c.keep_empty_json_arrays = arrays.value() == "optional_string";
  auto adjust =
      props.GetEnum("field.name.adjustment.mode", "none", {"none", "avro", "avro_unicode"});
  if (!adjust.ok()) return adjust.status();
  c.name_adjustment = adjust.value() == "none"   ? NameAdjustment::kNone
                      : adjust.value() == "avro" ? NameAdjustment::kAvro
                                                 : NameAdjustment::kAvroUnicode;

  WALRELAY_RETURN_IF_ERROR(ReadTracingKeys(props, c));

  c.id_key = props.FullKey("table.field.event.id");
  c.key_key = props.FullKey("table.field.event.key");
  c.payload_key = props.FullKey("table.field.event.payload");
  c.timestamp_key = props.FullKey("table.field.event.timestamp");
  c.route_key = props.FullKey("route.by.field");
  c.placement_key = props.FullKey("table.fields.additional.placement");
  c.missing_key = props.FullKey("table.field.additional.missing");
  c.invalid_op_key = props.FullKey("table.op.invalid.behavior");
  return c;
}

// ---------------------------------------------------------------------------------------------
// Column typing (wal2json type names, PostgreSQL 15)

// A type name without its modifier ("timestamp(3) without time zone" is "timestamp" +
// " without time zone"), as two pieces of the name: no string is built for every routed row.
struct BaseTypeName {
  std::string_view head;
  std::string_view tail;  // empty without a modifier
  explicit BaseTypeName(std::string_view type) : head(type) {
    const size_t open = type.find('(');
    if (open == std::string_view::npos) return;
    const size_t close = type.find(')', open);
    if (close == std::string_view::npos) return;
    head = type.substr(0, open);
    tail = type.substr(close + 1);
  }
  bool operator==(std::string_view base) const {
    return base.size() == head.size() + tail.size() && base.starts_with(head) &&
           base.ends_with(tail);
  }
};

// Whether Debezium's PostgreSQL connector gives this column a Connect STRING schema, the only
// type route.by.field accepts. Numbers and booleans are typed by wal2json; the rest of the
// non-string types are recognised by name (date/time types become INT32/INT64 in Debezium).
bool IsConnectString(const Column& column) {
  if (column.kind == ValueKind::kNumber || column.kind == ValueKind::kBool) return false;
  const std::string& type = column.type;
  if (type.size() >= 2 && type.compare(type.size() - 2, 2, "[]") == 0) return false;
  // clang-format off
  static constexpr std::string_view kNonString[] = {
      "smallint", "integer", "bigint", "numeric", "real", "double precision", "money", "oid",
      "boolean", "bit", "bit varying", "bytea", "date", "interval", "time without time zone",
      "timestamp without time zone"};
  // clang-format on
  const BaseTypeName base(type);
  for (std::string_view non_string : kNonString)
    if (base == non_string) return false;
  return true;
}

// Debezium accepts only INT64 columns named Timestamp/MicroTimestamp/NanoTimestamp; from
// PostgreSQL that is `timestamp [(p)] without time zone`.
bool IsTimestampWithoutTimeZone(const Column& column) {
  return BaseTypeName(column.type) == "timestamp without time zone";
}

// Java's String.trim() bound: everything up to U+0020 counts as blank.
bool IsBlankText(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) > 0x20) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// JSON payload expansion

struct JsonMember;
struct JsonNode {
  enum class Type { kNull, kFalse, kTrue, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  std::string text;  // number digits exactly as written, or the decoded string
  std::vector<JsonMember> members;
  std::vector<JsonNode> elements;
};
struct JsonMember {
  std::string name;
  JsonNode value;
};

// Builds a JsonNode tree from RapidJSON's SAX events. Numbers arrive as their original text
// (kParseNumbersAsStringsFlag) so big integers and decimals keep every digit.
class JsonTreeBuilder : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, JsonTreeBuilder> {
 public:
  bool Null() {
    Add(JsonNode::Type::kNull);
    return true;
  }
  bool Bool(bool b) {
    Add(b ? JsonNode::Type::kTrue : JsonNode::Type::kFalse);
    return true;
  }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    return AddText(JsonNode::Type::kNumber, s, n);
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    return AddText(JsonNode::Type::kString, s, n);
  }
  bool StartObject() { return Open(JsonNode::Type::kObject); }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    pending_key_.assign(s, n);
    return true;
  }
  bool EndObject(rapidjson::SizeType) { return Close(); }
  bool StartArray() { return Open(JsonNode::Type::kArray); }
  bool EndArray(rapidjson::SizeType) { return Close(); }

  JsonNode& root() { return root_; }
  bool too_deep() const { return too_deep_; }

 private:
  // Pointers on the stack stay valid: only the innermost open container grows, and the
  // stack holds that container and its ancestors, never its children.
  JsonNode* Add(JsonNode::Type type) {
    JsonNode* node = nullptr;
    if (stack_.empty()) {
      node = &root_;
    } else if (stack_.back()->type == JsonNode::Type::kObject) {
      stack_.back()->members.push_back(JsonMember{std::move(pending_key_), JsonNode{}});
      pending_key_.clear();
      node = &stack_.back()->members.back().value;
    } else {
      stack_.back()->elements.emplace_back();
      node = &stack_.back()->elements.back();
    }
    node->type = type;
    return node;
  }
  bool AddText(JsonNode::Type type, const char* s, rapidjson::SizeType n) {
    Add(type)->text.assign(s, n);
    return true;
  }
  bool Open(JsonNode::Type type) {
    if (stack_.size() >= kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    stack_.push_back(Add(type));
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }

  JsonNode root_;
  std::vector<JsonNode*> stack_;
  std::string pending_key_;
  bool too_deep_ = false;
};

// Reads one UTF-8 code point (U+FFFD for an invalid byte) and advances `i`.
char32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto lead = static_cast<unsigned char>(s[i]);
  size_t len = lead < 0x80             ? 1
               : (lead & 0xE0) == 0xC0 ? 2
               : (lead & 0xF0) == 0xE0 ? 3
               : (lead & 0xF8) == 0xF0 ? 4
                                       : 0;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  char32_t cp = len == 1 ? lead : lead & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto cont = static_cast<unsigned char>(s[i + k]);
    if ((cont & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cont & 0x3F);
  }
  i += len;
  return cp;
}

// Debezium's field.name.adjustment.mode for expanded member names. Debezium works on UTF-16
// code units: a character outside the BMP counts as two invalid characters.
//   avro:         [A-Za-z_] first, [A-Za-z0-9_] after; others -> "_" (a leading digit is kept
//                 after the "_": "1a" -> "_1a").
//   avro_unicode: [A-Za-z] first, [A-Za-z0-9] after; others -> "_u" + lower-case hex of the
//                 code unit, padded to 4 digits only when it has 1 or 2 ("$" -> "_u0024").
std::string AdjustName(const std::string& name, NameAdjustment mode) {
  if (mode == NameAdjustment::kNone || name.empty()) return name;
  const bool unicode = mode == NameAdjustment::kAvroUnicode;
  std::vector<char16_t> units;
  for (size_t i = 0; i < name.size();) {
    const char32_t cp = NextCodePoint(name, i);
    if (cp >= 0x10000) {
      units.push_back(static_cast<char16_t>(0xD800 + ((cp - 0x10000) >> 10)));
      units.push_back(static_cast<char16_t>(0xDC00 + ((cp - 0x10000) & 0x3FF)));
    } else {
      units.push_back(static_cast<char16_t>(cp));
    }
  }
  std::string out;
  for (size_t i = 0; i < units.size(); ++i) {
    const char16_t u = units[i];
    const bool letter = (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z');
    const bool digit = u >= '0' && u <= '9';
    const bool valid = letter || (!unicode && u == '_') || (i > 0 && digit);
    if (valid) {
      out += static_cast<char>(u);
    } else if (!unicode) {
      out += '_';
      if (i == 0 && digit) out += static_cast<char>(u);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      std::string hex;
      for (unsigned v = u; v != 0 || hex.empty(); v >>= 4) hex.insert(hex.begin(), kHex[v & 15]);
      out += hex.size() <= 2 ? "_u00" + hex : "_u" + hex;
    }
  }
  return out;
}

class ExpandedJsonWriter {
 public:
  ExpandedJsonWriter(const RouterConfig& config, JsonWriter& writer)
      : config_(config), writer_(writer) {}

  void Write(const JsonNode& node) {
    switch (node.type) {
      case JsonNode::Type::kNull: writer_.Null(); return;
      case JsonNode::Type::kFalse: writer_.Bool(false); return;
      case JsonNode::Type::kTrue: writer_.Bool(true); return;
      case JsonNode::Type::kNumber:
        writer_.RawValue(node.text.data(), node.text.size(), rapidjson::kNumberType);
        return;
      case JsonNode::Type::kString: WriteJsonString(writer_, node.text); return;
      case JsonNode::Type::kArray:
        writer_.StartArray();
        for (const auto& e : node.elements) Write(e);
        writer_.EndArray();
        return;
      case JsonNode::Type::kObject: WriteObject(node); return;
    }
  }

 private:
  // Members are first merged by (adjusted) name the way Jackson reads duplicates, at the
  // first position with the last value; then null members and empty arrays are dropped unless
  // their behaviour keeps them (Debezium infers no schema for them).
  void WriteObject(const JsonNode& node) {
    std::vector<std::string> names;
    names.reserve(node.members.size());
    std::unordered_map<std::string, size_t> last;
    for (size_t i = 0; i < node.members.size(); ++i) {
      names.push_back(AdjustName(node.members[i].name, config_.name_adjustment));
      last[names.back()] = i;
    }
    std::unordered_set<std::string> written;
    writer_.StartObject();
    for (size_t i = 0; i < node.members.size(); ++i) {
      if (!written.insert(names[i]).second) continue;
      const JsonNode& value = node.members[last[names[i]]].value;
      if (value.type == JsonNode::Type::kNull && !config_.keep_json_nulls) continue;
      if (value.type == JsonNode::Type::kArray && value.elements.empty() &&
          !config_.keep_empty_json_arrays) {
        continue;
      }
      WriteJsonKey(writer_, names[i]);
      Write(value);
    }
    writer_.EndObject();
  }

  const RouterConfig& config_;
  JsonWriter& writer_;
};

// Debezium's schema inference for an expanded payload (JsonSchemaData.toConnectSchema, then
// toConnectData): the Connect schema JsonConverter writes for it, or nothing where Debezium's
// inference or conversion throws and it sends the payload unexpanded. Where Debezium merges the
// schemas of an array's object elements it iterates a HashSet whose order changes from one
// JVM run to the next; here they merge in the order the elements come.
struct InferredField;

struct InferredSchema {
  enum class Type { kString, kBoolean, kInt32, kInt64, kFloat64, kBytes, kArray, kStruct };
  Type type = Type::kString;
  bool optional = true;  // false only for merged array elements (SchemaUtil.copySchemaBasics)
  std::optional<std::string> name;    // structs: the member path
  std::vector<InferredField> fields;  // structs: the members, in order
  std::vector<InferredSchema> items;  // arrays: the one element schema

  // Defined below InferredField, which needs this struct complete.
  bool operator==(const InferredSchema& o) const;
  // As JsonConverter.asJsonSchema writes it; `field` names a struct member.
  void Write(JsonWriter& w, const std::string* field = nullptr) const;
};

// A struct member: its name and schema (a pair of its own, as std::pair would need the schema
// complete where InferredSchema declares its members).
struct InferredField {
  InferredField(std::string member, InferredSchema member_schema)
      : first(std::move(member)), second(std::move(member_schema)) {}
  std::string first;
  InferredSchema second;
  bool operator==(const InferredField& o) const = default;
};

bool InferredSchema::operator==(const InferredSchema& o) const {
  return type == o.type && optional == o.optional && name == o.name && fields == o.fields &&
         items == o.items;
}

void InferredSchema::Write(JsonWriter& w, const std::string* field) const {
  static constexpr const char* kNames[] = {"string", "boolean", "int32", "int64",
                                           "double", "bytes",   "array", "struct"};
  w.StartObject();
  w.Key("type");
  w.String(kNames[static_cast<int>(type)]);
  if (type == Type::kStruct) {
    w.Key("fields");
    w.StartArray();
    for (const auto& member : fields) member.second.Write(w, &member.first);
    w.EndArray();
  } else if (type == Type::kArray) {
    w.Key("items");
    items.front().Write(w);
  }
  w.Key("optional");
  w.Bool(optional);
  if (name) {
    w.Key("name");
    WriteJsonString(w, *name);
  }
  if (field != nullptr) {
    w.Key("field");
    WriteJsonString(w, *field);
  }
  w.EndObject();
}

class SchemaInference {
 public:
  explicit SchemaInference(const RouterConfig& config) : config_(config) {}

  // The schema of the whole payload, named after the payload column, if Debezium has one.
  std::optional<std::string> PayloadSchema(const JsonNode& root) {
    // A top-level array gets a schema but no Struct to hold it: Debezium's conversion throws.
    if (root.type != JsonNode::Type::kObject) return std::nullopt;
    std::optional<InferredSchema> schema = Infer(config_.payload_column, root);
    if (failed_ || !schema || !Fits(root, *schema)) return std::nullopt;
    rapidjson::StringBuffer buffer;
    JsonWriter writer(buffer);
    schema->Write(writer);
    return std::string(buffer.GetString(), buffer.GetSize());
  }

 private:
  using Type = InferredSchema::Type;

  // Jackson's node class for a number: IntNode, LongNode, BigIntegerNode (nullopt: Debezium
  // types it FLOAT64 but converts it to a BigDecimal, which the schema refuses) or DoubleNode.
  static std::optional<Type> NumberType(const std::string& digits) {
    if (digits.find_first_of(".eE") != std::string::npos) return Type::kFloat64;
    int32_t small = 0;
    auto [end32, ec32] = std::from_chars(digits.data(), digits.data() + digits.size(), small);
    if (ec32 == std::errc() && end32 == digits.data() + digits.size()) return Type::kInt32;
    int64_t big = 0;
    auto [end64, ec64] = std::from_chars(digits.data(), digits.data() + digits.size(), big);
    if (ec64 == std::errc() && end64 == digits.data() + digits.size()) return Type::kInt64;
    return std::nullopt;
  }

  // toConnectSchema: nullopt for a member Debezium leaves out (null, empty array); failed_
  // set where it throws.
  std::optional<InferredSchema> Infer(const std::optional<std::string>& key, const JsonNode& node) {
    InferredSchema s;
    switch (node.type) {
      case JsonNode::Type::kString: return s;
      case JsonNode::Type::kTrue:
      case JsonNode::Type::kFalse: s.type = Type::kBoolean; return s;
      case JsonNode::Type::kNumber: {
        auto type = NumberType(node.text);
        if (!type) {
          failed_ = true;
          return std::nullopt;
        }
        s.type = *type;
        return s;
      }
      case JsonNode::Type::kNull:
        if (!config_.keep_json_nulls) return std::nullopt;
        s.type = Type::kBytes;
        return s;
      case JsonNode::Type::kArray: {
        if (node.elements.empty()) {
          if (!config_.keep_empty_json_arrays) return std::nullopt;
          s.type = Type::kArray;
          s.items.emplace_back();
          return s;
        }
        auto items = ElementSchema(key, node);
        if (!items) {
          failed_ = true;
          return std::nullopt;
        }
        s.type = Type::kArray;
        s.items.push_back(std::move(*items));
        return s;
      }
      case JsonNode::Type::kObject: {
        s.type = Type::kStruct;
        s.name = key;
        // Jackson keeps the last of repeated names at the first one's place.
        std::unordered_map<std::string, const JsonNode*> last;
        for (const auto& m : node.members) last[m.name] = &m.value;
        std::unordered_set<std::string> seen;
        for (const auto& m : node.members) {
          if (!seen.insert(m.name).second) continue;
          const std::string name = AdjustName(m.name, config_.name_adjustment);
          const std::string path = key && !IsBlankText(*key) ? *key + "." + name : name;
          auto field = Infer(path, *last[m.name]);
          if (failed_) return std::nullopt;
          bool present = false;
          for (const auto& f : s.fields) present = present || f.first == name;
          if (field && !present) s.fields.emplace_back(name, std::move(*field));
        }
        return s;
      }
    }
    return std::nullopt;
  }

  // toConnectSchemaWithCycles: the element schema of a non-empty array, or nullopt where
  // Debezium throws (elements of different JSON types or number classes, only nulls).
  std::optional<InferredSchema> ElementSchema(const std::optional<std::string>& key,
                                              const JsonNode& array) {
    const JsonNode* sample = nullptr;
    std::optional<Type> number;
    for (const JsonNode& e : array.elements) {
      if (e.type == JsonNode::Type::kNull) continue;
      if (sample == nullptr) sample = &e;
      const bool same_kind = e.type == sample->type || (IsBool(e) && IsBool(*sample));
      if (!same_kind) return std::nullopt;
      if (e.type == JsonNode::Type::kNumber) {
        auto type = NumberType(e.text);
        if (!type || (number && *number != *type)) return std::nullopt;
        number = type;
      }
    }
    if (sample == nullptr) {
      JsonNode null_node;
      auto schema = Infer(std::nullopt, null_node);
      return schema;
    }
    if (sample->type != JsonNode::Type::kObject) {
      auto schema = Infer(std::nullopt, *sample);
      if (failed_) return std::nullopt;
      return schema;
    }
    std::optional<InferredSchema> merged;
    std::vector<InferredSchema> distinct;  // Debezium's HashSet of element schemas
    for (const JsonNode& e : array.elements) {
      if (e.type != JsonNode::Type::kObject) continue;
      auto schema = Infer(key, e);
      if (failed_ || !schema) return std::nullopt;
      if (std::find(distinct.begin(), distinct.end(), *schema) != distinct.end()) continue;
      distinct.push_back(*schema);
      if (!merged) {
        merged = std::move(schema);
        continue;
      }
      // A merged schema is built anew from the left one's basics, which leave out optional.
      merged->optional = false;
      // mergeSchema: the left's fields, then the right's new ones; a BYTES field (a null
      // kept as optional bytes) gives way to a typed one.
      for (auto& entry : schema->fields) {
        const std::string& name = entry.first;
        InferredSchema& field = entry.second;
        auto it = std::find_if(merged->fields.begin(), merged->fields.end(),
                               [&](const auto& f) { return f.first == name; });
        if (it == merged->fields.end()) {
          merged->fields.emplace_back(name, std::move(field));
        } else if (it->second.type == Type::kBytes && field.type != Type::kBytes) {
          it->second = std::move(field);
        }
      }
    }
    return merged;
  }

  static bool IsBool(const JsonNode& n) {
    return n.type == JsonNode::Type::kTrue || n.type == JsonNode::Type::kFalse;
  }

  // Whether Debezium's conversion of `node` under `schema` passes Connect's validation: every
  // member the schema names holds a value of the schema's type (its other members are left
  // out). Names are looked up as written, as Debezium does.
  bool Fits(const JsonNode& node, const InferredSchema& schema) const {
    switch (node.type) {
      case JsonNode::Type::kNull: return schema.optional;
      case JsonNode::Type::kString: return schema.type == Type::kString;
      case JsonNode::Type::kTrue:
      case JsonNode::Type::kFalse: return schema.type == Type::kBoolean;
      case JsonNode::Type::kNumber: return NumberType(node.text) == schema.type;
      case JsonNode::Type::kArray:
        if (schema.type != Type::kArray) return false;
        for (const JsonNode& e : node.elements)
          if (!Fits(e, schema.items.front())) return false;
        return true;
      case JsonNode::Type::kObject:
        if (schema.type != Type::kStruct) return false;
        for (const auto& [name, field] : schema.fields) {
          const JsonNode* value = nullptr;
          for (const auto& m : node.members)
            if (m.name == name) value = &m.value;
          if (value != nullptr && !Fits(*value, field)) return false;
        }
        return true;
    }
    return false;
  }

  const RouterConfig& config_;
  bool failed_ = false;
};

// ---------------------------------------------------------------------------------------------
// The transform

class OutboxEventRouter final : public Transform {
 public:
  OutboxEventRouter(std::string alias, RouterConfig config, TopicRegex topic_regex,
                    const ColumnModes& modes)
      : alias_(std::move(alias)),
        config_(std::move(config)),
        topic_regex_(std::move(topic_regex)),
        modes_(modes) {}

  const std::string& alias() const override { return alias_; }

  // A row is routed (topic and key replaced), dropped or failed; only the envelope's schema
  // name is built from the source's topic.
  bool ReadsSourceTopicAndKey() const override { return config_.envelope_mode; }

  Result<TransformOutcome> Apply(Record& record) override {
    // Not a row change (or already rewritten): Debezium passes non-Envelope records through.
    if (record.change == nullptr) return TransformOutcome::kKeep;
    switch (record.source.op) {
      case ChangeOp::kInsert: return Route(record, *record.change);
      case ChangeOp::kUpdate: return UnexpectedUpdate(record);
      case ChangeOp::kDelete:
        spdlog::debug("{}: delete on {} at LSN {} dropped", alias_, record.source.table,
                      record.source.lsn.ToString());
        return TransformOutcome::kDrop;
      case ChangeOp::kTruncate:
        // Debezium skips truncates by default (skipped.operations=t); wal2json emits them.
        spdlog::debug("{}: truncate of {} at LSN {} dropped", alias_, record.source.table,
                      record.source.lsn.ToString());
        return TransformOutcome::kDrop;
      case ChangeOp::kMessage: return TransformOutcome::kKeep;
    }
    return TransformOutcome::kKeep;
  }

 private:
  // "(table public.outbox, event id 'x', LSN 0/16B3748)". `event_id` is the row's event id
  // column, nullptr before it is found: its text is copied only when a message names it.
  static std::string Where(const Record& record, const Column* event_id) {
    std::string where = DescribeOrigin(record.source);
    if (event_id != nullptr && !event_id->is_null()) where += ", event id '" + event_id->text + "'";
    return where + ", LSN " + record.source.lsn.ToString();
  }

  static Status Fail(const Record& record, const Column* event_id, const std::string& what) {
    return Status::Transform(what + " (" + Where(record, event_id) + ")");
  }

  Result<TransformOutcome> UnexpectedUpdate(const Record& record) const {
    const Column* event_id = record.change->Find(config_.id_column);
    const std::string what =
        "unexpected UPDATE of an outbox row (outbox rows should only be inserted); '" +
        config_.invalid_op_key + "' is ";
    switch (config_.invalid_op) {
      case InvalidOpBehavior::kWarn:
        spdlog::warn("{}: {}warn, record dropped ({})", alias_, what, Where(record, event_id));
        return TransformOutcome::kDrop;
      case InvalidOpBehavior::kError:
        spdlog::error("{}: {}error, record dropped ({})", alias_, what, Where(record, event_id));
        return TransformOutcome::kDrop;
      case InvalidOpBehavior::kFatal: break;
    }
    return Fail(record, event_id, what + "fatal");
  }

  const std::string& TopicFor(const std::string& route_value) {
    auto it = topic_cache_.find(route_value);
    if (it != topic_cache_.end()) return it->second;
    if (topic_cache_.size() >= kTopicCacheLimit) topic_cache_.clear();
    // RegexRouter leaves the topic unchanged, i.e. the raw route value, when there is no match.
    std::optional<std::string> topic = topic_regex_.Apply(route_value);
    return topic_cache_.emplace(route_value, topic ? std::move(*topic) : route_value).first->second;
  }

  // An expanded payload: compact JSON, and the Connect schema Debezium infers for it (none
  // where Debezium cannot infer one and sends the payload unexpanded).
  struct Expanded {
    std::string json;
    std::optional<std::string> schema;
  };

  // The expanded payload, or nullopt (with Debezium's warning) when the payload is not a JSON
  // object or array.
  std::optional<Expanded> ExpandPayload(const Record& record, const Column& payload,
                                        const Column* event_id) const {
    if (payload.is_null()) return std::nullopt;
    if (payload.kind != ValueKind::kString || IsBytea(payload)) {
      spdlog::warn("{}: JSON expansion is on but payload column '{}' has type '{}', not text; "
                   "payload kept as is ({})",
                   alias_, config_.payload_column, payload.type, Where(record, event_id));
      return std::nullopt;
    }
    const std::string& text = payload.text;
    std::string problem;
    // Like Debezium: only text that starts with '{' or '[' (no leading blanks) is parsed.
    if (text.empty() || (text[0] != '{' && text[0] != '[')) {
      problem = "it does not start with '{' or '['";
    } else {
      JsonTreeBuilder builder;
      rapidjson::Reader reader;
      rapidjson::MemoryStream stream(text.data(), text.size());
      constexpr unsigned kFlags = rapidjson::kParseNumbersAsStringsFlag |
                                  rapidjson::kParseValidateEncodingFlag |
                                  rapidjson::kParseIterativeFlag;
      const rapidjson::ParseResult ok = reader.Parse<kFlags>(stream, builder);
      if (ok) {
        rapidjson::StringBuffer buffer;
        JsonWriter writer(buffer);
        ExpandedJsonWriter(config_, writer).Write(builder.root());
        return Expanded{std::string(buffer.GetString(), buffer.GetSize()),
                        SchemaInference(config_).PayloadSchema(builder.root())};
      }
      problem = builder.too_deep()
                    ? "it nests deeper than " + std::to_string(kMaxJsonDepth) + " levels"
                    : std::string(rapidjson::GetParseError_En(ok.Code())) + " at offset " +
                          std::to_string(ok.Offset());
    }
    // The payload text itself is not logged: it may hold personal data.
    spdlog::warn("{}: JSON expansion of payload column '{}' failed, {}; payload kept as "
                 "unexpanded text ({})",
                 alias_, config_.payload_column, problem, Where(record, event_id));
    return std::nullopt;
  }

  // The envelope's Connect schema as Debezium's EventRouter builds it: a struct named after
  // the table's value schema with the route value inserted
  // (`<prefix>.<schema>.<table>.<route value>.Value`), the payload column's schema as
  // `payload`, each envelope placement's column schema under its alias, and the
  // `table.field.event.schema.version` column's value as its version. Like Debezium, the
  // name is taken from the first record of each version and kept.
  //
  // `payload_schema` is the inferred schema of an expanded payload, else the column's. Without
  // a version Debezium caches the envelope schema by payload schema, so each inferred payload
  // schema takes its name from the first record that has it.
  Result<std::string> EnvelopeSchema(
      const Record& record, const RowChange& row, const Column& route,
      const std::string& payload_schema,
      const std::vector<std::pair<const std::string*, const Column*>>& envelope,
      const Column* event_id) {
    std::optional<std::string> version;
    if (config_.schema_version_column) {
      const std::string& name = *config_.schema_version_column;
      const Column* column = row.Find(name);
      if (column == nullptr) {
        return Fail(record, event_id,
                    "schema version column '" + name +
                        "' ('table.field.event.schema.version') is not in the row");
      }
      if (column->type != "integer") {
        return Fail(record, event_id,
                    "schema version column '" + name +
                        "' ('table.field.event.schema.version') has type '" + column->type +
                        "'; only 'integer' is accepted");
      }
      if (!column->is_null()) version = column->text;
    }
    const std::string cache_key = version ? "v" + *version : "s" + payload_schema;
    auto cached = envelope_schema_names_.find(cache_key);
    if (cached == envelope_schema_names_.end()) {
      if (envelope_schema_names_.size() >= kTopicCacheLimit) envelope_schema_names_.clear();
      // A decoded logical decoding message has no table: its row schema is unnamed, and
      // Debezium names the envelope after the route value alone.
      std::string name =
          row.table.empty() ? route.text : record.topic + "." + route.text + ".Value";
      cached = envelope_schema_names_.emplace(cache_key, std::move(name)).first;
    }
    auto field = [](std::string schema, const std::string& name) {
      schema.pop_back();  // the closing brace: JsonConverter writes "field" last
      rapidjson::StringBuffer quoted;
      JsonWriter writer(quoted);
      WriteJsonString(writer, name);
      return schema + ",\"field\":" + std::string(quoted.GetString(), quoted.GetSize()) + "}";
    };
    std::string fields = field(payload_schema, "payload");
    for (const auto& [alias, column] : envelope)
      fields += "," + field(ColumnSchemaJson(*column, modes_), *alias);
    rapidjson::StringBuffer name;
    JsonWriter writer(name);
    WriteJsonString(writer, cached->second);
    std::string schema =
        "{\"type\":\"struct\",\"fields\":[" + fields +
        "],\"optional\":false,\"name\":" + std::string(name.GetString(), name.GetSize());
    if (version) schema += ",\"version\":" + *version;
    return schema + "}";
  }

  Result<TransformOutcome> Route(Record& record, const RowChange& row) {
    const Column* event_id = nullptr;
    auto fail = [&](const std::string& what) { return Fail(record, event_id, what); };
    auto missing = [&](const char* role, const std::string& column, const std::string& key) {
      return fail(std::string(role) + " column '" + column + "' ('" + key + "') is not in the row");
    };
    // The column's bytes and Connect shape under the handling modes (connect_column.h).
    auto value_of = [&](const Column& column) -> Result<ConnectValue> {
      auto value = ColumnConnectValue(column, modes_);
      if (!value.ok()) return fail(value.status().message());
      return value;
    };

    // Event id first, so every later message can name it.
    const Column* id = row.Find(config_.id_column);
    if (id == nullptr) return missing("event id", config_.id_column, config_.id_key);
    event_id = id;
    auto id_value = value_of(*id);
    if (!id_value.ok()) return id_value.status();

    const Column* route = row.Find(config_.route_column);
    if (route == nullptr) return missing("route", config_.route_column, config_.route_key);
    if (!IsConnectString(*route)) {
      return fail("route column '" + config_.route_column + "' ('" + config_.route_key +
                  "') has type '" + route->type +
                  "'; it must be a string type (text, varchar, char, uuid, enum, json)");
    }
    if (route->is_null()) {
      return fail("route column '" + config_.route_column + "' ('" + config_.route_key +
                  "') is NULL; every event needs a destination");
    }

    const Column* key = row.Find(config_.key_column);
    if (key == nullptr) return missing("key", config_.key_column, config_.key_key);
    auto key_value = value_of(*key);
    if (!key_value.ok()) return key_value.status();

    const Column* payload = row.Find(config_.payload_column);
    if (payload == nullptr) return missing("payload", config_.payload_column, config_.payload_key);

    int64_t timestamp_ms = record.source.commit_time_ms;
    if (config_.timestamp_column) {
      const std::string& name = *config_.timestamp_column;
      const Column* ts = row.Find(name);
      if (ts == nullptr) return missing("timestamp", name, config_.timestamp_key);
      if (!IsTimestampWithoutTimeZone(*ts)) {
        return fail("timestamp column '" + name + "' ('" + config_.timestamp_key + "') has type '" +
                    ts->type + "'; only 'timestamp [(p)] without time zone' is accepted");
      }
      if (!ts->is_null()) {
        auto parsed = ParsePgTimestampMicros(ts->text);
        if (!parsed.ok()) {
          return fail("timestamp column '" + name + "' ('" + config_.timestamp_key +
                      "'): " + parsed.status().message());
        }
        // Debezium divides the column's microseconds by 1000 in Java: toward zero, also
        // before the epoch (so 1969-12-31 23:59:59.9985 is -1, not -2).
        timestamp_ms = parsed.value() / 1000;
        // Kafka Connect's worker checks a record's timestamp before producing it
        // (ConnectUtils.checkAndConvertTimestamp): -1, Kafka's "no timestamp", leaves it to
        // the producer, which stamps the send time; anything below fails the record. A
        // timestamp of 0 tells librdkafka to stamp the send time (docs/event-router.md).
        if (timestamp_ms == -1) {
          timestamp_ms = 0;
        } else if (timestamp_ms < -1) {
          return fail("timestamp column '" + name + "' ('" + config_.timestamp_key + "') holds '" +
                      ts->text + "', " + std::to_string(timestamp_ms) +
                      " ms from the Unix epoch; a Kafka record timestamp cannot be before "
                      "1969-12-31 23:59:59.999 (Kafka Connect fails such a record too)");
        }
      }
    }

    std::vector<Header> headers;
    // Debezium injects the trace context into the record's headers before it adds "id".
    const Column* trace = row.Find(config_.trace_context_column);
    if (trace != nullptr && !trace->is_null() && !IsConnectString(*trace)) {
      return fail("trace context column '" + config_.trace_context_column +
                  "' ('tracing.span.context.field') has type '" + trace->type +
                  "'; it must be a string type holding java.util.Properties text");
    }
    std::optional<std::string> parent;
    if (trace != nullptr && !trace->is_null()) parent = trace->text;
    if (parent || !config_.trace_only_with_context) {
      TraceHeaders trace_headers = trace_continuer_.Continue(parent);
      const ConnectShape text{ConnectType::kString, R"({"type":"string","optional":false})"};
      headers.push_back(Header{"traceparent", std::move(trace_headers.traceparent), text});
      if (trace_headers.tracestate) {
        headers.push_back(Header{"tracestate", std::move(*trace_headers.tracestate), text});
      }
    }
    headers.push_back(Header{"id", std::move(id_value->bytes), std::move(id_value->shape)});
    std::vector<std::pair<const std::string*, const Column*>> envelope;
    int32_t partition = kAnyPartition;
    for (const AdditionalField& field : config_.additional) {
      const Column* column = row.Find(field.column);
      if (column == nullptr) {
        if (config_.ignore_missing_additional) continue;
        return fail("additional field column '" + field.column + "' ('" + config_.placement_key +
                    "') is not in the row; set '" + config_.missing_key +
                    "=ignore' to skip missing columns");
      }
      switch (field.placement) {
        case Placement::kHeader: {
          auto value = value_of(*column);
          if (!value.ok()) return value.status();
          headers.push_back(Header{field.alias, std::move(value->bytes), std::move(value->shape)});
          break;
        }
        case Placement::kEnvelope: envelope.emplace_back(&field.alias, column); break;
        case Placement::kPartition: {
          if (column->type != "integer") {
            return fail("partition column '" + field.column + "' ('" + config_.placement_key +
                        "') has type '" + column->type +
                        "'; only 'integer' columns can choose the partition");
          }
          if (column->is_null()) {
            partition = kAnyPartition;  // like Debezium: NULL leaves the choice to Kafka
            break;
          }
          int32_t value = 0;
          const std::string& t = column->text;
          auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
          if (ec != std::errc() || end != t.data() + t.size() || value < 0) {
            return fail("partition column '" + field.column + "' ('" + config_.placement_key +
                        "') holds '" + t + "', which is not a partition number");
          }
          partition = value;
          break;
        }
      }
    }

    std::optional<std::string> value;
    // A tombstone has no schema: Connect's converters write it as a Kafka null.
    ConnectShape value_shape{ConnectType::kStruct, ""};
    const bool empty_payload =
        payload->is_null() ||
        (payload->kind == ValueKind::kString &&
         (IsBytea(*payload) ? payload->text.empty() : IsBlankText(payload->text)));
    if (config_.tombstone_on_empty && empty_payload && config_.envelope_mode) {
      // Debezium builds (and caches, naming it after this record's route value) the envelope
      // schema before it decides on a tombstone.
      auto schema = EnvelopeSchema(record, row, *route, ColumnSchemaJson(*payload, modes_),
                                   envelope, event_id);
      if (!schema.ok()) return schema.status();
    }
    if (!(config_.tombstone_on_empty && empty_payload)) {
      std::optional<Expanded> expanded;
      if (config_.expand_json) expanded = ExpandPayload(record, *payload, event_id);
      if (!config_.envelope_mode) {
        if (expanded) {
          // A document Debezium infers no schema for is still expanded, with a null schema
          // (docs/event-router.md).
          value_shape.type = expanded->json[0] == '[' ? ConnectType::kArray : ConnectType::kStruct;
          if (expanded->schema) value_shape.schema_json = std::move(*expanded->schema);
          value = std::move(expanded->json);
        } else {
          auto payload_value = value_of(*payload);
          if (!payload_value.ok()) return payload_value.status();
          value = std::move(payload_value->bytes);
          value_shape = std::move(payload_value->shape);
        }
      } else {
        // Inside an envelope the payload's schema is a member of the envelope's: a document
        // Debezium infers none for stays unexpanded, as Debezium sends it.
        if (expanded && !expanded->schema) expanded.reset();
        const std::string payload_schema =
            expanded ? *expanded->schema : ColumnSchemaJson(*payload, modes_);
        auto schema = EnvelopeSchema(record, row, *route, payload_schema, envelope, event_id);
        if (!schema.ok()) return schema.status();
        value_shape.schema_json = std::move(schema).value();
        rapidjson::StringBuffer buffer;
        JsonWriter writer(buffer);
        writer.StartObject();
        writer.Key("payload");
        if (expanded) {
          writer.RawValue(expanded->json.data(), expanded->json.size(), rapidjson::kObjectType);
        } else {
          WriteColumnJson(*payload, modes_, writer);
        }
        for (const auto& [alias, column] : envelope) {
          WriteJsonKey(writer, *alias);
          WriteColumnJson(*column, modes_, writer);
        }
        writer.EndObject();
        value = std::string(buffer.GetString(), buffer.GetSize());
      }
    }

    record.topic = TopicFor(route->text);
    record.key = std::move(key_value->bytes);
    record.key_shape = std::move(key_value->shape);
    record.value = std::move(value);
    record.value_shape = std::move(value_shape);
    record.headers = std::move(headers);
    record.partition = partition;
    record.timestamp_ms = timestamp_ms;
    record.change = nullptr;
    return TransformOutcome::kKeep;
  }

  const std::string alias_;
  const RouterConfig config_;
  const TopicRegex topic_regex_;
  const ColumnModes modes_;
  std::unordered_map<std::string, std::string> topic_cache_;
  TraceContinuer trace_continuer_;
  // Envelope schema names: by "v" + version, else by "s" + payload schema.
  std::unordered_map<std::string, std::string> envelope_schema_names_;
};

}  // namespace

Result<std::unique_ptr<Transform>> MakeOutboxEventRouter(const std::string& alias,
                                                         const Properties& props,
                                                         const ColumnModes& modes) {
  auto config = ReadConfig(props);
  if (!config.ok()) return config.status();
  auto regex = TopicRegex::Compile(
      props.GetString("route.topic.regex", kDefaultRouteTopicRegex),
      props.GetString("route.topic.replacement", kDefaultRouteTopicReplacement),
      props.FullKey("route.topic.regex"), props.FullKey("route.topic.replacement"));
  if (!regex.ok()) return regex.status();
  return std::unique_ptr<Transform>(std::make_unique<OutboxEventRouter>(
      alias, std::move(config).value(), std::move(regex).value(), modes));
}

}  // namespace walrelay
