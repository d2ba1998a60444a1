// The source record and Debezium change event built from a RowChange.
#include "transform/change_event_source.h"

#include <doctest/doctest.h>
#include <rapidjson/document.h>

#include <string>

namespace walrelay {
namespace {

const SourceContext kContext{"walrelay", "shop", "orders-connector", {}};
constexpr int64_t kCommitMs = 1700000000123;

Column Col(std::string name, std::string type, ValueKind kind, std::string text) {
  return Column{std::move(name), std::move(type), kind, std::move(text)};
}

RowChange OrderRow(ChangeOp op = ChangeOp::kInsert) {
  RowChange row;
  row.op = op;
  row.lsn = Lsn((uint64_t{0x16} << 32) | 0xB374D848);
  row.xid = 771;
  row.schema = "public";
  row.table = "orders";
  row.commit_time_ms = kCommitMs;
  row.commit_time_us = kCommitMs * 1000 + 456;
  row.primary_key = {"id"};
  row.columns = {
      Col("id", "uuid", ValueKind::kString, "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70"),
      Col("qty", "integer", ValueKind::kNumber, "3"),
      Col("big", "bigint", ValueKind::kNumber, "9007199254740993"),
      Col("price", "numeric", ValueKind::kNumber, "1.50"),
      Col("paid", "boolean", ValueKind::kBool, "true"),
      Col("ratio", "real", ValueKind::kNull, ""),  // NaN, as wal2json renders it
      Col("note", "text", ValueKind::kString, "say \"hi\"\n\xc3\xa9"),
      Col("doc", "jsonb", ValueKind::kString, R"({"a": 1})"),
      Col("blob", "bytea", ValueKind::kString, "0102ff"),
      Col("gone", "text", ValueKind::kNull, ""),
      Col("at", "timestamp without time zone", ValueKind::kString, "2024-01-02 03:04:05.678"),
  };
  return row;
}

rapidjson::Document Parse(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(text.c_str(), text.size());
  REQUIRE_MESSAGE(!doc.HasParseError(), text);
  return doc;
}

TEST_CASE("source record: topic, key, timestamp, source info and change pointer") {
  const RowChange row = OrderRow();
  const Record r = MakeSourceRecord(row, kContext);
  CHECK(r.topic == "walrelay.public.orders");
  CHECK(r.key == std::optional<std::string>(R"({"id":"8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70"})"));
  CHECK_FALSE(r.value.has_value());
  CHECK(r.headers.empty());
  CHECK(r.partition == kAnyPartition);
  CHECK(r.timestamp_ms == kCommitMs);
  CHECK(r.source.lsn == row.lsn);
  CHECK(r.source.table == "public.orders");
  CHECK(r.source.commit_time_ms == kCommitMs);
  CHECK(r.source.op == ChangeOp::kInsert);
  CHECK(r.source.xid == 771u);
  CHECK(r.change == &row);
}

TEST_CASE("source record: composite and typed keys in primary-key order") {
  RowChange row = OrderRow();
  row.primary_key = {"qty", "id"};
  CHECK(MakeSourceRecord(row, kContext).key ==
        std::optional<std::string>(R"({"qty":3,"id":"8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70"})"));
}

TEST_CASE("source record: deletes are keyed from the identity image") {
  RowChange row = OrderRow(ChangeOp::kDelete);
  row.identity = {Col("id", "uuid", ValueKind::kString, "old-id")};
  row.columns.clear();
  const Record r = MakeSourceRecord(row, kContext);
  CHECK(r.key == std::optional<std::string>(R"({"id":"old-id"})"));
  CHECK(r.source.op == ChangeOp::kDelete);
}

TEST_CASE("source record: no primary key, or an image without it, gives a null key") {
  RowChange row = OrderRow();
  row.primary_key.clear();
  CHECK_FALSE(MakeSourceRecord(row, kContext).key.has_value());
  row.primary_key = {"id", "missing"};
  CHECK_FALSE(MakeSourceRecord(row, kContext).key.has_value());
  RowChange truncate = OrderRow(ChangeOp::kTruncate);
  truncate.columns.clear();
  CHECK_FALSE(MakeSourceRecord(truncate, kContext).key.has_value());
}

TEST_CASE("change event: insert envelope with typed column values") {
  const RowChange row = OrderRow();
  const std::string json = SerializeChangeEvent(row, kContext, 1700000009999);
  const rapidjson::Document doc = Parse(json);

  CHECK(doc["before"].IsNull());
  const auto& after = doc["after"];
  REQUIRE(after.IsObject());
  CHECK(std::string(after["id"].GetString()) == "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70");
  CHECK(after["qty"].IsInt());
  CHECK(after["qty"].GetInt() == 3);
  CHECK(after["big"].GetUint64() == 9007199254740993ull);
  CHECK(after["price"].IsNumber());
  CHECK(after["paid"].IsBool());
  CHECK(after["paid"].GetBool());
  CHECK(after["ratio"].IsNull());
  CHECK(std::string(after["note"].GetString()) == "say \"hi\"\n\xc3\xa9");
  CHECK(std::string(after["doc"].GetString()) == R"({"a": 1})");
  CHECK(std::string(after["blob"].GetString()) == "AQL/");
  CHECK(after["gone"].IsNull());
  CHECK(std::string(after["at"].GetString()) == "2024-01-02 03:04:05.678");
  // Exact digits on the wire, never rounded through a double.
  CHECK(json.find(R"("big":9007199254740993,)") != std::string::npos);
  CHECK(json.find(R"("price":1.50,)") != std::string::npos);

  const auto& source = doc["source"];
  CHECK(std::string(source["version"].GetString()) == WALRELAY_VERSION);
  CHECK(std::string(source["connector"].GetString()) == "postgresql");
  CHECK(std::string(source["name"].GetString()) == "walrelay");
  CHECK(source["ts_ms"].GetInt64() == kCommitMs);
  CHECK(std::string(source["snapshot"].GetString()) == "false");
  CHECK(std::string(source["db"].GetString()) == "shop");
  CHECK(std::string(source["schema"].GetString()) == "public");
  CHECK(std::string(source["table"].GetString()) == "orders");
  CHECK(source["txId"].GetUint() == 771u);
  CHECK(source["lsn"].GetUint64() == row.lsn.value());
  // Debezium's other source members: no commit seen before this change on the stream.
  CHECK(std::string(source["sequence"].GetString()) ==
        "[null,\"" + std::to_string(row.lsn.value()) + "\"]");
  CHECK(source["ts_us"].GetInt64() == kCommitMs * 1000 + 456);
  CHECK(source["ts_ns"].GetInt64() == (kCommitMs * 1000 + 456) * 1000);
  CHECK(source["xmin"].IsNull());
  // Debezium 3.6's replication origin: none for a transaction written on this server.
  CHECK(source["origin"].IsNull());
  CHECK(source["origin_lsn"].IsNull());
  CHECK(json.find(R"("db":"shop","sequence":)") != std::string::npos);
  CHECK(json.find(R"("lsn":)" + std::to_string(row.lsn.value()) +
                  R"(,"xmin":null,"origin":null,"origin_lsn":null})") != std::string::npos);
  CHECK(doc["transaction"].IsNull());

  CHECK(std::string(doc["op"].GetString()) == "c");
  CHECK(doc["ts_ms"].GetInt64() == 1700000009999);
  CHECK(doc["ts_us"].GetInt64() == 1700000009999000);
  CHECK(doc["ts_ns"].GetInt64() == 1700000009999000000);
  CHECK(json.find(R"("transaction":null,"op":"c","ts_ms":1700000009999,"ts_us":)") !=
        std::string::npos);
  // Member order as Debezium writes it.
  CHECK(json.rfind(R"({"before":null,"after":{"id":)", 0) == 0);
}

TEST_CASE("change event: update, delete and truncate images") {
  SUBCASE("update without an identity image has a null before") {
    const RowChange row = OrderRow(ChangeOp::kUpdate);
    const rapidjson::Document doc = Parse(SerializeChangeEvent(row, kContext, 1));
    CHECK(doc["before"].IsNull());
    CHECK(doc["after"].IsObject());
    CHECK(std::string(doc["op"].GetString()) == "u");
  }
  SUBCASE("update with the key only as identity (no old tuple) has a null before") {
    RowChange row = OrderRow(ChangeOp::kUpdate);
    row.identity = {Col("id", "uuid", ValueKind::kString, "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70")};
    const rapidjson::Document doc = Parse(SerializeChangeEvent(row, kContext, 1));
    CHECK(doc["before"].IsNull());
  }
  SUBCASE("update with an old tuple: before is the decoder's before image") {
    RowChange row = OrderRow(ChangeOp::kUpdate);
    row.identity = {Col("id", "uuid", ValueKind::kString, "old-id")};
    row.before = {Col("id", "uuid", ValueKind::kString, "old-id"),
                  Col("qty", "integer", ValueKind::kNull, "")};
    const rapidjson::Document doc = Parse(SerializeChangeEvent(row, kContext, 1));
    CHECK(std::string(doc["before"]["id"].GetString()) == "old-id");
    CHECK(doc["before"]["qty"].IsNull());
    CHECK(doc["after"]["qty"].GetInt() == 3);
  }
  SUBCASE("delete: before is every column, null beyond the old tuple") {
    RowChange row = OrderRow(ChangeOp::kDelete);
    row.identity = {Col("id", "uuid", ValueKind::kString, "old-id")};
    row.before = {Col("id", "uuid", ValueKind::kString, "old-id"),
                  Col("qty", "integer", ValueKind::kNull, ""),
                  Col("note", "text", ValueKind::kNull, "")};
    row.columns.clear();
    const std::string json = SerializeChangeEvent(row, kContext, 1);
    CHECK(json.rfind(R"({"before":{"id":"old-id","qty":null,"note":null},"after":null,)", 0) == 0);
    const rapidjson::Document doc = Parse(json);
    CHECK(std::string(doc["op"].GetString()) == "d");
  }
  SUBCASE("the tombstone after a delete keeps the delete's key and topic") {
    RowChange row = OrderRow(ChangeOp::kDelete);
    row.identity = {Col("id", "uuid", ValueKind::kString, "old-id")};
    row.columns.clear();
    const Record tombstone = MakeTombstoneRecord(row, kContext);
    CHECK(tombstone.source.tombstone);
    CHECK(tombstone.change == &row);
    CHECK(!tombstone.value.has_value());
    CHECK(tombstone.key == MakeSourceRecord(row, kContext).key);
    CHECK(tombstone.topic == "walrelay.public.orders");
  }
  SUBCASE("truncate has neither image") {
    RowChange row = OrderRow(ChangeOp::kTruncate);
    row.columns.clear();
    const rapidjson::Document doc = Parse(SerializeChangeEvent(row, kContext, 1));
    CHECK(doc["before"].IsNull());
    CHECK(doc["after"].IsNull());
    CHECK(std::string(doc["op"].GetString()) == "t");
  }
}

TEST_CASE("column rendering shared with the router's envelope") {
  CHECK(RenderColumnJson(Col("n", "numeric", ValueKind::kNumber, "-12.5e3")) == "-12.5e3");
  CHECK(RenderColumnJson(Col("n", "integer", ValueKind::kNumber, "0")) == "0");
  // Not valid JSON number text: written as a string rather than as broken JSON.
  CHECK(RenderColumnJson(Col("n", "money", ValueKind::kNumber, "$1.00")) == R"("$1.00")");
  CHECK(RenderColumnJson(Col("n", "numeric", ValueKind::kNumber, "01")) == R"("01")");
  CHECK(RenderColumnJson(Col("b", "boolean", ValueKind::kBool, "false")) == "false");
  CHECK(RenderColumnJson(Col("x", "text", ValueKind::kNull, "")) == "null");
  CHECK(RenderColumnJson(Col("t", "text", ValueKind::kString, "a\"b\\c\t")) == R"("a\"b\\c\t")");
  CHECK(RenderColumnJson(Col("b", "bytea", ValueKind::kString, "")) == R"("")");
  CHECK(RenderColumnJson(Col("b", "bytea", ValueKind::kString, "ff")) == R"("/w==")");
  CHECK(RenderColumnJson(Col("b", "bytea", ValueKind::kString, "fffe")) == R"("//4=")");
  CHECK(RenderColumnJson(Col("b", "bytea", ValueKind::kString, "zz")) == R"("zz")");
}

TEST_CASE("bytea decoding and column bytes") {
  CHECK(DecodeByteaHex("0102ff") == std::optional<std::string>("\x01\x02\xff"));
  CHECK(DecodeByteaHex("\\xABcd") == std::optional<std::string>("\xab\xcd"));
  CHECK(DecodeByteaHex("") == std::optional<std::string>(""));
  CHECK_FALSE(DecodeByteaHex("abc").has_value());
  CHECK_FALSE(DecodeByteaHex("0g").has_value());

  auto text = ColumnBytes(Col("t", "text", ValueKind::kString, "hello"));
  REQUIRE(text.ok());
  CHECK(text.value() == std::optional<std::string>("hello"));
  auto number = ColumnBytes(Col("n", "bigint", ValueKind::kNumber, "42"));
  REQUIRE(number.ok());
  CHECK(number.value() == std::optional<std::string>("42"));
  auto null = ColumnBytes(Col("n", "text", ValueKind::kNull, ""));
  REQUIRE(null.ok());
  CHECK_FALSE(null.value().has_value());
  auto bytes = ColumnBytes(Col("b", "bytea", ValueKind::kString, "00ff"));
  REQUIRE(bytes.ok());
  CHECK(bytes.value() == std::optional<std::string>(std::string("\x00\xff", 2)));
  auto bad = ColumnBytes(Col("b", "bytea", ValueKind::kString, "xyz"));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("'b'") != std::string::npos);
}

}  // namespace
}  // namespace walrelay
