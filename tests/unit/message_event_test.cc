// Logical decoding messages as records: Debezium's message event, and the decode transform
// that makes a message's JSON content route through the EventRouter exactly like an outbox row.
#include "transform/message_event.h"

#include <doctest/doctest.h>
#include <rapidjson/document.h>

#include <map>
#include <string>

#include "transform/chain.h"
#include "transform/change_event_source.h"
#include "transform/connect_column.h"

namespace walrelay {
namespace {

constexpr const char* kLsnText = "16/B374D848";
constexpr int64_t kCommitMs = 1700000000123;
constexpr uint32_t kXid = 771;
const SourceContext kContext{"walrelay", "shop", "outbox-connector", {}};

LogicalMessage Message(std::string content, std::string prefix = "outbox") {
  LogicalMessage m;
  m.lsn = Lsn::Parse(kLsnText).value();
  m.transactional = true;
  m.prefix = std::move(prefix);
  m.content = std::move(content);
  return m;
}

// The same event twice: as an outbox row the way PostgreSQL renders it (jsonb keeps its own
// spacing), and as pg_logical_emit_message() content with the same members.
RowChange OutboxRow(const std::string& payload_type = "jsonb") {
  RowChange row;
  row.op = ChangeOp::kInsert;
  row.lsn = Lsn::Parse(kLsnText).value();
  row.xid = kXid;
  row.schema = "public";
  row.table = "outbox";
  row.commit_time_ms = kCommitMs;
  row.primary_key = {"id"};
  row.columns = {
      {"id", "uuid", ValueKind::kString, "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70"},
      {"aggregatetype", "character varying(255)", ValueKind::kString, "Order"},
      {"aggregateid", "character varying(255)", ValueKind::kString, "42"},
      {"type", "character varying(255)", ValueKind::kString, "OrderCreated"},
      {"payload", payload_type, ValueKind::kString, R"({"a": 1, "b": [true, null]})"},
      {"tenant", "integer", ValueKind::kNumber, "7"},
  };
  return row;
}
const std::string kContent =
    R"({"id": "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70", "aggregatetype": "Order",)"
    R"( "aggregateid": "42", "type": "OrderCreated", "payload": {"a": 1, "b": [true, null]},)"
    R"( "tenant": 7})";

Properties Config(const std::map<std::string, std::string>& config) {
  return Properties(std::map<std::string, std::string>(config));
}

TransformChain Chain(const std::map<std::string, std::string>& config) {
  auto chain = TransformChain::Build(Config(config), kContext);
  REQUIRE_MESSAGE(chain.ok(), chain.status().ToString());
  return std::move(chain).value();
}

// Runs `record` through `chain`, requiring kKeep, and fills in the value a change left at the
// end of the chain would get (as the relay does).
Record Through(TransformChain& chain, Record record) {
  auto outcome = chain.Apply(record);
  REQUIRE_MESSAGE(outcome.ok(), outcome.status().ToString());
  REQUIRE(*outcome == TransformOutcome::kKeep);
  if (record.change) record.value = SerializeChangeEvent(*record.change, kContext, 0);
  return record;
}

void CheckSameRecord(const Record& a, const Record& b) {
  CHECK(a.topic == b.topic);
  CHECK(a.key == b.key);
  CHECK(a.value == b.value);
  CHECK(a.partition == b.partition);
  CHECK(a.timestamp_ms == b.timestamp_ms);
  REQUIRE(a.headers.size() == b.headers.size());
  for (size_t i = 0; i < a.headers.size(); ++i) {
    CHECK(a.headers[i].key == b.headers[i].key);
    CHECK(a.headers[i].value == b.headers[i].value);
  }
}

Status DecodeError(const std::string& content) {
  RowChange row;
  const Status st = DecodeMessageContent(Message(content), kXid, kCommitMs, false, row);
  REQUIRE_FALSE(st.ok());
  CHECK(row.columns.empty());
  return st;
}

}  // namespace

TEST_CASE("a message event is Debezium's: <topic.prefix>.message, prefix key, base64 content") {
  const LogicalMessage message = Message("{\"x\":1}");
  const Record r = MakeMessageRecord(message, kXid, kCommitMs, kContext, 1700000000999);
  CHECK(r.topic == "walrelay.message");
  CHECK(r.key == std::string(R"({"prefix":"outbox"})"));
  CHECK(r.timestamp_ms == kCommitMs);
  CHECK(r.message == &message);
  CHECK(r.change == nullptr);
  REQUIRE(r.value.has_value());
  rapidjson::Document doc;
  doc.Parse(r.value->c_str());
  REQUIRE_FALSE(doc.HasParseError());
  CHECK(std::string(doc["op"].GetString()) == "m");
  CHECK(doc["ts_ms"].GetInt64() == 1700000000999);
  CHECK(std::string(doc["message"]["prefix"].GetString()) == "outbox");
  CHECK(std::string(doc["message"]["content"].GetString()) == "eyJ4IjoxfQ==");  // {"x":1}
  CHECK(doc["source"]["lsn"].GetUint64() == message.lsn.value());
  CHECK(doc["source"]["txId"].GetUint() == kXid);
  CHECK(doc["source"]["ts_ms"].GetInt64() == kCommitMs);
  CHECK(std::string(doc["source"]["table"].GetString()).empty());
}

TEST_CASE("decoded message content: members become typed columns in order") {
  RowChange row;
  const LogicalMessage message = Message(
      R"({"s": "ünï \"q\"", "i": -12, "big": 9007199254740993, "huge": 123456789012345678901,)"
      R"( "f": 1.50, "t": true, "n": null, "o": {"k": [1, {"z": "}"}]}, "a": [ ], "s": "last"})");
  REQUIRE(DecodeMessageContent(message, kXid, kCommitMs, false, row).ok());
  CHECK(row.op == ChangeOp::kInsert);
  CHECK(row.lsn == message.lsn);
  CHECK(row.xid == kXid);
  CHECK(row.commit_time_ms == kCommitMs);
  std::vector<std::string> names;
  for (const Column& c : row.columns) names.push_back(c.name);
  // "n" (null) is left out; the repeated "s" keeps its last value, at the end.
  CHECK(names == std::vector<std::string>{"i", "big", "huge", "f", "t", "o", "a", "s"});
  auto col = [&](const char* name) { return *row.Find(name); };
  CHECK(col("s").text == "last");
  CHECK(col("s").type == "text");
  CHECK(col("i").type == "integer");
  CHECK(col("i").text == "-12");
  CHECK(col("big").type == "bigint");
  CHECK(col("big").text == "9007199254740993");  // exact: never through a double
  CHECK(col("huge").type == "numeric");
  CHECK(col("f").type == "double precision");
  CHECK(col("f").text == "1.50");
  CHECK(col("t").kind == ValueKind::kBool);
  CHECK(col("o").type == "json");
  CHECK(col("o").kind == ValueKind::kString);
  CHECK(col("o").text == R"({"k": [1, {"z": "}"}]})");  // the application's bytes
  CHECK(col("a").text == "[ ]");

  RowChange with_nulls;
  REQUIRE(DecodeMessageContent(message, kXid, kCommitMs, true, with_nulls).ok());
  REQUIRE(with_nulls.Find("n") != nullptr);
  CHECK(with_nulls.Find("n")->is_null());
  // Typed bytes, as Debezium's inferred schema for a kept null member is.
  CHECK(with_nulls.Find("n")->type == "bytea");
  CHECK(ColumnSchemaJson(*with_nulls.Find("n"), ColumnModes{}) ==
        R"({"type":"bytes","optional":true})");
}

