// Differential suite: walrelay against Debezium itself. The same rows, written once, are read
// through one pgoutput slot per case and side, all copied from one template slot so both sides
// start at the same LSN; walrelay writes to a mock cluster of its own per case, Debezium's
// PostgreSQL connector runs in its embedded engine with Kafka Connect's converters
// (tests/debezium/DebeziumReference.java, fetched by scripts/fetch-debezium.sh). The Debezium
// version is WALRELAY_DEBEZIUM_VERSION, by default 3.6.1.Final; 3.2.3.Final is the other one the
// suite knows (tests/debezium/pom-<version>.xml). Both get the
// same connector config except slot and publication names. For every record the suite
// compares topic, partition, key bytes, value bytes, headers (names, order, bytes) and
// timestamp.
//
// Cases are generated: dimensions of EventRouter settings (routing, placements, payload
// handling, tombstones, invalid operations, column renames, payload column types), each a list
// of variants. The "representative" set (ctest label `debezium`, in CI) takes every variant at
// least once; the full cross product runs with WALRELAY_DEBEZIUM_FULL=1 (ctest label
// `debezium_full`). Envelope mode (no transform) runs over a table with many column types.
//
// Known differences are recognised by name, counted and shown with both records: those
// walrelay keeps on purpose (docs/event-router.md, "Where walrelay differs from Debezium") and
// open ones (docs/testing.md, "Open differences"). Any other difference fails the test, and so
// does a known kind the representative cases no longer show.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "relay_fixture.h"

using namespace walrelay;
using namespace walrelay::testing;
using devtools::ConsumedRecord;

