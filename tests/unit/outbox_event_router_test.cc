// Outbox Event Router and its Java regex support, driven with hand-built RowChange objects.
#include "transform/outbox_event_router.h"

#include <doctest/doctest.h>
#include <rapidjson/document.h>

#include <map>
#include <memory>
#include <string>

#include "transform/change_event_source.h"
#include "transform/java_regex.h"

namespace walrelay {
namespace {

constexpr const char* kLsnText = "16/B374D848";
constexpr int64_t kCommitMs = 1700000000123;

Column Col(std::string name, std::string type, ValueKind kind, std::string text) {
  return Column{std::move(name), std::move(type), kind, std::move(text)};
}
Column Text(std::string name, std::string text, std::string type = "text") {
  return Col(std::move(name), std::move(type), ValueKind::kString, std::move(text));
}
Column Int(std::string name, std::string text, std::string type = "integer") {
  return Col(std::move(name), std::move(type), ValueKind::kNumber, std::move(text));
}
Column Null(std::string name, std::string type) {
  return Col(std::move(name), std::move(type), ValueKind::kNull, "");
}

// An outbox row as PostgreSQL 15 + wal2json render it, with Debezium's default column names.
RowChange OutboxRow(ChangeOp op = ChangeOp::kInsert) {
  RowChange row;
  row.op = op;
  row.lsn = Lsn::Parse(kLsnText).value();
  row.xid = 771;
  row.schema = "public";
  row.table = "outbox";
  row.commit_time_ms = kCommitMs;
  row.primary_key = {"id"};
  row.columns = {
      Text("id", "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70", "uuid"),
      Text("aggregatetype", "Order", "character varying(255)"),
      Text("aggregateid", "42", "character varying(255)"),
      Text("type", "OrderCreated", "character varying(255)"),
      Text("payload", R"({"a": 1})", "jsonb"),
  };
  return row;
}

void Set(RowChange& row, Column column) {
  for (auto& c : row.columns) {
    if (c.name == column.name) {
      c = std::move(column);
      return;
    }
  }
  row.columns.push_back(std::move(column));
}

void Remove(RowChange& row, const std::string& name) {
  std::erase_if(row.columns, [&](const Column& c) { return c.name == name; });
}

Properties Scoped(const std::map<std::string, std::string>& config) {
  std::map<std::string, std::string> full;
  for (const auto& [k, v] : config) full["transforms.outbox." + k] = v;
  return Properties(std::move(full)).Scoped("transforms.outbox.");
}

std::unique_ptr<Transform> MakeRouter(const std::map<std::string, std::string>& config = {}) {
  auto router = MakeOutboxEventRouter("outbox", Scoped(config));
  REQUIRE_MESSAGE(router.ok(), router.status().ToString());
  return std::move(router).value();
}

Status ConfigStatus(const std::map<std::string, std::string>& config) {
  auto router = MakeOutboxEventRouter("outbox", Scoped(config));
  return router.status();
}

Record RecordFor(const RowChange& row) {
  return MakeSourceRecord(row, SourceContext{"walrelay", "shop", "outbox-connector", {}});
}

// Routes `row` and returns the record, requiring success and kKeep.
Record Routed(Transform& router, const RowChange& row) {
  Record record = RecordFor(row);
  auto outcome = router.Apply(record);
  REQUIRE_MESSAGE(outcome.ok(), outcome.status().ToString());
  REQUIRE(outcome.value() == TransformOutcome::kKeep);
  return record;
}

Status RouteError(Transform& router, const RowChange& row) {
  Record record = RecordFor(row);
  auto outcome = router.Apply(record);
  REQUIRE_FALSE(outcome.ok());
  return outcome.status();
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Asserts a record-level error that names `subject`, the table and the LSN.
void CheckRecordError(const Status& st, const std::string& subject) {
  INFO(st.ToString());
  CHECK(st.code() == ErrorCode::kTransform);
  CHECK(Contains(st.message(), subject));
  CHECK(Contains(st.message(), "public.outbox"));
  CHECK(Contains(st.message(), kLsnText));
}

void CheckConfigError(const std::map<std::string, std::string>& config, const std::string& key,
                      const std::string& also = "") {
  const Status st = ConfigStatus(config);
  INFO(st.ToString());
  CHECK(st.code() == ErrorCode::kConfig);
  CHECK(Contains(st.message(), "transforms.outbox." + key));
  if (!also.empty()) CHECK(Contains(st.message(), also));
}

rapidjson::Document ParseJson(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  REQUIRE_MESSAGE(!doc.HasParseError(), text);
  return doc;
}

// ---------------------------------------------------------------------------------------------
// TopicRegex

TopicRegex Regex(const std::string& pattern, const std::string& replacement) {
  auto re = TopicRegex::Compile(pattern, replacement, "p.regex", "p.replacement");
  REQUIRE_MESSAGE(re.ok(), re.status().ToString());
  return std::move(re).value();
}

TEST_CASE("TopicRegex: Debezium's default pattern keeps case and accepts the empty value") {
  const TopicRegex re = Regex(kDefaultRouteTopicRegex, kDefaultRouteTopicReplacement);
  CHECK(re.group_count() == 1);
  CHECK(re.Apply("Order") == std::optional<std::string>("outbox.event.Order"));
  CHECK(re.Apply("") == std::optional<std::string>("outbox.event."));
}

TEST_CASE("TopicRegex: numbered and named groups in the replacement") {
  CHECK(Regex("(.*)Created", "events.$1").Apply("OrderCreated") ==
        std::optional<std::string>("events.Order"));
  CHECK(Regex(R"((?<domain>[a-z]+)\.(?<agg>[A-Za-z]+))", "${agg}-${domain}").Apply("shop.Order") ==
        std::optional<std::string>("Order-shop"));
  // Java takes further digits only while they still name a group: $12 is group 1, then "2".
  CHECK(Regex("(a)", "$12").Apply("a") == std::optional<std::string>("a2"));
  CHECK(Regex("(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)", "$10").Apply("abcdefghij") ==
        std::optional<std::string>("j"));
  CHECK(Regex("x(.*)", "$0/$1").Apply("xy") == std::optional<std::string>("xy/y"));
  // A group that did not take part contributes nothing.
  CHECK(Regex("(a)?b", "[$1]").Apply("b") == std::optional<std::string>("[]"));
}

TEST_CASE("TopicRegex: replacement escapes follow Matcher.appendReplacement") {
  CHECK(Regex("(.*)", R"(\$1-\\-$1)").Apply("v") == std::optional<std::string>(R"($1-\-v)"));
  CHECK(Regex("(.*)", R"(a\b)").Apply("v") == std::optional<std::string>("ab"));
}

TEST_CASE("TopicRegex: the pattern must match the whole value") {
  const TopicRegex re = Regex("order", "x");
  CHECK_FALSE(re.Apply("orders").has_value());
  CHECK_FALSE(re.Apply("my-order").has_value());
  CHECK(re.Apply("order") == std::optional<std::string>("x"));
  // matches() + replaceFirst(): the first find is replaced, like Kafka's RegexRouter.
  CHECK(Regex("a|ab", "X").Apply("ab") == std::optional<std::string>("Xb"));
}

TEST_CASE("TopicRegex: `.` excludes Java's line terminators") {
  const TopicRegex re = Regex(kDefaultRouteTopicRegex, kDefaultRouteTopicReplacement);
  CHECK_FALSE(re.Apply("a\nb").has_value());
  CHECK_FALSE(re.Apply("a\rb").has_value());
  CHECK_FALSE(re.Apply("a\u2028b").has_value());
  CHECK_FALSE(re.Apply("a\u0085b").has_value());
  CHECK(re.Apply("a\tb") == std::optional<std::string>("outbox.event.a\tb"));
}

TEST_CASE("TopicRegex: matching is on code points, invalid UTF-8 bytes pass through") {
  CHECK(Regex("(?<first>.)(.*)", "${first}").Apply("Überweisung") ==
        std::optional<std::string>("Ü"));
  CHECK(Regex(".{3}", "three").Apply("äöü") == std::optional<std::string>("three"));
  CHECK(Regex("(.*)", "t.$1").Apply("a\xff") == std::optional<std::string>("t.a\xff"));
}

TEST_CASE("TopicRegex: Java constructs that std::regex lacks are translated") {
  CHECK(Regex(R"(\Qa.b\E)", "q").Apply("a.b").has_value());
  CHECK_FALSE(Regex(R"(\Qa.b\E)", "q").Apply("axb").has_value());
  CHECK(Regex("[]a]+", "c").Apply("]a]").has_value());
  CHECK(Regex(R"(\Aab\z)", "z").Apply("ab").has_value());
  CHECK(Regex(R"((a)\1)", "b").Apply("aa").has_value());
  CHECK(Regex(R"((?<x>a)\k<x>)", "k").Apply("aa").has_value());
  CHECK(Regex(R"(\x41\u0042\0103)", "h").Apply("ABC").has_value());
  CHECK(Regex(R"(\x{1F600})", "e").Apply("\U0001F600").has_value());
  CHECK(Regex("(?i)order", "i").Apply("ORDER").has_value());
  CHECK_FALSE(Regex(R"(\w+)", "w").Apply("é").has_value());  // ASCII classes, as in Java
  CHECK(Regex(R"((a{1,3}?)(a*))", "$1|$2").Apply("aaa") == std::optional<std::string>("a|aa"));
}

TEST_CASE("TopicRegex: unsupported or invalid patterns are config errors naming the key") {
  auto check = [](const std::string& pattern, const std::string& what) {
    auto re = TopicRegex::Compile(pattern, "x", "p.regex", "p.replacement");
    REQUIRE_FALSE(re.ok());
    INFO(re.status().ToString());
    CHECK(re.status().code() == ErrorCode::kConfig);
    CHECK(Contains(re.status().message(), "p.regex"));
    CHECK(Contains(re.status().message(), what));
  };
  check("(?<=a)b", "lookbehind");
  check("(?<!a)b", "lookbehind");
  check("(abc", "invalid regular expression");
  check("a*+", "possessive");
  check("(?>a)", "atomic");
  check(R"(\p{L})", "\\p");
  check("a(?i)b", "inline flags");
  check("[a[b]]", "nested");
  check("[a&&b]", "intersection");
  check("a{x}", "quantifier");
  check(R"(\1(a))", "backreference");
  check("(?<n>a)(?<n>b)", "twice");
  check("[ab", "unclosed");
}

TEST_CASE("TopicRegex: bad replacements are config errors naming the replacement key") {
  auto check = [](const std::string& pattern, const std::string& replacement,
                  const std::string& what) {
    auto re = TopicRegex::Compile(pattern, replacement, "p.regex", "p.replacement");
    REQUIRE_FALSE(re.ok());
    INFO(re.status().ToString());
    CHECK(re.status().code() == ErrorCode::kConfig);
    CHECK(Contains(re.status().message(), "p.replacement"));
    CHECK(Contains(re.status().message(), what));
  };
  check(kDefaultRouteTopicRegex, "outbox.${nope}", "no group named 'nope'");
  check("(a)", "$2", "does not exist");
  check("(a)", "x$", "'$'");
  check("(a)", "$x", "group number");
  check("(?<n>a)", "${n", "missing its '}'");
  check("(a)", "x\\", "trailing");
}

// ---------------------------------------------------------------------------------------------
// Router: defaults and routing

TEST_CASE("router: defaults route an insert like Debezium") {
  auto router = MakeRouter();
  const RowChange row = OutboxRow();
  const Record r = Routed(*router, row);
  CHECK(r.topic == "outbox.event.Order");
  CHECK(r.key == std::optional<std::string>("42"));
  CHECK(r.value == std::optional<std::string>(R"({"a": 1})"));
  REQUIRE(r.headers.size() == 1);
  CHECK(r.headers[0].key == "id");
  CHECK(r.headers[0].value == std::optional<std::string>("8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70"));
  CHECK(r.timestamp_ms == kCommitMs);
  CHECK(r.partition == kAnyPartition);
  CHECK(r.change == nullptr);
  CHECK(router->alias() == "outbox");
}

TEST_CASE("router: custom regex and replacement; no match keeps the raw value") {
  auto router = MakeRouter({{"route.topic.regex", "(?<agg>[A-Z][a-z]+)"},
                            {"route.topic.replacement", "events.${agg}.v1"}});
  RowChange row = OutboxRow();
  CHECK(Routed(*router, row).topic == "events.Order.v1");
  Set(row, Text("aggregatetype", "order-lines", "character varying(255)"));
  CHECK(Routed(*router, row).topic == "order-lines");

  auto numbered = MakeRouter({{"route.topic.regex", "(.*)"}, {"route.topic.replacement", "t.$1"}});
  CHECK(Routed(*numbered, OutboxRow()).topic == "t.Order");
}

TEST_CASE("router: many distinct route values keep routing past the topic cache bound") {
  auto router = MakeRouter();
  RowChange row = OutboxRow();
  for (int i = 0; i < 10050; i += 7) {
    Set(row, Text("aggregatetype", "Agg" + std::to_string(i), "text"));
    REQUIRE(Routed(*router, row).topic == "outbox.event.Agg" + std::to_string(i));
  }
  Set(row, Text("aggregatetype", "Order", "text"));
  CHECK(Routed(*router, row).topic == "outbox.event.Order");
}

TEST_CASE("router: route column may be any string type") {
  auto router = MakeRouter();
  RowChange row = OutboxRow();
  for (const char* type : {"text", "uuid", "character(5)", "mood", "jsonb"}) {
    Set(row, Text("aggregatetype", "Order", type));
    CHECK(Routed(*router, row).topic == "outbox.event.Order");
  }
}

TEST_CASE("router: key column rendered as text, integer, or null") {
  auto router = MakeRouter();
  RowChange row = OutboxRow();
  Set(row, Text("aggregateid", "customer-7", "text"));
  CHECK(Routed(*router, row).key == std::optional<std::string>("customer-7"));
  Set(row, Int("aggregateid", "7"));
  CHECK(Routed(*router, row).key == std::optional<std::string>("7"));
  Set(row, Int("aggregateid", "9007199254740993", "bigint"));
  CHECK(Routed(*router, row).key == std::optional<std::string>("9007199254740993"));
  Set(row, Null("aggregateid", "character varying(255)"));
  CHECK_FALSE(Routed(*router, row).key.has_value());

  auto custom = MakeRouter({{"table.field.event.key", "type"}});
  CHECK(Routed(*custom, OutboxRow()).key == std::optional<std::string>("OrderCreated"));
}

// ---------------------------------------------------------------------------------------------
// Router: value

TEST_CASE("router: payload bytes are exactly what PostgreSQL rendered") {
  auto router = MakeRouter();
  RowChange row = OutboxRow();
  SUBCASE("jsonb is sent as its JSON text, not as a quoted string") {
    Set(row, Text("payload", R"({"id": 5, "items": [1, 2]})", "jsonb"));
    CHECK(Routed(*router, row).value ==
          std::optional<std::string>(R"({"id": 5, "items": [1, 2]})"));
  }
  SUBCASE("text and json columns") {
    Set(row, Text("payload", "plain text", "text"));
    CHECK(Routed(*router, row).value == std::optional<std::string>("plain text"));
    Set(row, Text("payload", R"({"b":1,  "a":2})", "json"));
    CHECK(Routed(*router, row).value == std::optional<std::string>(R"({"b":1,  "a":2})"));
  }
  SUBCASE("bytea is decoded from wal2json's hex") {
    Set(row, Text("payload", "0102ff00", "bytea"));
    CHECK(Routed(*router, row).value ==
          std::optional<std::string>(std::string("\x01\x02\xff\x00", 4)));
  }
  SUBCASE("invalid bytea hex is an error naming the column") {
    Set(row, Text("payload", "0g", "bytea"));
    CheckRecordError(RouteError(*router, row), "payload");
  }
  SUBCASE("unicode and escapes are preserved byte for byte") {
    const std::string text =
        "{\"msg\": \"na\xc3\xafve \\\"q\\\" \\n \\u00e9 \xf0\x9f\x98\x80\\\\\"}";
    Set(row, Text("payload", text, "jsonb"));
    CHECK(Routed(*router, row).value == std::optional<std::string>(text));
  }
  SUBCASE("NULL payload gives a null value") {
    Set(row, Null("payload", "jsonb"));
    const Record r = Routed(*router, row);
    CHECK_FALSE(r.value.has_value());
    CHECK(r.key == std::optional<std::string>("42"));
  }
  SUBCASE("a blank payload is sent as is when tombstones are off") {
    Set(row, Text("payload", "  ", "text"));
    CHECK(Routed(*router, row).value == std::optional<std::string>("  "));
  }
}

TEST_CASE("router: route.tombstone.on.empty.payload turns empty payloads into tombstones") {
  auto router = MakeRouter({{"route.tombstone.on.empty.payload", "true"},
                            {"table.fields.additional.placement", "type:header"}});
  RowChange row = OutboxRow();
  for (const Column& payload : {Text("payload", "", "text"), Text("payload", " \t\n", "text"),
                                Null("payload", "jsonb"), Text("payload", "", "bytea")}) {
    Set(row, payload);
    const Record r = Routed(*router, row);
    CHECK_FALSE(r.value.has_value());
    CHECK(r.topic == "outbox.event.Order");
    CHECK(r.key == std::optional<std::string>("42"));
    REQUIRE(r.headers.size() == 2);
    CHECK(r.headers[0].key == "id");
    CHECK(r.headers[1].key == "type");
    CHECK(r.timestamp_ms == kCommitMs);
  }
  Set(row, Text("payload", "{}", "jsonb"));
  CHECK(Routed(*router, row).value == std::optional<std::string>("{}"));
}

TEST_CASE("router: JSON expansion re-serialises compactly with null/empty-array behaviours") {
  RowChange row = OutboxRow();
  Set(row, Text("payload",
                R"({"a": 1, "b": null, "c": [], "d": {"e": null, "f": [], "g": "x"}, )"
                R"("h": [1, null], "big": 123456789012345678901234567890, "dec": 1.50, "t": true})",
                "jsonb"));
  SUBCASE("ignore drops null members and empty arrays, recursively in objects") {
    auto router = MakeRouter({{"table.expand.json.payload", "true"}});
    CHECK(
        Routed(*router, row).value ==
        std::optional<std::string>(R"({"a":1,"d":{"g":"x"},"h":[1,null],)"
                                   R"("big":123456789012345678901234567890,"dec":1.50,"t":true})"));
  }
  SUBCASE("optional_bytes keeps nulls, optional_string keeps empty arrays") {
    auto router = MakeRouter({{"table.expand.json.payload", "true"},
                              {"table.json.payload.null.behavior", "optional_bytes"},
                              {"table.json.payload.empty.array.behavior", "OPTIONAL_STRING"}});
    CHECK(Routed(*router, row).value ==
          std::optional<std::string>(R"({"a":1,"b":null,"c":[],"d":{"e":null,"f":[],"g":"x"},)"
                                     R"("h":[1,null],"big":123456789012345678901234567890,)"
                                     R"("dec":1.50,"t":true})"));
  }
  SUBCASE("top-level arrays and string escapes") {
    auto router = MakeRouter({{"table.expand.json.payload", "true"}});
    Set(row, Text("payload", R"([ {"k": "a\"b\u00e9"}, 2 ])", "json"));
    CHECK(Routed(*router, row).value ==
          std::optional<std::string>("[{\"k\":\"a\\\"b\xc3\xa9\"},2]"));
  }
  SUBCASE("duplicate members: first position, last value (Jackson's reading)") {
    auto router = MakeRouter({{"table.expand.json.payload", "true"}});
    Set(row, Text("payload", R"({"a": 1, "b": 2, "a": 3})", "json"));
    CHECK(Routed(*router, row).value == std::optional<std::string>(R"({"a":3,"b":2})"));
  }
}

TEST_CASE("router: an expanded payload carries the Connect schema Debezium infers") {
  RowChange row = OutboxRow();
  auto router = MakeRouter({{"table.expand.json.payload", "true"}});
  auto schema_of = [&](Transform& t) { return Routed(t, row).value_shape.schema_json; };
  SUBCASE("types, member paths as struct names, nulls and empty arrays left out") {
    Set(row, Text("payload",
                  R"({"s": "x", "i": 1, "l": 3000000000, "d": 1.5, "b": true, "n": null,)"
                  R"( "e": [], "o": {"k": [1, 2]}})",
                  "jsonb"));
    CHECK(schema_of(*router) ==
          R"({"type":"struct","fields":[{"type":"string","optional":true,"field":"s"},)"
          R"({"type":"int32","optional":true,"field":"i"},)"
          R"({"type":"int64","optional":true,"field":"l"},)"
          R"({"type":"double","optional":true,"field":"d"},)"
          R"({"type":"boolean","optional":true,"field":"b"},)"
          R"({"type":"struct","fields":[{"type":"array","items":{"type":"int32","optional":true},)"
          R"("optional":true,"field":"k"}],"optional":true,"name":"payload.o","field":"o"}],)"
          R"("optional":true,"name":"payload"})");
  }
  SUBCASE("object elements merge their members in the order they come") {
    Set(row, Text("payload", R"({"a": [{"x": 1}, {"y": "z"}, {"x": 2, "w": null}]})", "jsonb"));
    CHECK(schema_of(*router) ==
          R"({"type":"struct","fields":[{"type":"array","items":{"type":"struct","fields":[)"
          R"({"type":"int32","optional":true,"field":"x"},)"
          R"({"type":"string","optional":true,"field":"y"}],"optional":false,"name":"payload.a"},)"
          R"("optional":true,"field":"a"}],"optional":true,"name":"payload"})");
    // The elements stay as they are (docs/event-router.md).
    CHECK(Routed(*router, row).value ==
          std::optional<std::string>(R"({"a":[{"x":1},{"y":"z"},{"x":2}]})"));
    // Equal element schemas are not merged: the element schema stays optional.
    Set(row, Text("payload", R"({"a": [{"x": 1}, {"x": 2}, null]})", "jsonb"));
    CHECK(Contains(schema_of(*router), R"("optional":true,"name":"payload.a")"));
    // A null element of a merged (required) element schema fails Connect's validation.
    Set(row, Text("payload", R"({"a": [{"x": 1}, {"y": "z"}, null]})", "jsonb"));
    CHECK(schema_of(*router).empty());
  }
  SUBCASE("documents Debezium cannot give a schema: expanded, schema null") {
    for (const char* text : {R"({"a": [1, "x"]})", R"({"a": [1, 3000000000]})",
                             R"({"a": [null, null]})", R"({"a": 123456789012345678901234567890})",
                             R"({"a": [{"x": 1}, {"x": "s"}]})", R"([1, 2])"}) {
      CAPTURE(text);
      Set(row, Text("payload", text, "jsonb"));
      const Record r = Routed(*router, row);
      CHECK(r.value_shape.schema_json.empty());
      CHECK(r.value.has_value());
      CHECK((*r.value)[0] != '"');
    }
  }
  SUBCASE("in an envelope: the inferred schema is the payload member's, else unexpanded") {
    auto envelope = MakeRouter({{"table.fields.additional.placement", "type:envelope"},
                                {"table.expand.json.payload", "true"}});
    Set(row, Text("payload", R"({"a": 1})", "jsonb"));
    Record r = Routed(*envelope, row);
    CHECK(r.value == std::optional<std::string>(R"({"payload":{"a":1},"type":"OrderCreated"})"));
    CHECK(Contains(r.value_shape.schema_json,
                   R"("fields":[{"type":"struct","fields":[{"type":"int32","optional":true,)"
                   R"("field":"a"}],"optional":true,"name":"payload","field":"payload"},)"));
    Set(row, Text("payload", R"({"a": [1, "x"]})", "jsonb"));
    r = Routed(*envelope, row);
    CHECK(r.value ==
          std::optional<std::string>(R"({"payload":"{\"a\": [1, \"x\"]}","type":"OrderCreated"})"));
    CHECK(Contains(r.value_shape.schema_json, R"("name":"io.debezium.data.Json")"));
  }
}

TEST_CASE("router: field.name.adjustment.mode renames expanded members") {
  RowChange row = OutboxRow();
  Set(row, Text("payload", R"({"test$": 1, "1a": 2, "ok_1": 3, "n": {"x-y": 4}})", "jsonb"));
  auto avro =
      MakeRouter({{"table.expand.json.payload", "true"}, {"field.name.adjustment.mode", "avro"}});
  CHECK(Routed(*avro, row).value ==
        std::optional<std::string>(R"({"test_":1,"_1a":2,"ok_1":3,"n":{"x_y":4}})"));
  auto unicode = MakeRouter(
      {{"table.expand.json.payload", "true"}, {"field.name.adjustment.mode", "avro_unicode"}});
  CHECK(Routed(*unicode, row).value ==
        std::optional<std::string>(
            R"({"test_u0024":1,"_u0031a":2,"ok_u005f1":3,"n":{"x_u002dy":4}})"));
  auto none = MakeRouter({{"table.expand.json.payload", "true"}});
  CHECK(Routed(*none, row).value ==
        std::optional<std::string>(R"({"test$":1,"1a":2,"ok_1":3,"n":{"x-y":4}})"));
}

TEST_CASE("router: a payload that is not a JSON object or array is kept unexpanded") {
  auto router = MakeRouter({{"table.expand.json.payload", "true"}});
  RowChange row = OutboxRow();
  for (const char* text : {"not json", " {\"a\": 1}", "{\"a\":", "123", "\"s\"", ""}) {
    Set(row, Text("payload", text, "text"));
    CHECK(Routed(*router, row).value == std::optional<std::string>(text));
  }
  Set(row, Text("payload", std::string(600, '[') + std::string(600, ']'), "json"));
  CHECK(Routed(*router, row).value ==
        std::optional<std::string>(std::string(600, '[') + std::string(600, ']')));
  Set(row, Int("payload", "5"));
  CHECK(Routed(*router, row).value == std::optional<std::string>("5"));
  Set(row, Null("payload", "jsonb"));
  CHECK_FALSE(Routed(*router, row).value.has_value());
}

TEST_CASE("router: envelope mode wraps the payload with the placed columns in config order") {
  RowChange row = OutboxRow();
  Set(row, Int("version", "3"));
  Set(row, Col("urgent", "boolean", ValueKind::kBool, "true"));
  Set(row, Null("note", "text"));
  Set(row, Col("amount", "numeric", ValueKind::kNumber, "10.50"));
  auto router = MakeRouter({{"table.fields.additional.placement",
                             " type : envelope : eventType , version:envelope,urgent:ENVELOPE,"
                             "note:envelope,amount:envelope,aggregateid:header"}});
  const Record r = Routed(*router, row);
  REQUIRE(r.value.has_value());
  CHECK(*r.value ==
        R"({"payload":"{\"a\": 1}","eventType":"OrderCreated","version":3,"urgent":true,)"
        R"("note":null,"amount":10.50})");
  const rapidjson::Document doc = ParseJson(*r.value);
  CHECK(std::string(doc["payload"].GetString()) == R"({"a": 1})");
  REQUIRE(r.headers.size() == 2);
  CHECK(r.headers[1].key == "aggregateid");

  SUBCASE("expanded payload is embedded as JSON") {
    auto expanding = MakeRouter({{"table.fields.additional.placement", "type:envelope"},
                                 {"table.expand.json.payload", "true"}});
    CHECK(Routed(*expanding, row).value ==
          std::optional<std::string>(R"({"payload":{"a":1},"type":"OrderCreated"})"));
  }
  SUBCASE("NULL payload is null in the envelope; bytea is base64") {
    Set(row, Null("payload", "jsonb"));
    auto plain = MakeRouter({{"table.fields.additional.placement", "type:envelope"}});
    CHECK(Routed(*plain, row).value ==
          std::optional<std::string>(R"({"payload":null,"type":"OrderCreated"})"));
    Set(row, Text("payload", "0102ff", "bytea"));
    CHECK(Routed(*plain, row).value ==
          std::optional<std::string>(R"({"payload":"AQL/","type":"OrderCreated"})"));
  }
}

// ---------------------------------------------------------------------------------------------
// Router: headers, partition, timestamp

TEST_CASE("router: header placements follow the id header in config order") {
  RowChange row = OutboxRow();
  Set(row, Null("note", "text"));
  Set(row, Int("version", "3"));
  auto router = MakeRouter(
      {{"table.fields.additional.placement",
        "type:header:eventType,aggregatetype:header,note:header,version:header,id:header"}});
  const Record r = Routed(*router, row);
  REQUIRE(r.headers.size() == 6);
  CHECK(r.headers[0].key == "id");
  CHECK(r.headers[1].key == "eventType");
  CHECK(r.headers[1].value == std::optional<std::string>("OrderCreated"));
  CHECK(r.headers[2].key == "aggregatetype");
  CHECK(r.headers[2].value == std::optional<std::string>("Order"));
  CHECK(r.headers[3].key == "note");
  CHECK_FALSE(r.headers[3].value.has_value());
  CHECK(r.headers[4].value == std::optional<std::string>("3"));
  CHECK(r.headers[5].key == "id");  // duplicates are allowed, as in Debezium
  CHECK(r.FindHeader("eventType") == &r.headers[1]);

  Set(row, Null("id", "uuid"));
  const Record null_id = Routed(*router, row);
  CHECK(null_id.headers[0].key == "id");
  CHECK_FALSE(null_id.headers[0].value.has_value());
}

TEST_CASE("router: trace context headers come before id, as Debezium injects them") {
  RowChange row = OutboxRow();
  const std::string trace = "0af7651916cd43dd8448eb211c80319c";
  auto router = MakeRouter({});
  SUBCASE("a row without the context column, or NULL: no trace headers by default") {
    CHECK(Routed(*router, row).headers.size() == 1);
    Set(row, Null("tracingspancontext", "text"));
    CHECK(Routed(*router, row).headers.size() == 1);
  }
  SUBCASE("a context: traceparent (and tracestate) of a child span") {
    Set(row, Text("tracingspancontext",
                  "#Mon Jan 01 00:00:00 UTC 2024\ntraceparent=00-" + trace +
                      "-b7ad6b7169203331-01\ntracestate=k=v\n",
                  "text"));
    const Record r = Routed(*router, row);
    REQUIRE(r.headers.size() == 3);
    CHECK(r.headers[0].key == "traceparent");
    CHECK(r.headers[0].value->substr(0, 36) == "00-" + trace + "-");
    CHECK(r.headers[0].shape.schema_json == R"({"type":"string","optional":false})");
    CHECK(r.headers[1].key == "tracestate");
    CHECK(r.headers[1].value == std::optional<std::string>("k=v"));
    CHECK(r.headers[2].key == "id");
  }
  SUBCASE("another column, and every row traced with tracing.with.context.field.only=false") {
    auto all = MakeRouter({{"tracing.span.context.field", "ctx"},
                           {"tracing.with.context.field.only", "false"},
                           {"tracing.operation.name", "relay"}});
    const Record r = Routed(*all, row);
    REQUIRE(r.headers.size() == 2);
    CHECK(r.headers[0].key == "traceparent");
    CHECK(r.headers[0].value->substr(3, 32) != trace);
    Set(row, Text("ctx", "traceparent=00-" + trace + "-b7ad6b7169203331-00", "varchar"));
    CHECK(Routed(*all, row).headers[0].value->substr(3, 32) == trace);
  }
  SUBCASE("a context column that is not text fails the record, naming it") {
    Set(row, Int("tracingspancontext", "5"));
    CheckRecordError(RouteError(*router, row), "tracingspancontext");
  }
}

TEST_CASE("router: partition placement takes integer columns only") {
  auto router = MakeRouter({{"table.fields.additional.placement", "part:partition:ignored"}});
  RowChange row = OutboxRow();
  Set(row, Int("part", "3"));
  const Record r = Routed(*router, row);
  CHECK(r.partition == 3);
  CHECK(r.headers.size() == 1);

  Set(row, Null("part", "integer"));
  CHECK(Routed(*router, row).partition == kAnyPartition);

  Set(row, Int("part", "3", "bigint"));
  Status st = RouteError(*router, row);
  CheckRecordError(st, "'part'");
  CHECK(Contains(st.message(), "bigint"));
  CHECK(Contains(st.message(), "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70"));

  Set(row, Int("part", "3", "smallint"));
  CheckRecordError(RouteError(*router, row), "smallint");

  Set(row, Int("part", "-1"));
  CheckRecordError(RouteError(*router, row), "'part'");
}

TEST_CASE("router: table.field.event.timestamp") {
  auto router = MakeRouter({{"table.field.event.timestamp", "created_at"}});
  RowChange row = OutboxRow();
  SUBCASE("timestamp(3): milliseconds, wall clock read as UTC") {
    Set(row, Text("created_at", "2019-03-24 20:52:59.123", "timestamp(3) without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 1553460779123);
  }
  SUBCASE("microsecond precision is truncated to milliseconds") {
    Set(row, Text("created_at", "2019-03-24 20:52:59.123987", "timestamp without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 1553460779123);
    Set(row, Text("created_at", "2019-03-24 20:52:59", "timestamp(6) without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 1553460779000);
  }
  SUBCASE("NULL falls back to the commit time") {
    Set(row, Null("created_at", "timestamp without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == kCommitMs);
  }
  SUBCASE("at and before the epoch: what Kafka Connect's worker sends") {
    // 0 stays 0 (librdkafka then stamps the send time; Connect writes CreateTime 0).
    Set(row, Text("created_at", "1970-01-01 00:00:00", "timestamp without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 0);
    // -1 is Kafka's "no timestamp": the producer stamps the send time, as for Connect.
    Set(row, Text("created_at", "1969-12-31 23:59:59.999", "timestamp without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 0);
    // Debezium turns microseconds into milliseconds by Java's division, toward zero: strictly
    // between -2 and -1 ms is -1, the send time; between -1 ms and 0 it is 0.
    Set(row, Text("created_at", "1969-12-31 23:59:59.9985", "timestamp without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 0);
    Set(row, Text("created_at", "1969-12-31 23:59:59.998001", "timestamp without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 0);
    Set(row, Text("created_at", "1969-12-31 23:59:59.9995", "timestamp without time zone"));
    CHECK(Routed(*router, row).timestamp_ms == 0);
    // Earlier: Connect fails the record, and so does walrelay, naming column and value.
    Set(row, Text("created_at", "1969-12-31 23:59:59.998", "timestamp without time zone"));
    Status st = RouteError(*router, row);
    CheckRecordError(st, "'created_at'");
    CHECK(Contains(st.message(), "1969-12-31 23:59:59.998"));
    CHECK(Contains(st.message(), "-2 ms"));
    Set(row, Text("created_at", "1900-01-01 00:00:00", "timestamp without time zone"));
    CheckRecordError(RouteError(*router, row), "1900-01-01");
  }
  SUBCASE("other types are refused, naming column and type") {
    for (const Column& c :
         {Text("created_at", "2019-03-24 20:52:59+00", "timestamp with time zone"),
          Int("created_at", "1553460779000", "bigint"), Text("created_at", "2019-03-24", "date")}) {
      Set(row, c);
      const Status st = RouteError(*router, row);
      CheckRecordError(st, "'created_at'");
      CHECK(Contains(st.message(), c.type));
      CHECK(Contains(st.message(), "transforms.outbox.table.field.event.timestamp"));
    }
  }
  SUBCASE("missing column and unparsable value are errors") {
    CheckRecordError(RouteError(*router, row), "'created_at'");
    Set(row, Text("created_at", "infinity", "timestamp without time zone"));
    CheckRecordError(RouteError(*router, row), "infinity");
  }
  SUBCASE("blank key means unset") {
    auto unset = MakeRouter({{"table.field.event.timestamp", " "}});
    CHECK(Routed(*unset, row).timestamp_ms == kCommitMs);
  }
}

// ---------------------------------------------------------------------------------------------
// Router: operations other than insert

TEST_CASE("router: updates follow table.op.invalid.behavior") {
  const RowChange row = OutboxRow(ChangeOp::kUpdate);
  for (const char* behaviour : {"warn", "error", " ERROR "}) {
    auto router = MakeRouter({{"table.op.invalid.behavior", behaviour}});
    Record record = RecordFor(row);
    auto outcome = router->Apply(record);
    REQUIRE(outcome.ok());
    CHECK(outcome.value() == TransformOutcome::kDrop);
  }
  auto fatal = MakeRouter({{"table.op.invalid.behavior", "fatal"}});
  const Status st = RouteError(*fatal, row);
  CheckRecordError(st, "UPDATE");
  CHECK(Contains(st.message(), "transforms.outbox.table.op.invalid.behavior"));
}

TEST_CASE("router: deletes and truncates are dropped, messages and non-rows pass through") {
  auto router = MakeRouter();
  for (ChangeOp op : {ChangeOp::kDelete, ChangeOp::kTruncate}) {
    RowChange row = OutboxRow(op);
    row.identity = row.columns;
    row.columns.clear();
    Record record = RecordFor(row);
    auto outcome = router->Apply(record);
    REQUIRE(outcome.ok());
    CHECK(outcome.value() == TransformOutcome::kDrop);
  }

  const RowChange message = OutboxRow(ChangeOp::kMessage);
  Record record = RecordFor(message);
  const Record before = record;
  auto outcome = router->Apply(record);
  REQUIRE(outcome.ok());
  CHECK(outcome.value() == TransformOutcome::kKeep);
  CHECK(record.change == &message);
  CHECK(record.topic == before.topic);

  Record plain;
  plain.topic = "__heartbeat";
  plain.value = "beat";
  plain.headers = {Header{"h", "v"}};
  outcome = router->Apply(plain);
  REQUIRE(outcome.ok());
  CHECK(outcome.value() == TransformOutcome::kKeep);
  CHECK(plain.topic == "__heartbeat");
  CHECK(plain.value == std::optional<std::string>("beat"));
  CHECK(plain.headers.size() == 1);
}

// ---------------------------------------------------------------------------------------------
// Router: record-level errors

TEST_CASE("router: missing or unusable routing columns are errors naming column and LSN") {
  auto router = MakeRouter();
  RowChange row = OutboxRow();
  SUBCASE("route column missing") {
    Remove(row, "aggregatetype");
    const Status st = RouteError(*router, row);
    CheckRecordError(st, "'aggregatetype'");
    CHECK(Contains(st.message(), "transforms.outbox.route.by.field"));
    CHECK(Contains(st.message(), "event id '8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70'"));
  }
  SUBCASE("route value NULL") {
    Set(row, Null("aggregatetype", "character varying(255)"));
    const Status st = RouteError(*router, row);
    CheckRecordError(st, "'aggregatetype'");
    CHECK(Contains(st.message(), "NULL"));
  }
  SUBCASE("route column not a string type") {
    for (const Column& c :
         {Int("aggregatetype", "5"), Col("aggregatetype", "boolean", ValueKind::kBool, "true"),
          Text("aggregatetype", "2024-01-01", "date"), Text("aggregatetype", "0102", "bytea"),
          Text("aggregatetype", "{a,b}", "text[]")}) {
      Set(row, c);
      const Status st = RouteError(*router, row);
      CheckRecordError(st, "'aggregatetype'");
      CHECK(Contains(st.message(), c.type));
    }
  }
  SUBCASE("id column missing") {
    Remove(row, "id");
    const Status st = RouteError(*router, row);
    CheckRecordError(st, "'id'");
    CHECK(Contains(st.message(), "transforms.outbox.table.field.event.id"));
  }
  SUBCASE("key column missing") {
    Remove(row, "aggregateid");
    const Status st = RouteError(*router, row);
    CheckRecordError(st, "'aggregateid'");
    CHECK(Contains(st.message(), "transforms.outbox.table.field.event.key"));
  }
  SUBCASE("payload column missing") {
    Remove(row, "payload");
    const Status st = RouteError(*router, row);
    CheckRecordError(st, "'payload'");
    CHECK(Contains(st.message(), "transforms.outbox.table.field.event.payload"));
  }
  SUBCASE("renamed columns are looked up under their configured names") {
    auto renamed = MakeRouter({{"table.field.event.id", "event_id"}});
    const Status st = RouteError(*renamed, row);
    CheckRecordError(st, "'event_id'");
  }
}

TEST_CASE("router: a missing additional column fails unless configured to be skipped") {
  const RowChange row = OutboxRow();
  const std::string placement = "tenant:header,region:envelope,type:header";

  auto strict = MakeRouter({{"table.fields.additional.placement", placement}});
  const Status st = RouteError(*strict, row);
  CheckRecordError(st, "'tenant'");
  CHECK(Contains(st.message(), "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70"));
  CHECK(Contains(st.message(), "transforms.outbox.table.field.additional.missing"));

  for (const auto& skip :
       {std::map<std::string, std::string>{{"table.fields.additional.placement", placement},
                                           {"table.field.additional.missing", "ignore"}},
        std::map<std::string, std::string>{
            {"table.fields.additional.placement", placement},
            {"table.fields.additional.error.on.missing", "false"}}}) {
    auto lenient = MakeRouter(skip);
    const Record r = Routed(*lenient, row);
    // Envelope mode stays on even though its only column is missing.
    CHECK(r.value == std::optional<std::string>(R"({"payload":"{\"a\": 1}"})"));
    REQUIRE(r.headers.size() == 2);
    CHECK(r.headers[1].key == "type");
  }

  auto explicit_error = MakeRouter({{"table.fields.additional.placement", placement},
                                    {"table.field.additional.missing", "error"},
                                    {"table.fields.additional.error.on.missing", "true"}});
  CheckRecordError(RouteError(*explicit_error, row), "'tenant'");
}

// ---------------------------------------------------------------------------------------------
// Router: configuration

TEST_CASE("router: invalid configuration is a config error naming the key") {
  CheckConfigError({{"route.topic.regex", "(abc"}}, "route.topic.regex", "(abc");
  CheckConfigError({{"route.topic.regex", "(?<=x)y"}}, "route.topic.regex", "lookbehind");
  CheckConfigError({{"route.topic.replacement", "x.${missing}"}}, "route.topic.replacement",
                   "missing");
  CheckConfigError({{"table.fields.additional.placement", "type"}},
                   "table.fields.additional.placement", "column:placement");
  CheckConfigError({{"table.fields.additional.placement", "type:header:a:b"}},
                   "table.fields.additional.placement");
  CheckConfigError({{"table.fields.additional.placement", ""}}, "table.fields.additional.placement",
                   "empty");
  CheckConfigError({{"table.fields.additional.placement", "  "}},
                   "table.fields.additional.placement", "empty");
  CheckConfigError({{"table.fields.additional.placement", "type:header,,id:header"}},
                   "table.fields.additional.placement", "empty entry");
  CheckConfigError({{"table.fields.additional.placement", "type:somewhere"}},
                   "table.fields.additional.placement", "somewhere");
  CheckConfigError({{"table.fields.additional.placement", "type::alias"}},
                   "table.fields.additional.placement", "unknown placement");
  CheckConfigError({{"table.fields.additional.placement", ":header"}},
                   "table.fields.additional.placement", "no column");
  CheckConfigError({{"table.fields.additional.placement", "type:header: "}},
                   "table.fields.additional.placement", "empty alias");
  CheckConfigError({{"table.fields.additional.placement", "type:envelope:payload"}},
                   "table.fields.additional.placement", "payload");
  CheckConfigError({{"table.fields.additional.placement", "type:envelope:t,id:envelope:t"}},
                   "table.fields.additional.placement", "repeats");
  CheckConfigError({{"table.field.additional.missing", "skip"}}, "table.field.additional.missing",
                   "skip");
  CheckConfigError({{"table.fields.additional.error.on.missing", "nope"}},
                   "table.fields.additional.error.on.missing");
  CheckConfigError({{"table.field.additional.missing", "ignore"},
                    {"table.fields.additional.error.on.missing", "true"}},
                   "table.field.additional.missing", "disagree");
  CheckConfigError({{"table.op.invalid.behavior", "explode"}}, "table.op.invalid.behavior",
                   "warn, error, fatal");
  CheckConfigError({{"table.json.payload.null.behavior", "drop"}},
                   "table.json.payload.null.behavior");
  CheckConfigError({{"table.json.payload.empty.array.behavior", "drop"}},
                   "table.json.payload.empty.array.behavior");
  CheckConfigError({{"field.name.adjustment.mode", "kebab"}}, "field.name.adjustment.mode");
  CheckConfigError({{"route.tombstone.on.empty.payload", "maybe"}},
                   "route.tombstone.on.empty.payload");
  CheckConfigError({{"table.expand.json.payload", "yes"}}, "table.expand.json.payload");
  CheckConfigError({{"tracing.with.context.field.only", "sometimes"}},
                   "tracing.with.context.field.only");
  CheckConfigError({{"table.field.event.id", " "}}, "table.field.event.id", "column");
  CheckConfigError({{"route.by.field", ""}}, "route.by.field", "column");
}

TEST_CASE("router: removed Debezium keys are refused with their new names") {
  CheckConfigError({{"table.field.event.payload.id", "aggregateid"}},
                   "table.field.event.payload.id", "transforms.outbox.table.field.event.key");
  CheckConfigError({{"debezium.op.invalid.behavior", "warn"}}, "debezium.op.invalid.behavior",
                   "transforms.outbox.table.op.invalid.behavior");
  CheckConfigError({{"debezium.expand.json.payload", "true"}}, "debezium.expand.json.payload",
                   "transforms.outbox.table.expand.json.payload");
}

TEST_CASE("router: every accepted key counts as read; unknown keys do not") {
  std::map<std::string, std::string> full;
  const std::map<std::string, std::string> config = {
      {"table.field.event.id", "id"},
      {"table.field.event.key", "aggregateid"},
      {"table.field.event.type", "type"},
      {"table.field.event.payload", "payload"},
      {"table.field.event.timestamp", ""},
      {"table.fields.additional.placement", "type:header"},
      {"table.field.additional.missing", "error"},
      {"table.fields.additional.error.on.missing", "true"},
      {"table.field.event.schema.version", "version"},
      {"route.by.field", "aggregatetype"},
      {"route.topic.regex", "(?<routedByValue>.*)"},
      {"route.topic.replacement", "outbox.event.${routedByValue}"},
      {"route.tombstone.on.empty.payload", "false"},
      {"table.op.invalid.behavior", "warn"},
      {"table.expand.json.payload", "false"},
      {"table.json.payload.null.behavior", "ignore"},
      {"table.json.payload.empty.array.behavior", "ignore"},
      {"field.name.adjustment.mode", "none"},
      {"tracing.span.context.field", "tracingspancontext"},
      {"tracing.operation.name", "debezium-read"},
      {"tracing.with.context.field.only", "false"},
      {"tracing.some.future.key", "x"},
      {"bogus.key", "1"},
  };
  for (const auto& [k, v] : config) full["transforms.outbox." + k] = v;
  full["transforms.outbox.type"] = kOutboxEventRouterType;
  full["transforms"] = "outbox";
  const Properties root(full);
  auto router = MakeOutboxEventRouter("outbox", root.Scoped("transforms.outbox."));
  REQUIRE(router.ok());
  root.MarkRead("transforms");
  root.MarkRead("transforms.outbox.type");
  CHECK(root.UnreadKeys() == std::vector<std::string>{"transforms.outbox.bogus.key"});
}

TEST_CASE("router: the type name constant matches Debezium's class") {
  CHECK(std::string(kOutboxEventRouterType) == "io.debezium.transforms.outbox.EventRouter");
}

}  // namespace
}  // namespace walrelay

namespace walrelay {
namespace {

// What the converters need: Debezium's Connect schemas of key, value and headers.
TEST_CASE("router: records carry the Connect shapes of key, value and headers") {
  const ColumnModes debezium{DecimalMode::kPrecise, TimeMode::kAdaptive, BinaryMode::kBytes};
  auto make = [&](const std::map<std::string, std::string>& config) {
    auto router = MakeOutboxEventRouter("outbox", Scoped(config), debezium);
    REQUIRE_MESSAGE(router.ok(), router.status().ToString());
    return std::move(router).value();
  };
  RowChange row = OutboxRow();
  Set(row, Int("version", "3"));
  Set(row, Text("amount", "12.50", "numeric(10,2)"));

  auto plain = make({{"table.fields.additional.placement", "amount:header"}});
  Record r = Routed(*plain, row);
  CHECK(r.key_shape.type == ConnectType::kString);
  CHECK(r.key_shape.schema_json == R"({"type":"string","optional":true})");
  CHECK(r.value_shape.type == ConnectType::kString);
  CHECK(r.value_shape.schema_json.find("io.debezium.data.Json") != std::string::npos);
  CHECK(r.headers[0].shape.schema_json.find("io.debezium.data.Uuid") != std::string::npos);
  REQUIRE(r.headers.size() == 2);
  CHECK(r.headers[1].shape.type == ConnectType::kBytes);
  CHECK(r.headers[1].shape.schema_json.find("org.apache.kafka.connect.data.Decimal") !=
        std::string::npos);
  CHECK(r.headers[1].value == std::string("\x04\xe2", 2));  // 1250, scale 2

  // The envelope: Debezium's schema name with the route value, and the version column.
  auto envelope = make({{"table.fields.additional.placement", "type:envelope:eventType"},
                        {"table.field.event.schema.version", "version"}});
  Record e = Routed(*envelope, row);
  CHECK(e.value_shape.type == ConnectType::kStruct);
  CHECK(
      e.value_shape.schema_json ==
      R"({"type":"struct","fields":[{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},)"
      R"({"type":"string","optional":true,"field":"eventType"}],"optional":false,)"
      R"("name":"walrelay.public.outbox.Order.Value","version":3})");

  // A tombstone has no schema; a NULL payload keeps its column's.
  auto tombstones = make({{"route.tombstone.on.empty.payload", "true"}});
  Set(row, Null("payload", "jsonb"));
  Record t = Routed(*tombstones, row);
  CHECK(!t.value);
  CHECK(t.value_shape.schema_json.empty());
  Record n = Routed(*plain, row);
  CHECK(!n.value);
  CHECK_FALSE(n.value_shape.schema_json.empty());
}

}  // namespace
}  // namespace walrelay