TEST_CASE(
    "content that is not a JSON object is an error naming the prefix and LSN, not the content") {
  for (const char* content : {"", "[1, 2]", "\"text\"", "42", "{\"a\": 1", "{\"a\": 1} {}",
                              "not json", "{\"secret\": tru}", "\xff\xfe"}) {
    INFO(content);
    const Status st = DecodeError(content);
    CHECK(st.code() == ErrorCode::kTransform);
    CHECK(st.message().find("prefix 'outbox'") != std::string::npos);
    CHECK(st.message().find(kLsnText) != std::string::npos);
    CHECK(st.message().find("not a JSON object") != std::string::npos);
    CHECK(st.message().find("secret") == std::string::npos);
  }
  std::string deep = "{\"a\": ";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  deep += "}";
  CHECK(DecodeError(deep).message().find("nests deeper than") != std::string::npos);
}

TEST_CASE("decode + EventRouter: a message gives the record an outbox row gives") {
  const std::map<std::string, std::string> router = {
      {"transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"},
  };
  std::map<std::string, std::string> decode_then_router = router;
  decode_then_router["transforms"] = "decode,outbox";
  decode_then_router["transforms.decode.type"] =
      "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent";
  std::map<std::string, std::string> rows_only = router;
  rows_only["transforms"] = "outbox";

  auto check = [&](const std::map<std::string, std::string>& extra) {
    auto with_extra = [&](std::map<std::string, std::string> config) {
      for (const auto& [k, v] : extra) config[k] = v;
      return Chain(config);
    };
    TransformChain row_chain = with_extra(rows_only);
    TransformChain message_chain = with_extra(decode_then_router);
    const RowChange row = OutboxRow();
    const LogicalMessage message = Message(kContent);
    const Record from_row = Through(row_chain, MakeSourceRecord(row, kContext));
    const Record from_message =
        Through(message_chain, MakeMessageRecord(message, kXid, kCommitMs, kContext, 0));
    CHECK(from_row.topic == "outbox.event.Order");
    CheckSameRecord(from_row, from_message);
    // The decode step passes rows through untouched.
    CheckSameRecord(from_row, Through(message_chain, MakeSourceRecord(row, kContext)));
  };
  SUBCASE("payload only") { check({}); }
  SUBCASE("expanded JSON payload") {
    check({{"transforms.outbox.table.expand.json.payload", "true"}});
  }
  SUBCASE("envelope with a header, an envelope field and a partition") {
    check({{"transforms.outbox.table.fields.additional.placement",
            "type:header:eventType,type:envelope:eventType,tenant:partition"}});
  }
}