namespace {

using Config = std::map<std::string, std::string>;

constexpr const char* kDefaultDebezium = "3.6.1.Final";

// The Debezium version compared with: WALRELAY_DEBEZIUM_VERSION, else the default reference.
std::string DebeziumVersion() {
  const char* v = std::getenv("WALRELAY_DEBEZIUM_VERSION");
  return v != nullptr && *v != 0 ? v : kDefaultDebezium;
}

// Debezium 3.2.x, where the suite expects that release's own behaviour.
bool IsDebezium32(const std::string& version) { return version.rfind("3.2.", 0) == 0; }

// One record as a producer would send it. Debezium leaves partition and timestamp to the
// producer when the SourceRecord has none.
struct Rec {
  std::string topic;
  std::optional<int32_t> partition;
  std::optional<int64_t> timestamp;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;
};

struct Outcome {
  std::vector<Rec> records;
  std::string error;  // non-empty: the side stopped on a failure
};

struct Case {
  std::string name;
  Config config;  // the connector config both sides get (slot and publication added per side)
};

// ---- case generation --------------------------------------------------------------------

struct Variant {
  std::string label;
  Config keys;
};
using Dimension = std::vector<Variant>;

constexpr const char* kStringConverter = "org.apache.kafka.connect.storage.StringConverter";
constexpr const char* kJsonConverter = "org.apache.kafka.connect.json.JsonConverter";
constexpr const char* kByteArrayConverter =
    "org.apache.kafka.connect.converters.ByteArrayConverter";
constexpr const char* kBinaryDataConverter = "io.debezium.converters.BinaryDataConverter";
constexpr const char* kSimpleHeaderConverter =
    "org.apache.kafka.connect.storage.SimpleHeaderConverter";

// Connect's converters whose bytes walrelay promises (docs/event-router.md): StringConverter
// for key and value; JsonConverter without schemas when the value is a structure (envelope
// placements, expanded JSON); ByteArrayConverter for a bytea payload.
void ChooseConverters(Config& cfg) {
  auto get = [&](const std::string& key) {
    auto it = cfg.find("transforms.outbox." + key);
    return it == cfg.end() ? std::string() : it->second;
  };
  const bool structured =
      get("table.fields.additional.placement").find(":envelope") != std::string::npos ||
      get("table.expand.json.payload") == "true";
  // A case that names its converters (the converter matrix) keeps them.
  if (cfg.count("value.converter")) return;
  cfg["key.converter"] = kStringConverter;
  if (structured) {
    cfg["value.converter"] = kJsonConverter;
    cfg["value.converter.schemas.enable"] = "false";
  } else if (get("table.field.event.payload") == "body_bytes") {
    cfg["value.converter"] = kByteArrayConverter;
  } else {
    cfg["value.converter"] = kStringConverter;
  }
  cfg["header.converter"] = kSimpleHeaderConverter;
}

// The converter matrix: key, value and header converters as a worker would name them.
Dimension ConverterMatrix() {
  auto converters = [](const char* key, bool key_schemas, const char* value, bool value_schemas,
                       const char* header, bool header_schemas) {
    Config c{{"key.converter", key}, {"value.converter", value}, {"header.converter", header}};
    if (std::string(key) == kJsonConverter)
      c["key.converter.schemas.enable"] = key_schemas ? "true" : "false";
    if (std::string(value) == kJsonConverter)
      c["value.converter.schemas.enable"] = value_schemas ? "true" : "false";
    if (std::string(header) == kJsonConverter)
      c["header.converter.schemas.enable"] = header_schemas ? "true" : "false";
    return c;
  };
  // Ordered so that the representative set pairs ByteArrayConverter with the bytea payload and
  // BinaryDataConverter with a struct (which fails on both sides).
  return {
      {"conv-string",
       converters(kStringConverter, false, kStringConverter, false, kSimpleHeaderConverter, false)},
      {"conv-json", converters(kJsonConverter, true, kJsonConverter, true, kJsonConverter, true)},
      {"conv-bytes", converters(kStringConverter, false, kByteArrayConverter, false,
                                kSimpleHeaderConverter, false)},
      {"conv-json-plain",
       converters(kJsonConverter, false, kJsonConverter, false, kSimpleHeaderConverter, false)},
      {"conv-binary",
       converters(kStringConverter, false, kBinaryDataConverter, false, kJsonConverter, false)},
  };
}

// `full`: the cross product; otherwise case i takes variant i of every dimension (wrapping),
// so every variant appears at least once.
std::vector<Case> Generate(const std::string& prefix, const Config& base,
                           const std::vector<Dimension>& dims, bool full) {
  std::vector<std::vector<size_t>> picks;
  if (full) {
    picks.push_back({});
    for (const auto& d : dims) {
      std::vector<std::vector<size_t>> next;
      for (const auto& p : picks)
        for (size_t i = 0; i < d.size(); ++i) {
          next.push_back(p);
          next.back().push_back(i);
        }
      picks = std::move(next);
    }
  } else {
    size_t widest = 0;
    for (const auto& d : dims) widest = std::max(widest, d.size());
    for (size_t i = 0; i < widest; ++i) {
      std::vector<size_t> p;
      for (const auto& d : dims) p.push_back(i % d.size());
      picks.push_back(p);
    }
  }
  std::vector<Case> cases;
  for (const auto& p : picks) {
    Case c{prefix, base};
    for (size_t d = 0; d < dims.size(); ++d) {
      const Variant& v = dims[d][p[d]];
      if (!v.label.empty()) c.name += "+" + v.label;
      for (const auto& [k, val] : v.keys) {
        // Converter keys are connector keys; the others belong to the router.
        if (k.find("converter") != std::string::npos) {
          c.config[k] = val;
          continue;
        }
        // A placement variant adds to the placements of another.
        auto& slot = c.config["transforms.outbox." + k];
        slot = (k == "table.fields.additional.placement" && !slot.empty()) ? slot + "," + val : val;
      }
    }
    ChooseConverters(c.config);
    cases.push_back(std::move(c));
  }
  return cases;
}

Config RouterBase(const std::string& table) {
  return {{"table.include.list", table},
          {"transforms", "outbox"},
          {"transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"}};
}

std::vector<Case> AllCases(bool full, const std::string& version) {
  std::vector<Case> cases;
  // public.outbox (docs/outbox.sql): the default column names.
  auto outbox =
      Generate("outbox", RouterBase("public.outbox"),
               {
                   {{"", {}},
                    {"regex",
                     {{"route.topic.regex", "(?<kind>Ord|Cust)(?:er|omer)"},
                      {"route.topic.replacement", "events.${kind}.$1"}}},
                    {"route-type",
                     {{"route.by.field", "type"},
                      {"route.topic.regex", "(.*)Created"},
                      {"route.topic.replacement", "created-$1"}}}},
                   {{"", {}},
                    {"headers",
                     {{"table.fields.additional.placement",
                       "type:header:eventType,aggregateid:header,created_at:header:createdAt"}}},
                    {"envelope",
                     {{"table.fields.additional.placement",
                       "type:envelope:eventType,aggregateid:envelope,type:header"}}}},
                   {{"", {}},
                    {"expand", {{"table.expand.json.payload", "true"}}},
                    {"expand-keep-nulls",
                     {{"table.expand.json.payload", "true"},
                      {"table.json.payload.null.behavior", "optional_bytes"}}}},
                   {{"tombstones", {{"route.tombstone.on.empty.payload", "true"}}}, {"", {}}},
                   {{"", {}}, {"op-error", {{"table.op.invalid.behavior", "error"}}}},
               },
               full);
  cases.insert(cases.end(), outbox.begin(), outbox.end());

  // public.outbox_typed: every column renamed, payloads of three types, partition placement.
  Config renamed = RouterBase("public.outbox_typed");
  for (const auto& [k, v] : Config{{"table.field.event.id", "event_id"},
                                   {"table.field.event.key", "event_key"},
                                   {"table.field.event.type", "event_type"},
                                   {"route.by.field", "route"}})
    renamed["transforms.outbox." + k] = v;
  auto typed = Generate(
      "typed", renamed,
      {
          {{"text", {{"table.field.event.payload", "body_text"}}},
           {"json", {{"table.field.event.payload", "body_json"}}},
           {"bytea", {{"table.field.event.payload", "body_bytes"}}}},
          {{"", {}}, {"ts", {{"table.field.event.timestamp", "occurred_at"}}}},
          {{"headers",
            {{"table.fields.additional.placement",
              "part:partition,tenant:header,small:header,amount:header,flag:header,"
              "tstz:header,note:header:note,event_type:header:type,body_json:header:doc"}}},
           {"envelope",
            {{"table.fields.additional.placement",
              "tenant:envelope,amount:envelope,flag:envelope,note:envelope,"
              "small:envelope"}}},
           {"missing-ignored",
            {{"table.fields.additional.placement", "nosuch:header,note:header"},
             {"table.fields.additional.error.on.missing", "false"}}},
           {"missing-ignore",
            {{"table.fields.additional.placement", "nosuch:header,note:header"},
             {"table.field.additional.missing", "ignore"}}}},
          {{"expand-avro",
            {{"table.expand.json.payload", "true"}, {"field.name.adjustment.mode", "avro"}}},
           {"", {}},
           {"schema-version", {{"table.field.event.schema.version", "version"}}}},
          {{"tombstones", {{"route.tombstone.on.empty.payload", "true"}}}, {"", {}}},
      },
      full);
  cases.insert(cases.end(), typed.begin(), typed.end());
  // Converters crossed with router configs and payload column types.
  auto converted = Generate(
      "converters", renamed,
      {
          ConverterMatrix(),
          {{"plain",
            {{"table.fields.additional.placement",
              "tenant:header,amount:header,note:header,flag:header"}}},
           {"envelope",
            {{"table.fields.additional.placement", "tenant:envelope,amount:envelope,note:envelope"},
             {"table.field.event.schema.version", "version"}}},
           {"expand", {{"table.expand.json.payload", "true"}}}},
          {{"text", {{"table.field.event.payload", "body_text"}}},
           {"json", {{"table.field.event.payload", "body_json"}}},
           {"bytea", {{"table.field.event.payload", "body_bytes"}}}},
      },
      full);
  cases.insert(cases.end(), converted.begin(), converted.end());
  if (!full) {
    // JsonConverter with schemas over an expanded payload, which the pairing above leaves out.
    Case expanded{"converters+conv-json+expand+json", renamed};
    const Dimension matrix = ConverterMatrix();
    for (const auto& [k, v] : matrix[1].keys) expanded.config[k] = v;
    expanded.config["transforms.outbox.table.expand.json.payload"] = "true";
    expanded.config["transforms.outbox.table.field.event.payload"] = "body_json";
    cases.push_back(expanded);
    // StringConverter over an envelope holding a bytea payload.
    Case struct_bytes{"converters+conv-string+envelope+bytea", renamed};
    for (const auto& [k, v] : matrix[0].keys) struct_bytes.config[k] = v;
    struct_bytes.config["transforms.outbox.table.fields.additional.placement"] =
        "tenant:envelope,amount:envelope";
    struct_bytes.config["transforms.outbox.table.field.event.payload"] = "body_bytes";
    cases.push_back(struct_bytes);
    // An empty bytea payload with tombstones on, which the pairing above gives only to a case
    // that Debezium 3.6 fails.
    Case empty_bytes{"typed+bytea+tombstones", renamed};
    empty_bytes.config["transforms.outbox.table.field.event.payload"] = "body_bytes";
    empty_bytes.config["transforms.outbox.route.tombstone.on.empty.payload"] = "true";
    ChooseConverters(empty_bytes.config);
    cases.push_back(empty_bytes);
    // Where Debezium (3.2 and 3.6) stops: a json payload expanded into an envelope.
    Case stops{"typed+json+envelope+expand-avro", renamed};
    for (const auto& [k, v] : Config{{"table.field.event.payload", "body_json"},
                                     {"table.fields.additional.placement", "tenant:envelope"},
                                     {"table.expand.json.payload", "true"},
                                     {"field.name.adjustment.mode", "avro"}})
      stops.config["transforms.outbox." + k] = v;
    ChooseConverters(stops.config);
    cases.push_back(stops);
  }

  // An UPDATE with table.op.invalid.behavior=fatal stops both.
  Case fatal{"outbox+op-fatal", RouterBase("public.outbox")};
  fatal.config["transforms.outbox.table.op.invalid.behavior"] = "fatal";
  ChooseConverters(fatal.config);
  cases.push_back(fatal);

  // The kinds an outside comparison found (docs/event-router.md, "Debezium versions"), each
  // with a case of its own, in both sets.
  const Dimension matrix = ConverterMatrix();
  auto with_converters = [&](Case c, const Config& converters) {
    for (const auto& [k, v] : converters) c.config[k] = v;
    return c;
  };
  // Expansion inside an envelope, JsonConverter with schemas: the payload member's schema.
  Case envelope_schemas{"outbox+envelope+expand+conv-json", RouterBase("public.outbox")};
  for (const auto& [k, v] :
       Config{{"table.fields.additional.placement", "type:envelope:eventType,aggregateid:envelope"},
              {"table.expand.json.payload", "true"},
              {"route.tombstone.on.empty.payload", "true"}})
    envelope_schemas.config["transforms.outbox." + k] = v;
  cases.push_back(with_converters(envelope_schemas, matrix[1].keys));
  // A Decimal in an envelope and a header under each converter that writes structs, with
  // decimal.handling.mode=precise, and with a key converter that writes schemas.
  Config decimals = renamed;
  decimals["transforms.outbox.table.fields.additional.placement"] =
      "amount:envelope,tenant:envelope,amount:header:amountHeader";
  decimals["transforms.outbox.table.field.event.payload"] = "body_text";
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) {
    Case c{"decimals+" + matrix[i].label + "+precise", decimals};
    c.config["decimal.handling.mode"] = "precise";
    cases.push_back(with_converters(c, matrix[i].keys));
  }
  cases.push_back(with_converters(Case{"decimals+json-key+string-value", decimals},
                                  {{"key.converter", kJsonConverter},
                                   {"key.converter.schemas.enable", "true"},
                                   {"value.converter", kStringConverter},
                                   {"header.converter", kSimpleHeaderConverter}}));
  // Event timestamps at and just before the epoch, and earlier (both sides fail).
  Config epoch = RouterBase("public.outbox_epoch");
  epoch["transforms.outbox.table.field.event.timestamp"] = "at_edge";
  Case at_edge{"epoch+ts-edge", epoch};
  ChooseConverters(at_edge.config);
  cases.push_back(at_edge);
  epoch["transforms.outbox.table.field.event.timestamp"] = "at_before";
  Case before{"epoch+ts-before", epoch};
  ChooseConverters(before.config);
  cases.push_back(before);
  // The decode transform before the router: a message with a null member kept (typed bytes
  // in its header's schema), without tombstones after deletes; and with them, where
  // Debezium's transform stops on the tombstone that follows a DELETE.
  Config decode = RouterBase("public.outbox");
  decode["transforms"] = "decode,outbox";
  decode["transforms.decode.type"] =
      "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent";
  decode["transforms.decode.fields.null.include"] = "true";
  // A header (JsonConverter with schemas shows its type): an envelope placement of a column
  // the outbox rows lack stops Debezium 3.2 whatever the missing-column key says.
  decode["transforms.outbox.table.fields.additional.placement"] = "note:header";
  decode["transforms.outbox.table.field.additional.missing"] = "ignore";
  decode["transforms.outbox.table.fields.additional.error.on.missing"] = "false";  // 3.2's key
  decode["message.prefix.exclude.list"] = "none";
  Case decode_nulls{"decode+null-member", decode};
  decode_nulls.config["tombstones.on.delete"] = "false";
  cases.push_back(with_converters(decode_nulls, matrix[1].keys));
  Case decode_delete{"decode+delete", decode};
  cases.push_back(with_converters(decode_delete, matrix[3].keys));
  // Trace context headers (OpenTelemetry on the reference's classpath, 3.6 only): by default
  // only rows with a context; every row, with JsonConverter headers.
  if (!IsDebezium32(version)) {
    Case traced{"traced", RouterBase("public.outbox_traced")};
    ChooseConverters(traced.config);
    cases.push_back(traced);
    Case traced_all{"traced+all", RouterBase("public.outbox_traced")};
    traced_all.config["transforms.outbox.tracing.with.context.field.only"] = "false";
    traced_all.config["transforms.outbox.tracing.operation.name"] = "relay";
    cases.push_back(with_converters(traced_all, matrix[1].keys));
  }

  // Envelope mode: the change events of a table with many column types.
  Case envelope{"envelope",
                {{"table.include.list", "public.typed"},
                 {"key.converter", kJsonConverter},
                 {"key.converter.schemas.enable", "false"},
                 {"value.converter", kJsonConverter},
                 {"value.converter.schemas.enable", "false"}}};
  cases.push_back(envelope);
  // The same under named handling modes, every value of each at least once: Debezium's
  // rendering of every column.
  for (const auto& [name, decimal, time, binary] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {"precise+adaptive+bytes", "precise", "adaptive", "bytes"},
           {"double+adaptive_time_microseconds+base64", "double", "adaptive_time_microseconds",
            "base64"},
           {"string+connect+base64-url-safe", "string", "connect", "base64-url-safe"},
           {"precise+isostring+hex", "precise", "isostring", "hex"}}) {
    Case modes{"envelope+" + name, envelope.config};
    modes.config["decimal.handling.mode"] = decimal;
    modes.config["time.precision.mode"] = time;
    modes.config["binary.handling.mode"] = binary;
    cases.push_back(modes);
  }
  return cases;
}

// ---- the rows ---------------------------------------------------------------------------

const char* kSchema =
    "CREATE TABLE public.outbox_typed (event_id uuid PRIMARY KEY, route text, event_key text, "
    "event_type varchar(64), body_text text, body_json json, body_bytes bytea, part integer, "
    "occurred_at timestamp, tenant bigint, small smallint, amount numeric(12,3), flag boolean, "
    "tstz timestamptz, note varchar(40), version integer);"
    "CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');"
    "CREATE TABLE public.typed (id integer PRIMARY KEY, b bigint, s smallint, n numeric(10,2), "
    "nn numeric, r real, d double precision, flag boolean, t text, vc varchar(20), ch char(3), "
    "bin bytea, j json, jb jsonb, u uuid, ts timestamp, tstz timestamptz, dt date, "
    "ts3 timestamp(3), tm time, tm3 time(3), tmtz timetz, iv interval, m mood, ia integer[], "
    "ta text[], n0 numeric(5,0));"
    "CREATE TABLE public.outbox_epoch (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, "
    "type text, payload text, at_edge timestamp, at_before timestamp);"
    "CREATE TABLE public.outbox_traced (id uuid PRIMARY KEY, aggregatetype text, "
    "aggregateid text, type text, payload text, tracingspancontext text);";

// The trace the rows of public.outbox_traced continue.
constexpr const char* kParentTrace = "0af7651916cd43dd8448eb211c80319c";

std::string Rows() {
  std::string sql;
  auto outbox = [&](int n, const std::string& type, const std::string& key,
                    const std::string& event, const std::string& payload) {
    char id[40];
    std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", n);
    sql +=
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, created_at) VALUES ('" +
        std::string(id) + "', '" + type + "', '" + key + "', '" + event + "', " + payload +
        ", '2024-02-29 12:34:56.789');";
  };
  sql += "BEGIN;";
  outbox(1, "Order", "k1", "OrderCreated",
         "'{\"a\": 1, \"n\": null, \"e\": [], \"nested\": {\"x\": null, \"y\": [], \"z\": \"ü\"}, "
         "\"num\": 1.50}'");
  outbox(2, "Customer", "k2", "CustomerCreated", "NULL");
  outbox(3, "Payment", "k3", "PaymentCreated", "'{}'");
  sql += "COMMIT;";
  outbox(4, "Order", "k4", "OrderShipped",
         "'{\"msg\": \"héllo ✓ 😀\", \"quote\": \"a\\\"b\", \"list\": [1, 2, 3], "
         "\"lines\": [{\"sku\": \"a\"}, {\"sku\": \"b\", \"qty\": 2}]}'");
  outbox(5, "Customer", "k5", "CustomerBig", "jsonb_build_object('blob', repeat('x', 900000))");
  outbox(6, "Order", "k6", "OrderListed", "'[1, 2, {\"k\": null}]'");
  sql += "UPDATE outbox SET type = 'OrderChanged' WHERE aggregateid = 'k1';"
         "DELETE FROM outbox WHERE aggregateid = 'k2';";

  auto typed = [&](int n, const std::string& values) {
    char id[40];
    std::snprintf(id, sizeof id, "10000000-0000-4000-8000-%012d", n);
    sql +=
        "INSERT INTO outbox_typed (event_id, route, event_key, event_type, body_text, body_json, "
        "body_bytes, part, occurred_at, tenant, small, amount, flag, tstz, note, version) "
        "VALUES ('" +
        std::string(id) + "', " + values + ");";
  };
  typed(1, "'Order', 'key-1', 'Created', '{\"t\": 1, \"n\": null, \"a-b\": 3}', "
           "'{\"j\": null, \"arr\": [], \"Bad-Name\": 1, \"1st\": 2}', '\\x00ff10', 2, "
           "'2024-02-29 12:34:56.789', 9007199254740993, -7, 12345.670, true, "
           "'2024-02-29 12:34:56.789+02', 'note ü', 3");
  typed(2, "'Order', NULL, 'Created', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
           "NULL, NULL, NULL");
  typed(3, "'Shipment', 'clé-3', 'Made', '   ', '[]', '\\x', 1, '2023-01-01 00:00:00', 1, "
           "1, 0.5, false, '2023-01-01 00:00:00+00', '', 1");
  typed(4, "'Order', 'key-4', 'Created', 'not json', '{\"a\": [1, \"x\"]}', '\\x41', 3, "
           "'2024-12-31 23:59:59.999999', -1, 32767, -0.001, true, '1999-12-31 23:59:59+05', "
           "'x', 2");
  typed(5, "'Order', 'key-5', 'Created', '', '{\"deep\": {\"e\": [], \"n\": null}}', '\\x', 0, "
           "NULL, 0, 0, 0, false, NULL, 'y', 1");
  typed(6,
        "'Order', 'key-6 😀', 'Created', 'smile 😀 \"q\"', '{\"m\": \"😀\", \"n\": null}', "
        "'\\x7f', 3, '2024-03-01 00:00:00', 6, 6, 6.5, true, '2024-03-01 00:00:00+00', 'ü 😀', 2");
  sql += "UPDATE outbox_typed SET note = 'changed' WHERE event_key = 'key-1';"
         "DELETE FROM outbox_typed WHERE event_key = 'key-4';";

  // Event timestamps at the epoch, one millisecond before it (Kafka's "no timestamp"), and
  // earlier, which Kafka Connect refuses.
  sql += "INSERT INTO outbox_epoch VALUES "
         "('20000000-0000-4000-8000-000000000001', 'Epoch', 'e1', 'At', 'zero', "
         "'1970-01-01 00:00:00', '2000-01-01 00:00:00'),"
         "('20000000-0000-4000-8000-000000000002', 'Epoch', 'e2', 'Before', 'minus one', "
         "'1969-12-31 23:59:59.999', '1969-12-31 23:59:59');";
  // Trace contexts as an application writes them with Properties.store: a sampled parent
  // with a tracestate, an unsampled one, none, an invalid traceparent, no traceparent.
  auto traced = [&](int n, const std::string& context) {
    char id[40];
    std::snprintf(id, sizeof id, "30000000-0000-4000-8000-%012d", n);
    sql += "INSERT INTO outbox_traced VALUES ('" + std::string(id) + "', 'Traced', 't" +
           std::to_string(n) + "', 'Done', 'p" + std::to_string(n) + "', " + context + ");";
  };
  const std::string parent = std::string("00-") + kParentTrace + "-b7ad6b7169203331-";
  traced(1, "E'#Mon Jan 01 00:00:00 UTC 2024\\ntraceparent=" + parent +
                "01\\ntracestate=congo=t61rcWkgMzE,rojo=00f067aa0ba902b7\\n'");
  traced(2, "'traceparent=" + parent + "00'");
  traced(3, "NULL");
  traced(4, "'traceparent=00-nothex-01'");
  traced(5, "'baggage=k=v'");
  // A logical decoding message shaped like an outbox row, with a null member; only the cases
  // of the decode transform read it (message.prefix.exclude.list in Common()).
  sql += "BEGIN; SELECT pg_logical_emit_message(true, 'outbox', '{\"id\": \"m-1\", "
         "\"aggregatetype\": \"Message\", \"aggregateid\": \"m1\", \"type\": \"Sent\", "
         "\"payload\": \"{\\\"m\\\": 1}\", \"note\": null}'); COMMIT;";

  sql +=
      "INSERT INTO typed VALUES (1, 9007199254740993, -7, 12345.67, 'NaN', 1.5, '-Infinity', "
      "true, 'ünï \"q\" \\ ok', 'short', 'ab', '\\x00ff10', '{\"a\": [1, 2]}', '{\"b\": null}', "
      "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29 12:34:56.789', "
      "'2024-02-29 12:34:56.789+02', '2024-02-29', '2024-02-29 12:34:56.789', "
      "'12:34:56.789012', '01:02:03.4', '12:34:56.5+05:30', '1 year 2 mons 3 days 04:05:06.789', "
      "'ok', '{1,2,NULL}', '{\"a\",\"b c\"}', 12345);"
      "INSERT INTO typed VALUES (3, -1, 0, -0.05, 123.4500, 'NaN', 1e300, false, '', '', '', "
      "'\\x', '[]', '{}', '00000000-0000-0000-0000-000000000000', "
      "'1969-12-31 23:59:59.999999', '1900-01-01 00:00:00+00', '1960-01-01', '1970-01-01', "
      "'00:00:00', '23:59:59.999', '00:00:00-08', '-1 days -00:00:01', 'sad', '{}', '{}', 0);"
      "INSERT INTO typed (id, n, nn, r, d, ts, tstz, dt) VALUES (4, 99999999.99, -1e-10, "
      "3.4e38, 12345678.9, '2024-01-01 00:00:00.000001', '2024-06-01 10:00:00.5-07:30', "
      "'0001-01-01');"
      "INSERT INTO typed (id) VALUES (2);"
      "UPDATE typed SET t = 'changed', n = NULL WHERE id = 1;"
      "DELETE FROM typed WHERE id = 2;";
  return sql;
}