TEST_CASE(
    "without the decode transform a message passes the EventRouter as Debezium's message event") {
  TransformChain chain =
      Chain({{"transforms", "outbox"},
             {"transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"}});
  const LogicalMessage message = Message(kContent);
  const Record raw = MakeMessageRecord(message, kXid, kCommitMs, kContext, 5);
  const Record out = Through(chain, raw);
  CheckSameRecord(out, raw);
  CHECK(out.topic == "walrelay.message");
}

TEST_CASE("decode transform: a content error fails the record and names the alias") {
  TransformChain chain =
      Chain({{"transforms", "decode,outbox"},
             {"transforms.decode.type", "DecodeLogicalDecodingMessageContent"},
             {"transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter"}});
  const LogicalMessage message = Message("[\"not\", \"an object\"]");
  Record record = MakeMessageRecord(message, kXid, kCommitMs, kContext, 0);
  auto outcome = chain.Apply(record);
  REQUIRE_FALSE(outcome.ok());
  CHECK(outcome.status().message().find("decode") != std::string::npos);
  CHECK(outcome.status().message().find("prefix 'outbox'") != std::string::npos);

  // A message whose content lacks the event id fails in the router, which names the message.
  const LogicalMessage no_id =
      Message(R"({"aggregatetype": "Order", "aggregateid": "1", "payload": "x"})");
  Record second = MakeMessageRecord(no_id, kXid, kCommitMs, kContext, 0);
  auto routed = chain.Apply(second);
  REQUIRE_FALSE(routed.ok());
  CHECK(routed.status().message().find("event id column 'id'") != std::string::npos);
  CHECK(routed.status().message().find("logical decoding message with prefix 'outbox'") !=
        std::string::npos);
}

}  // namespace walrelay