// ---- running both sides -----------------------------------------------------------------

constexpr int kPartitions = 4;  // the mock cluster's auto-created topics

// The Java producer's default partitioner for a keyed record: murmur2 of the key bytes, sign
// bit cleared, modulo the partition count (Kafka's Utils.murmur2 and Utils.toPositive).
int32_t JavaPartition(const std::string& key, int32_t partitions) {
  const uint32_t m = 0x5bd1e995;
  const size_t length = key.size();
  uint32_t h = 0x9747b28c ^ static_cast<uint32_t>(length);
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(key[i])); };
  for (size_t i = 0; i + 4 <= length; i += 4) {
    uint32_t k = byte(i) | byte(i + 1) << 8 | byte(i + 2) << 16 | byte(i + 3) << 24;
    k *= m;
    k ^= k >> 24;
    k *= m;
    h *= m;
    h ^= k;
  }
  const size_t tail = length & ~size_t{3};
  switch (length % 4) {
    case 3: h ^= byte(tail + 2) << 16; [[fallthrough]];
    case 2: h ^= byte(tail + 1) << 8; [[fallthrough]];
    case 1: h ^= byte(tail); h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<int32_t>((h & 0x7fffffff) % static_cast<uint32_t>(partitions));
}

std::string Base64Decode(const std::string& in) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t buf = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const auto at = kAlphabet.find(c);
    REQUIRE(at != std::string::npos);
    buf = buf << 6 | static_cast<uint32_t>(at);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buf >> bits) & 0xff));
    }
  }
  return out;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string ConfigJson(const Config& cfg) {
  std::string json = "{";
  for (const auto& [k, v] : cfg)
    json += (json.size() > 1 ? "," : "") + JsonString(k) + ":" + JsonString(v);
  return json + "}";
}

// Bytes for a diff line: printable ASCII and UTF-8 as they are, other bytes as \xNN, long
// values shortened around their middle.
std::string Show(const std::optional<std::string>& bytes) {
  if (!bytes) return "(null)";
  std::string out;
  for (unsigned char c : *bytes) {
    if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (out.size() > 400)
    out = out.substr(0, 300) + "...(" + std::to_string(bytes->size()) + " bytes)..." +
          out.substr(out.size() - 60);
  return "'" + out + "'";
}

// One PostgreSQL with the rows written once, and both sides run over it case by case.
class Harness {
 public:
  Harness() : fx_() {
    fx_.UsePlugin("pgoutput");
    fx_.Exec(kSchema);
    // Both publications and the template slot exist before any row: every copy of the slot
    // decodes the same changes with its side's publication.
    fx_.Exec("CREATE PUBLICATION walrelay_pub FOR ALL TABLES;"
             "CREATE PUBLICATION debezium_pub FOR ALL TABLES;");
    fx_.Exec("SELECT pg_create_logical_replication_slot('template', 'pgoutput')");
    commit_from_ms_ = NowMs();
    fx_.Exec(Rows());
    end_ = fx_.CurrentWal();
    commit_to_ms_ = NowMs();
  }

  int64_t commit_from_ms() const { return commit_from_ms_; }
  int64_t commit_to_ms() const { return commit_to_ms_; }

  Config Common() {
    return {{"connector.class", "io.debezium.connector.postgresql.PostgresConnector"},
            {"database.hostname", "127.0.0.1"},
            {"database.port", std::to_string(fx_.pg().port())},
            {"database.user", "postgres"},
            {"database.dbname", "postgres"},
            {"plugin.name", "pgoutput"},
            {"snapshot.mode", "no_data"},
            {"topic.prefix", "itest"},
            {"message.prefix.exclude.list", "outbox"}};
  }

  // walrelay, `parallel` cases at a time, each with a mock cluster of its own.
  std::map<std::string, Outcome> RunWalrelay(const std::vector<Case>& cases, size_t parallel) {
    std::map<std::string, Outcome> results;
    for (size_t from = 0; from < cases.size(); from += parallel) {
      struct Running {
        const Case* c;
        std::string slot;
        std::unique_ptr<devtools::MockKafka> kafka;
        std::unique_ptr<devtools::ChildProcess> relay;
        std::string log;
      };
      std::vector<Running> batch;
      for (size_t i = from; i < std::min(cases.size(), from + parallel); ++i) {
        Running r{&cases[i], "w" + std::to_string(i), nullptr, nullptr, ""};
        auto kafka = devtools::MockKafka::Start(1);
        REQUIRE(kafka.ok());
        r.kafka = std::move(kafka).value();
        fx_.Exec("SELECT pg_copy_logical_replication_slot('template', '" + r.slot + "')");
        Config cfg = Common();
        for (const auto& [k, v] : cases[i].config) cfg[k] = v;
        cfg["publication.name"] = "walrelay_pub";
        cfg["kafka.bootstrap.servers"] = r.kafka->bootstrap_servers();
        r.relay = fx_.SpawnRelay(fx_.WriteConfig(r.slot, cfg, false));
        r.log = fx_.log_path();
        batch.push_back(std::move(r));
      }
      for (auto& r : batch) {
        Outcome& out = results[r.c->name];
        // Done when the slot is confirmed to the end, or the relay stopped on its own.
        const bool confirmed =
            Eventually([&] { return fx_.ConfirmedFlush(r.slot) >= end_ || !r.relay->Running(); },
                       std::chrono::seconds(90));
        if (!confirmed || fx_.ConfirmedFlush(r.slot) < end_) {
          auto code = r.relay->Wait(std::chrono::seconds(0));
          out.error = "walrelay stopped " +
                      (code.ok() ? "with exit code " + std::to_string(*code) : "confirming") +
                      " before the end of the changes";
        }
        if (r.relay->Running()) {
          REQUIRE(r.relay->Kill(SIGTERM).ok());
          REQUIRE(r.relay->Wait(std::chrono::seconds(20)).ok());
        }
        out.records = ReadEverything(r.kafka->bootstrap_servers());
        fx_.WaitSlotFree(r.slot);
        fx_.Exec("SELECT pg_drop_replication_slot('" + r.slot + "')");
        if (!out.error.empty())
          MESSAGE(r.c->name << ": " << out.error << "\n" << ReadWholeFile(r.log));
      }
    }
    return results;
  }

  // Debezium, every case in one JVM; `expect` tells it when a case is complete.
  std::map<std::string, Outcome> RunDebezium(const std::string& version,
                                             const std::vector<Case>& cases,
                                             const std::map<std::string, Outcome>& walrelay) {
    const std::string dir = fx_.pg().base_dir();
    const std::string libs_file = dir + "/debezium-libs.txt";
    auto fetch = devtools::ChildProcess::Spawn(
        {"bash", "-c", "bash \"$0\" \"$2\" > \"$1\"",
         std::string(WALRELAY_SOURCE_DIR) + "/scripts/fetch-debezium.sh", libs_file, version},
        dir + "/fetch-debezium.log");
    REQUIRE(fetch.ok());
    auto fetched = (*fetch)->Wait(std::chrono::minutes(10));
    REQUIRE_MESSAGE((fetched.ok() && *fetched == 0), ReadWholeFile(dir + "/fetch-debezium.log"));
    std::string libs = ReadWholeFile(libs_file);
    while (!libs.empty() && (libs.back() == '\n' || libs.back() == ' ')) libs.pop_back();

    std::string json = "{\"parallel\": 1, \"cases\": [";
    for (size_t i = 0; i < cases.size(); ++i) {
      Config cfg = Common();
      for (const auto& [k, v] : cases[i].config) cfg[k] = v;
      cfg["slot.name"] = "d" + std::to_string(i);
      cfg["publication.name"] = "debezium_pub";
      const auto w = walrelay.find(cases[i].name);
      const size_t expect = w == walrelay.end() ? 0 : w->second.records.size();
      json += std::string(i ? ",\n" : "\n") + "{\"name\": " + JsonString(cases[i].name) +
              ", \"expect\": " + std::to_string(expect) +
              ", \"copy_slot_from\": \"template\", \"config\": " + ConfigJson(cfg) + "}";
    }
    json += "]}\n";
    const std::string cases_path = dir + "/debezium-cases.json";
    const std::string out_path = dir + "/debezium-records.jsonl";
    std::ofstream(cases_path) << json;
    const std::string src = std::string(WALRELAY_SOURCE_DIR) + "/tests/debezium";
    const std::string log = dir + "/debezium.log";
    auto java = devtools::ChildProcess::Spawn(
        {"java", "-Dlog4j.configuration=file:" + src + "/log4j.properties",
         // OpenTelemetry as a worker enables it, spans exported nowhere (trace headers only).
         "-Dotel.java.global-autoconfigure.enabled=true", "-Dotel.traces.exporter=none",
         "-Dotel.metrics.exporter=none", "-Dotel.logs.exporter=none", "-cp", libs + "/*",
         src + "/DebeziumReference.java", cases_path, out_path},
        log);
    REQUIRE(java.ok());
    auto code = (*java)->Wait(std::chrono::minutes(15));
    REQUIRE_MESSAGE(code.ok(), "the Debezium reference did not finish");
    REQUIRE_MESSAGE(*code == 0, ReadWholeFile(log));
    MESSAGE("Debezium reference:\n" << ReadWholeFile(log));

    std::map<std::string, Outcome> results;
    std::istringstream lines(ReadWholeFile(out_path));
    for (std::string line; std::getline(lines, line);) {
      rapidjson::Document d;
      d.Parse(line.c_str(), line.size());
      REQUIRE_MESSAGE(!d.HasParseError(), line);
      Outcome& out = results[d["case"].GetString()];
      if (d.HasMember("error")) {
        out.error = d["error"].GetString();
        continue;
      }
      Rec r;
      r.topic = d["topic"].GetString();
      if (!d["partition"].IsNull()) r.partition = d["partition"].GetInt();
      if (!d["timestamp"].IsNull()) r.timestamp = d["timestamp"].GetInt64();
      if (!d["key"].IsNull()) r.key = Base64Decode(d["key"].GetString());
      if (!d["value"].IsNull()) r.value = Base64Decode(d["value"].GetString());
      for (const auto& h : d["headers"].GetArray()) {
        std::optional<std::string> v;
        if (!h[1].IsNull()) v = Base64Decode(h[1].GetString());
        r.headers.emplace_back(h[0].GetString(), v);
      }
      out.records.push_back(std::move(r));
    }
    return results;
  }

 private:
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  // Every record on the cluster, in offset order per partition. The relay confirmed the slot
  // only after Kafka acknowledged everything, so what is there now is all there is.
  std::vector<Rec> ReadEverything(const std::string& bootstrap) {
    auto reader = devtools::TopicReader::Create(bootstrap);
    REQUIRE(reader.ok());
    auto topics = (*reader)->ListTopics();
    REQUIRE(topics.ok());
    // walrelay's source position (offsets.storage.topic, default walrelay-offsets-<name>) is
    // its own bookkeeping, as Connect's offsets topic is the worker's: not a record of the
    // connector's to compare.
    std::erase_if(
        *topics, [](const std::string& topic) { return topic.rfind("walrelay-offsets-", 0) == 0; });
    std::vector<ConsumedRecord> consumed;
    if (!topics->empty()) {
      REQUIRE((*reader)->Assign(*topics).ok());
      // A loaded machine can leave the first polls empty: up to three before any record.
      for (int empty = 0; empty < (consumed.empty() ? 3 : 1);) {
        auto more = (*reader)->Poll(std::chrono::milliseconds(700));
        if (more.empty()) {
          ++empty;
          continue;
        }
        empty = 0;
        consumed.insert(consumed.end(), more.begin(), more.end());
      }
    }
    std::stable_sort(consumed.begin(), consumed.end(), [](const auto& a, const auto& b) {
      return std::tie(a.topic, a.partition, a.offset) < std::tie(b.topic, b.partition, b.offset);
    });
    std::vector<Rec> out;
    for (auto& c : consumed) {
      Rec r{c.topic, c.partition, c.timestamp_ms, c.key, c.value, {}};
      for (auto& h : c.headers) r.headers.emplace_back(h.key, h.value);
      out.push_back(std::move(r));
    }
    return out;
  }

  RelayFixture fx_;
  Lsn end_;
  int64_t commit_from_ms_ = 0;
  int64_t commit_to_ms_ = 0;
};

// ---- comparing --------------------------------------------------------------------------

// Differences the suite recognises, by name. Intended ones are walrelay's on purpose and listed
// in docs/event-router.md ("Where walrelay differs from Debezium, and why"); open ones are
// differences walrelay does not mean to have, listed in docs/testing.md until they are fixed.
// Each must still be seen by the representative cases, so a change that removes one has to
// update this list and the documentation with it. Anything else fails the test.
const std::vector<std::string> kIntended = {
    "no extended headers",
    "timestamp: commit time",
    "JSON expansion of documents Debezium infers no schema for",
    "expanded JSON numbers keep their digits",
    "temporal columns are PostgreSQL's text",
    "change events: numeric, temporal and special float columns keep PostgreSQL's rendering",
    "change events: source.version is walrelay's version",
    "numeric columns are JSON numbers in envelope values and JSON headers",
    "an empty bytea payload is a tombstone",
    "field.name.adjustment.mode keeps member values (Debezium writes null)",
    "Debezium stops on a json payload expanded into an envelope; walrelay sends the records",
    "JsonConverter with schemas: such a document's schema is null",
    "StringConverter: bytes inside a struct are base64, not a ByteBuffer's toString",
    "table.fields.additional.error.on.missing=false still skips a missing column (Debezium 3.6 "
    "ignores the key and fails)",
    "table.field.additional.missing=ignore skips a missing column (Debezium 3.2 does not know the "
    "key and fails)",
    "expanded arrays of objects: Debezium adds the members of the other elements as null",
    "an event timestamp of 0: librdkafka stamps the send time where Connect writes 0",
    "decode transform: Debezium stops on the tombstone after a DELETE; walrelay goes on",
};
const std::vector<std::string> kOpen = {
    // None at present; a difference found and not yet fixed is named here.
};

// Kinds only one Debezium version shows: the representative cases must show each kind against
// the versions it belongs to (docs/event-router.md, "Debezium versions").
const std::set<std::string> kOnly32 = {kIntended[14]};
const std::set<std::string> kOnly36 = {kIntended[13]};
bool ExpectedFor(const std::string& name, const std::string& version) {
  if (IsDebezium32(version)) return kOnly36.count(name) == 0;
  return kOnly32.count(name) == 0;
}

// The kinds by name, for the comparison below.
const std::string& kExtendedHeaders = kIntended[0];
const std::string& kCommitTime = kIntended[1];
const std::string& kUnschemaedExpansion = kIntended[2];
const std::string& kExpandedDigits = kIntended[3];
const std::string& kTemporalText = kIntended[4];
const std::string& kChangeEventRendering = kIntended[5];
const std::string& kSourceVersion = kIntended[6];
const std::string& kEnvelopeNumeric = kIntended[7];
const std::string& kEmptyBytea = kIntended[8];
const std::string& kAdjustedNames = kIntended[9];
const std::string& kDebeziumStops = kIntended[10];
const std::string& kExpandedSchema = kIntended[11];
const std::string& kStructBytes = kIntended[12];
const std::string& kLegacyMissingKey = kIntended[13];
const std::string& kNewMissingKey = kIntended[14];
const std::string& kMergedElements = kIntended[15];
const std::string& kZeroTimestamp = kIntended[16];
const std::string& kDecodeStops = kIntended[17];

// What the comparison found: unrecognised differences, which fail the test, and recognised
// ones, counted by name with one example each.
struct Comparison {
  size_t records = 0;
  std::vector<std::string> differences;
  std::map<std::string, size_t> known;
  std::map<std::string, std::string> known_examples;

  void Differ(const std::string& where, const std::string& field, const std::string& debezium,
              const std::string& walrelay) {
    differences.push_back(where + " " + field + ":\n    debezium: " + debezium +
                          "\n    walrelay: " + walrelay);
  }
  void Known(const std::string& name, const std::string& where, const std::string& debezium,
             const std::string& walrelay) {
    const bool listed = std::find(kIntended.begin(), kIntended.end(), name) != kIntended.end() ||
                        std::find(kOpen.begin(), kOpen.end(), name) != kOpen.end();
    REQUIRE_MESSAGE(listed, "unlisted difference name: " << name);
    if (known[name]++ == 0)
      known_examples[name] = where + "\n    debezium: " + debezium + "\n    walrelay: " + walrelay;
  }
};

std::optional<rapidjson::Document> ParseJson(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  rapidjson::Document d;
  d.Parse<rapidjson::kParseFullPrecisionFlag>(text->c_str(), text->size());
  if (d.HasParseError()) return std::nullopt;
  return d;
}

// JSON equality with numbers compared by value and strings after unescaping.
bool SameJson(const rapidjson::Value& a, const rapidjson::Value& b) {
  if (a.IsNumber() && b.IsNumber()) return a.GetDouble() == b.GetDouble();
  if (a.GetType() != b.GetType()) return false;
  if (a.IsString())
    return std::string_view(a.GetString(), a.GetStringLength()) ==
           std::string_view(b.GetString(), b.GetStringLength());
  if (a.IsArray()) {
    if (a.Size() != b.Size()) return false;
    for (rapidjson::SizeType i = 0; i < a.Size(); ++i)
      if (!SameJson(a[i], b[i])) return false;
    return true;
  }
  if (a.IsObject()) {
    if (a.MemberCount() != b.MemberCount()) return false;
    auto ai = a.MemberBegin();
    for (auto bi = b.MemberBegin(); bi != b.MemberEnd(); ++ai, ++bi) {
      if (std::string_view(ai->name.GetString()) != std::string_view(bi->name.GetString()) ||
          !SameJson(ai->value, bi->value))
        return false;
    }
    return true;
  }
  return a == b;
}

std::string Render(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buf);
  v.Accept(writer);
  return buf.GetString();
}

// Connect schemas that differ at most in the order of the fields of merged array-element
// structs (the only required structs an expanded payload's schema has): Debezium merges them
// in the order of a HashSet, which changes from one JVM run to the next.
bool SameUpToMergedOrder(const rapidjson::Value& a, const rapidjson::Value& b) {
  if (!a.IsObject() || !b.IsObject()) return SameJson(a, b);
  if (a.MemberCount() != b.MemberCount()) return false;
  const bool merged = a.HasMember("fields") && a.HasMember("optional") && a["optional"].IsBool() &&
                      !a["optional"].GetBool();
  for (auto m = a.MemberBegin(); m != a.MemberEnd(); ++m) {
    if (!b.HasMember(m->name)) return false;
    const rapidjson::Value& bv = b[m->name];
    const std::string_view name = m->name.GetString();
    if (name == "fields" && m->value.IsArray() && bv.IsArray()) {
      if (m->value.Size() != bv.Size()) return false;
      for (rapidjson::SizeType i = 0; i < m->value.Size(); ++i) {
        bool found = false;
        for (rapidjson::SizeType j = 0; j < bv.Size() && !found; ++j)
          found = (merged || i == j) && SameUpToMergedOrder(m->value[i], bv[j]);
        if (!found) return false;
      }
    } else if (!SameUpToMergedOrder(m->value, bv)) {
      return false;
    }
  }
  return true;
}

bool LooksTemporalText(const std::string& s) {
  static const std::regex kPg("^-?[0-9]{4}-[0-9]{2}-[0-9]{2}( [0-9:.]+([+-][0-9:]+)?)?$");
  return std::regex_match(s, kPg);
}
bool LooksTemporalDebezium(const std::string& s) {
  static const std::regex kEpoch("^-?[0-9]+$");
  static const std::regex kIso("^-?[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z$");
  return std::regex_match(s, kEpoch) || std::regex_match(s, kIso);
}

class Comparer {
 public:
  Comparer(Comparison& result, int64_t commit_from_ms, int64_t commit_to_ms, std::string version)
      : result_(result),
        commit_from_ms_(commit_from_ms),
        commit_to_ms_(commit_to_ms),
        version_(std::move(version)) {}

  void CompareCase(const Case& c, const Outcome& debezium, const Outcome& walrelay) {
    const std::string& name = c.name;
    case_ = &c;
    change_events_ = !c.config.count("transforms");
    if (!debezium.error.empty() || !walrelay.error.empty()) {
      // A case that fails must fail on both sides; its records are not compared.
      if (walrelay.error.empty() && Has("table.expand.json.payload") &&
          Get("table.fields.additional.placement").find(":envelope") != std::string::npos &&
          debezium.error.find("NullPointerException") != std::string::npos) {
        result_.Known(kDebeziumStops, name, debezium.error,
                      std::to_string(walrelay.records.size()) + " record(s)");
      } else if (walrelay.error.empty() && c.config.count("transforms.decode.type") &&
                 c.config.count("tombstones.on.delete") == 0 &&
                 debezium.error.find("NullPointerException") != std::string::npos) {
        result_.Known(kDecodeStops, name, debezium.error,
                      std::to_string(walrelay.records.size()) + " record(s)");
      } else if (walrelay.error.empty() &&
                 debezium.error.find("is not a valid field name") != std::string::npos &&
                 (IsDebezium32(version_)
                      ? Get("table.field.additional.missing") == "ignore"
                      : Get("table.fields.additional.error.on.missing") == "false")) {
        result_.Known(IsDebezium32(version_) ? kNewMissingKey : kLegacyMissingKey, name,
                      debezium.error, std::to_string(walrelay.records.size()) + " record(s)");
      } else if (debezium.error.empty() != walrelay.error.empty()) {
        result_.Differ(name, "failure", debezium.error.empty() ? "(runs)" : debezium.error,
                       walrelay.error.empty() ? "(runs)" : walrelay.error);
      }
      return;
    }
    // walrelay's records per (topic, partition), in offset order.
    std::map<std::pair<std::string, int32_t>, std::deque<const Rec*>> queues;
    for (const auto& r : walrelay.records) queues[{r.topic, *r.partition}].push_back(&r);
    for (size_t i = 0; i < debezium.records.size(); ++i) {
      const Rec& d = debezium.records[i];
      const std::string where = name + " record " + std::to_string(i) + " (" + d.topic + ")";
      ++result_.records;
      const Rec* w = Take(queues, d);
      if (w == nullptr) {
        result_.Differ(where, "record", Describe(d), "(missing)");
        continue;
      }
      CompareRecord(where, d, *w);
    }
    for (const auto& [tp, q] : queues)
      for (const Rec* w : q)
        result_.Differ(name + " (" + tp.first + ")", "record", "(none)", Describe(*w));
  }

 private:
  std::string Get(const std::string& key) const {
    auto it = case_->config.find("transforms.outbox." + key);
    return it == case_->config.end() ? "" : it->second;
  }
  bool Has(const std::string& key) const { return !Get(key).empty(); }

  static std::string Describe(const Rec& r) {
    std::string s = r.topic + "/" + (r.partition ? std::to_string(*r.partition) : "?") +
                    " key=" + Show(r.key) + " value=" + Show(r.value);
    for (const auto& [k, v] : r.headers) s += " " + k + "=" + Show(v);
    return s;
  }

  // The walrelay record that should correspond to `d`: the next on the partition the Java
  // producer would pick. A record the producer spreads freely (null key, no partition) is
  // matched with whichever partition's next record has its value.
  const Rec* Take(std::map<std::pair<std::string, int32_t>, std::deque<const Rec*>>& queues,
                  const Rec& d) {
    std::optional<int32_t> partition = d.partition;
    if (!partition && d.key) partition = JavaPartition(*d.key, kPartitions);
    if (partition) {
      auto it = queues.find({d.topic, *partition});
      if (it == queues.end() || it->second.empty()) return nullptr;
      const Rec* w = it->second.front();
      it->second.pop_front();
      return w;
    }
    // Best first: a null key and the same value, a null key, anything.
    std::deque<const Rec*>* fallback = nullptr;
    int best = -1;
    for (auto& [tp, q] : queues) {
      if (tp.first != d.topic || q.empty()) continue;
      const int score = (q.front()->key ? 0 : 2) + (q.front()->value == d.value ? 1 : 0);
      if (score > best) {
        best = score;
        fallback = &q;
      }
    }
    if (!fallback) return nullptr;
    const Rec* w = fallback->front();
    fallback->pop_front();
    return w;
  }

  void CompareRecord(const std::string& where, const Rec& d, const Rec& w) {
    if (d.key != w.key) result_.Differ(where, "key", Show(d.key), Show(w.key));
    if (d.value != w.value) {
      if (change_events_) {
        CompareChangeEvent(where, d.value, w.value);
      } else {
        CompareRoutedValue(where, d.value, w.value);
      }
    }
    CompareHeaders(where, d, w);
    CompareTimestamp(where, d, w);
  }

  void CompareRoutedValue(const std::string& where, const std::optional<std::string>& d,
                          const std::optional<std::string>& w) {
    if (d && w && w->rfind("Struct{", 0) == 0) {
      // StringConverter's Struct.toString. Debezium sends a payload it cannot infer a schema
      // for unexpanded (its text), and prints bytes inside a struct as a ByteBuffer object.
      auto original = ParseJson(d);
      if (Get("table.expand.json.payload") == "true" && original &&
          (original->IsObject() || original->IsArray())) {
        result_.Known(kUnschemaedExpansion, where, Show(d), Show(w));
        return;
      }
      if (d->rfind("Struct{", 0) == 0 && d->find("java.nio.HeapByteBuffer[") != std::string::npos) {
        result_.Known(kStructBytes, where, Show(d), Show(w));
        return;
      }
    }
    auto dj = ParseJson(d);
    auto wj = ParseJson(w);
    auto schema_envelope = [](const std::optional<rapidjson::Document>& j) {
      return j && j->IsObject() && j->MemberCount() == 2 && j->HasMember("schema") &&
             j->HasMember("payload");
    };
    if (schema_envelope(dj) && schema_envelope(wj)) {
      // JsonConverter with schemas: the schemas, then the payloads as values of their own.
      const rapidjson::Value& ds = (*dj)["schema"];
      const rapidjson::Value& ws = (*wj)["schema"];
      if (!SameJson(ds, ws)) {
        if (ws.IsNull() && Get("table.expand.json.payload") == "true") {
          result_.Known(kExpandedSchema, where, Render(ds), Render(ws));
        } else if (SameUpToMergedOrder(ds, ws)) {
          result_.Known(kMergedElements, where, Render(ds), Render(ws));
        } else {
          result_.Differ(where, "value schema", Render(ds), Render(ws));
        }
      }
      const std::string dp = Render((*dj)["payload"]);
      const std::string wp = Render((*wj)["payload"]);
      if (dp != wp) CompareRoutedValue(where + " payload", dp, wp);
      return;
    }
    if (!w && d && Get("route.tombstone.on.empty.payload") == "true" &&
        Get("table.field.event.payload") == "body_bytes") {
      // An empty bytea payload: Debezium sends it (as "" in JSON), walrelay a tombstone.
      const bool empty = d->empty() || (dj && dj->IsString() && dj->GetStringLength() == 0) ||
                         (dj && dj->IsObject() && dj->HasMember("payload") &&
                          (*dj)["payload"].IsString() && (*dj)["payload"].GetStringLength() == 0);
      if (empty) {
        result_.Known(kEmptyBytea, where, Show(d), Show(w));
        return;
      }
    }
    if (!dj || !wj) {
      result_.Differ(where, "value", Show(d), Show(w));
      return;
    }
    // Debezium's value, with the differences walrelay keeps on purpose applied.
    std::vector<std::string> applied;
    auto& alloc = dj->GetAllocator();
    auto expand = [&](rapidjson::Value& dv, const rapidjson::Value& wv) {
      if (!dv.IsString() || !(wv.IsObject() || wv.IsArray())) return;
      // A document Debezium cannot give a Connect schema (an array mixing element types, a
      // top-level array) is sent unexpanded: JsonConverter writes it as a JSON string.
      rapidjson::Document inner;
      inner.Parse<rapidjson::kParseFullPrecisionFlag>(dv.GetString(), dv.GetStringLength());
      if (inner.HasParseError() || inner.IsObject() != wv.IsObject() ||
          inner.IsArray() != wv.IsArray())
        return;
      dv.CopyFrom(wv, alloc);
      applied.push_back(kUnschemaedExpansion);
    };
    // field.name.adjustment.mode: Debezium (3.2 and 3.6) renames the members but loses their
    // values, null where walrelay keeps them.
    auto adjusted = [&](rapidjson::Value& dv, const rapidjson::Value& wv) {
      if (!Has("field.name.adjustment.mode") || !dv.IsObject() || !wv.IsObject() ||
          dv.MemberCount() != wv.MemberCount() || SameJson(dv, wv))
        return;
      auto wm = wv.MemberBegin();
      for (auto dm = dv.MemberBegin(); dm != dv.MemberEnd(); ++dm, ++wm) {
        if (std::string_view(dm->name.GetString()) != std::string_view(wm->name.GetString()) ||
            (!SameJson(dm->value, wm->value) && !dm->value.IsNull()))
          return;
      }
      dv.CopyFrom(wv, alloc);
      applied.push_back(kAdjustedNames);
    };
    // Arrays of objects: Debezium's elements carry every member of the merged element schema,
    // null where an element lacks it; walrelay's keep their own members.
    bool merged_any = false;
    std::function<void(rapidjson::Value&, const rapidjson::Value&, bool)> merged =
        [&](rapidjson::Value& dv, const rapidjson::Value& wv, bool in_array) {
          if (dv.IsArray() && wv.IsArray() && dv.Size() == wv.Size()) {
            for (rapidjson::SizeType i = 0; i < dv.Size(); ++i) merged(dv[i], wv[i], true);
          } else if (dv.IsObject() && wv.IsObject()) {
            for (auto m = dv.MemberBegin(); m != dv.MemberEnd();) {
              if (in_array && m->value.IsNull() && !wv.HasMember(m->name)) {
                m = dv.EraseMember(m);
                merged_any = true;
              } else {
                if (wv.HasMember(m->name)) merged(m->value, wv[m->name], false);
                ++m;
              }
            }
            // ... and in the merged schema's order, where walrelay keeps the element's.
            if (in_array && dv.MemberCount() == wv.MemberCount() && !SameJson(dv, wv)) {
              rapidjson::Value reordered(rapidjson::kObjectType);
              for (auto m = wv.MemberBegin(); m != wv.MemberEnd(); ++m) {
                if (!dv.HasMember(m->name)) return;
                reordered.AddMember(rapidjson::Value(m->name, alloc),
                                    rapidjson::Value(dv[m->name], alloc), alloc);
              }
              if (SameJson(reordered, wv)) {
                dv = reordered;
                merged_any = true;
              }
            }
          }
        };
    if (dj->IsObject() && wj->IsObject() && dj->HasMember("payload") && wj->HasMember("payload")) {
      // Envelope placements: {"payload": ..., "<alias>": ...}.
      for (auto m = dj->MemberBegin(); m != dj->MemberEnd(); ++m) {
        if (!wj->HasMember(m->name)) continue;
        const rapidjson::Value& wv = (*wj)[m->name];
        if (std::string_view(m->name.GetString()) == "payload") {
          expand(m->value, wv);
          adjusted(m->value, wv);
          merged(m->value, wv, false);
        } else if (m->value.IsString() && wv.IsNumber()) {
          // Debezium's decimal.handling.mode=precise: a numeric column is base64 bytes.
          m->value.CopyFrom(wv, alloc);
          applied.push_back(kEnvelopeNumeric);
        }
      }
    } else {
      expand(*dj, *wj);
      adjusted(*dj, *wj);
      merged(*dj, *wj, false);
    }
    if (merged_any) applied.push_back(kMergedElements);
    if (!SameJson(*dj, *wj)) {
      result_.Differ(where, "value", Show(d), Show(w));
      return;
    }
    if (Render(*wj) != *w) applied.push_back(kExpandedDigits);
    if (applied.empty()) result_.Differ(where, "value", Show(d), Show(w));
    for (const auto& name : applied) result_.Known(name, where, Show(d), Show(w));
  }

  // Change events (no transform): compared member by member.
  void CompareChangeEvent(const std::string& where, const std::optional<std::string>& d,
                          const std::optional<std::string>& w) {
    auto dj = ParseJson(d);
    auto wj = ParseJson(w);
    if (!dj || !wj || !dj->IsObject() || !wj->IsObject()) {
      result_.Differ(where, "value", Show(d), Show(w));
      return;
    }
    // walrelay's own rendering of these columns is intended only while no handling mode is
    // named; named, every column must be Debezium's.
    static const std::set<std::string> kNativeColumns = {"n",    "nn", "r",   "d",  "ts",
                                                         "tstz", "dt", "ts3", "tm", "tm3",
                                                         "tmtz", "iv", "ia",  "ta", "n0"};
    const bool modes_named = case_->config.count("decimal.handling.mode") ||
                             case_->config.count("time.precision.mode") ||
                             case_->config.count("binary.handling.mode");
    const std::set<std::string> kRenderedColumns =
        modes_named ? std::set<std::string>{} : kNativeColumns;
    static const std::set<std::string> kProcessingTime = {"ts_ms", "ts_us", "ts_ns"};
    for (auto m = dj->MemberBegin(); m != dj->MemberEnd(); ++m) {
      const std::string field = m->name.GetString();
      const std::string at = where + " " + field;
      if (!wj->HasMember(field.c_str())) {
        result_.Differ(at, "member", Render(m->value), "(absent)");
        continue;
      }
      const rapidjson::Value& wv = (*wj)[field.c_str()];
      if (kProcessingTime.count(field)) continue;  // when each side serialised the event
      if (field == "before" || field == "after") {
        CompareRow(at, m->value, wv, kRenderedColumns);
        continue;
      }
      if (field == "source" && m->value.IsObject() && wv.IsObject()) {
        for (auto s = m->value.MemberBegin(); s != m->value.MemberEnd(); ++s) {
          const std::string name = s->name.GetString();
          if (!wv.HasMember(name.c_str())) {
            result_.Differ(at + "." + name, "member", Render(s->value), "(absent)");
          } else if (!SameJson(s->value, wv[name.c_str()])) {
            if (name == "version") {
              result_.Known(kSourceVersion, at + "." + name, Render(s->value),
                            Render(wv[name.c_str()]));
            } else {
              result_.Differ(at + "." + name, "member", Render(s->value), Render(wv[name.c_str()]));
            }
          }
        }
        continue;
      }
      if (!SameJson(m->value, wv)) result_.Differ(at, "member", Render(m->value), Render(wv));
    }
    for (auto m = wj->MemberBegin(); m != wj->MemberEnd(); ++m)
      if (!dj->HasMember(m->name))
        result_.Differ(where + " " + m->name.GetString(), "member", "(absent)", Render(m->value));
  }

  void CompareRow(const std::string& at, const rapidjson::Value& d, const rapidjson::Value& w,
                  const std::set<std::string>& rendered) {
    if (!d.IsObject() || !w.IsObject()) {
      if (!SameJson(d, w)) result_.Differ(at, "member", Render(d), Render(w));
      return;
    }
    for (auto c = d.MemberBegin(); c != d.MemberEnd(); ++c) {
      const std::string col = c->name.GetString();
      if (!w.HasMember(col.c_str())) {
        result_.Differ(at + "." + col, "column", Render(c->value), "(absent)");
      } else if (!SameJson(c->value, w[col.c_str()])) {
        if (rendered.count(col)) {
          result_.Known(kChangeEventRendering, at + "." + col, Render(c->value),
                        Render(w[col.c_str()]));
        } else {
          result_.Differ(at + "." + col, "column", Render(c->value), Render(w[col.c_str()]));
        }
      }
    }
  }

  // Debezium 3.2's extended headers (__debezium.context.*) are left out by walrelay on purpose;
  // temporal columns in headers are PostgreSQL's text in walrelay.
  void CompareHeaders(const std::string& where, const Rec& d, const Rec& w) {
    auto render = [](const auto& headers) {
      std::string s;
      for (const auto& [k, v] : headers) s += (s.empty() ? "" : ", ") + k + "=" + Show(v);
      return "[" + s + "]";
    };
    std::vector<std::pair<std::string, std::optional<std::string>>> expected;
    bool extended = false;
    for (const auto& h : d.headers) {
      if (h.first.rfind("__debezium.context.", 0) == 0) {
        extended = true;
      } else {
        expected.push_back(h);
      }
    }
    if (extended) result_.Known(kExtendedHeaders, where, render(d.headers), render(w.headers));
    // Trace headers: each side makes a new random span id (and, without a parent, a new
    // trace id); the trace, the flags and where the header stands must agree.
    static const std::regex kTraceparent("00-([0-9a-f]{32})-([0-9a-f]{16})-(0[0-3])");
    for (size_t i = 0; i < expected.size() && i < w.headers.size(); ++i) {
      if (expected[i].first != "traceparent" || w.headers[i].first != "traceparent" ||
          !expected[i].second || !w.headers[i].second)
        continue;
      std::smatch dm, wm;
      const std::string dv = *expected[i].second, wv = *w.headers[i].second;
      if (!std::regex_search(dv, dm, kTraceparent) || !std::regex_search(wv, wm, kTraceparent))
        continue;
      const bool same_trace = dm[1] == wm[1];
      const bool both_roots = dm[1] != kParentTrace && wm[1] != kParentTrace;
      if (dm[3] == wm[3] && (same_trace || both_roots) && dm.prefix().str() == wm.prefix().str() &&
          dm.suffix().str() == wm.suffix().str())
        expected[i].second = wv;
    }
    if (expected.size() == w.headers.size()) {
      bool names_match = true;
      for (size_t i = 0; i < expected.size(); ++i) {
        const auto& [dk, dv] = expected[i];
        const auto& [wk, wv] = w.headers[i];
        if (dk != wk) names_match = false;
        if (dk == wk && dv != wv && dv && wv && LooksTemporalDebezium(*dv) &&
            LooksTemporalText(*wv)) {
          result_.Known(kTemporalText, where + " header " + dk, Show(dv), Show(wv));
          expected[i].second = wv;
        }
        // JsonConverter headers without schemas under walrelay's rendering: a numeric column
        // is its number where Debezium's Decimal is base64 bytes.
        auto dh = ParseJson(dv);
        auto wh = ParseJson(wv);
        if (dk == wk && dv != wv && dh && wh && dh->IsString() && wh->IsNumber()) {
          result_.Known(kEnvelopeNumeric, where + " header " + dk, Show(dv), Show(wv));
          expected[i].second = wv;
        }
      }
      if (!names_match) result_.Differ(where, "header names", render(expected), render(w.headers));
    }
    if (expected != w.headers)
      result_.Differ(where, "headers", render(expected), render(w.headers));
  }

  // walrelay stamps a record with its commit time where Debezium leaves the processing time
  // (or, without a transform, the producer's send time): both after the commit.
  void CompareTimestamp(const std::string& where, const Rec& d, const Rec& w) {
    if (d.timestamp && w.timestamp && *d.timestamp == *w.timestamp) return;
    if (Has("table.field.event.timestamp") && w.timestamp && *w.timestamp >= commit_to_ms_) {
      // Both leave the timestamp to the producer, which stamps the send time (an event
      // timestamp of -1); librdkafka does the same for 0, where Connect writes 0.
      if (!d.timestamp) return;
      if (*d.timestamp == 0) {
        result_.Known(kZeroTimestamp, where, "0", std::to_string(*w.timestamp));
        return;
      }
    }
    const std::string shown_d = d.timestamp ? std::to_string(*d.timestamp) : "(send time)";
    const std::string shown_w = w.timestamp ? std::to_string(*w.timestamp) : "(none)";
    const bool commit_time = w.timestamp && *w.timestamp >= commit_from_ms_ - 1000 &&
                             *w.timestamp <= commit_to_ms_ + 1000;
    if (commit_time && (!d.timestamp || *d.timestamp >= *w.timestamp)) {
      result_.Known(kCommitTime, where, shown_d, shown_w);
      return;
    }
    result_.Differ(where, "timestamp", shown_d, shown_w);
  }

  Comparison& result_;
  int64_t commit_from_ms_;
  int64_t commit_to_ms_;
  std::string version_;
  bool change_events_ = false;
  const Case* case_ = nullptr;
};

void RunSuite(bool full) {
  const std::string version = DebeziumVersion();
  const auto started = std::chrono::steady_clock::now();
  Harness h;
  const std::vector<Case> cases = AllCases(full, version);
  auto walrelay = h.RunWalrelay(cases, 4);
  const auto walrelay_done = std::chrono::steady_clock::now();
  auto debezium = h.RunDebezium(version, cases, walrelay);
  const auto debezium_done = std::chrono::steady_clock::now();

  Comparison result;
  Comparer comparer(result, h.commit_from_ms(), h.commit_to_ms(), version);
  for (const auto& c : cases) {
    CAPTURE(c.name);
    REQUIRE_MESSAGE(debezium.count(c.name), "the reference wrote nothing for " << c.name);
    comparer.CompareCase(c, debezium[c.name], walrelay[c.name]);
  }
  auto list = [&](const std::vector<std::string>& names) {
    std::string text;
    for (const auto& name : names) {
      auto it = result.known.find(name);
      if (it == result.known.end()) continue;
      text += "\n  " + name + ": " + std::to_string(it->second) + " time(s), e.g. " +
              result.known_examples[name];
    }
    return text;
  };
  std::string differences;
  for (const auto& d : result.differences) differences += "\n  " + d;
  auto seconds = [](auto from, auto to) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count() / 1000.0;
  };
  MESSAGE("Debezium " << version << ": " << cases.size() << " cases, " << result.records
                      << " Debezium records compared, " << result.differences.size()
                      << " unrecognised difference(s); walrelay " << seconds(started, walrelay_done)
                      << " s, Debezium " << seconds(walrelay_done, debezium_done) << " s"
                      << "\nintended divergences (docs/event-router.md):" << list(kIntended)
                      << "\nopen differences (docs/testing.md):" << list(kOpen)
                      << "\nunrecognised differences:" << differences);
  CHECK(result.records > 0);
  CHECK(result.differences.empty());
  // The recognised differences are all still there: a change that removes one must take it
  // off the lists above and out of the documentation.
  if (!full) {
    for (const auto* names : {&kIntended, &kOpen})
      for (const auto& name : *names)
        if (ExpectedFor(name, version))
          CHECK_MESSAGE(result.known.count(name), "no longer seen: " << name);
  }
}

}  // namespace

TEST_CASE("debezium parity: the comparison finds what differs and expects the Java producer's "
          "partitions") {
  // Partitions computed with Kafka 3.9.1's Utils.murmur2 and Utils.toPositive.
  const std::vector<std::tuple<std::string, int32_t, int32_t>> java = {
      {"k1", 1, 0},
      {"key-1", 0, 5},
      {"clé-3", 1, 0},
      {"{\"id\":2}", 0, 5},
      {"a-little-bit-longer-string", 3, 0},
      {"", 1, 2}};
  for (const auto& [key, of4, of7] : java) {
    CHECK(JavaPartition(key, 4) == of4);
    CHECK(JavaPartition(key, 7) == of7);
  }

  const int64_t commit = 1'700'000'000'000;
  Rec debezium{"outbox.event.Order", std::nullopt,
               commit + 50,          "k1",
               "{\"a\": 1}",         {{"__debezium.context.taskId", "0"}, {"id", "e1"}}};
  Rec walrelay{"outbox.event.Order", 1, commit, "k1", "{\"a\": 1}", {{"id", "e1"}}};
  Case c{"unit", RouterBase("public.outbox")};
  auto compare = [&](const Rec& w) {
    Comparison result;
    Comparer(result, commit, commit, kDefaultDebezium)
        .CompareCase(c, Outcome{{debezium}, ""}, Outcome{{w}, ""});
    return result;
  };
  Comparison same = compare(walrelay);
  CHECK(same.differences.empty());
  CHECK(same.known.count(kExtendedHeaders) == 1);  // extended headers
  CHECK(same.known.count(kCommitTime) == 1);       // commit time

  Rec other_value = walrelay;
  other_value.value = "{\"a\": 2}";
  CHECK(compare(other_value).differences.size() == 1);
  Rec other_partition = walrelay;
  other_partition.partition = 2;  // not where the Java producer puts key k1: missing and extra
  CHECK(compare(other_partition).differences.size() == 2);
  Rec other_headers = walrelay;
  other_headers.headers = {{"id", "e1"}, {"extra", std::nullopt}};
  CHECK(compare(other_headers).differences.size() == 1);
  Rec late = walrelay;
  late.timestamp = commit + 60'000;  // neither the commit time nor Debezium's
  CHECK(compare(late).differences.size() == 1);
}

TEST_CASE("debezium parity: the representative cases give the records Debezium gives") {
  RunSuite(false);
}

TEST_CASE("debezium parity: every combination of the generated dimensions" *
          doctest::skip(std::getenv("WALRELAY_DEBEZIUM_FULL") == nullptr)) {
  RunSuite(true);
}
