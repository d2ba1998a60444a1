// The column model: each expected value and schema below is what Debezium 3.2.3 (pgoutput,
// JsonConverter) wrote for the same PostgreSQL 15 value.
#include "transform/connect_column.h"

#include <doctest/doctest.h>

#include <map>
#include <string>

namespace walrelay {
namespace {

Column Col(std::string type, std::string text, ValueKind kind = ValueKind::kString) {
  Column c;
  c.name = "c";
  c.type = std::move(type);
  c.kind = kind;
  c.text = std::move(text);
  return c;
}

std::string Json(const Column& column, const ColumnModes& modes) {
  rapidjson::StringBuffer buffer;
  JsonWriter writer(buffer);
  WriteColumnJson(column, modes, writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

const ColumnModes kNative{};
const ColumnModes kDefaults{DecimalMode::kPrecise, TimeMode::kAdaptive, BinaryMode::kBytes};
const ColumnModes kDouble{DecimalMode::kDouble, TimeMode::kAdaptiveTimeMicroseconds,
                          BinaryMode::kBase64};
const ColumnModes kString{DecimalMode::kString, TimeMode::kConnect, BinaryMode::kBase64UrlSafe};
const ColumnModes kIso{DecimalMode::kPrecise, TimeMode::kIsoString, BinaryMode::kHex};

TEST_CASE("native modes keep walrelay's rendering of every type") {
  CHECK(Json(Col("numeric", "1.50", ValueKind::kNumber), kNative) == "1.50");
  CHECK(Json(Col("real", "1e+10", ValueKind::kNumber), kNative) == "1e+10");
  CHECK(Json(Col("bytea", "00ff10"), kNative) == "\"AP8Q\"");
  CHECK(Json(Col("timestamp without time zone", "2024-02-29 12:34:56.789"), kNative) ==
        "\"2024-02-29 12:34:56.789\"");
  CHECK(Json(Col("date", "2024-02-29"), kNative) == "\"2024-02-29\"");
  CHECK(Json(Col("integer[]", "{1,2}"), kNative) == "\"{1,2}\"");
  auto v = ColumnConnectValue(Col("bytea", "00ff10"), kNative);
  REQUIRE(v.ok());
  CHECK(*v->bytes == std::string("\x00\xff\x10", 3));
}

TEST_CASE("numeric under decimal.handling.mode") {
  const Column n = Col("numeric(10,2)", "12345.67", ValueKind::kNumber);
  CHECK(Json(n, kDefaults) == "\"EtaH\"");
  CHECK(Json(Col("numeric(10,2)", "-0.05", ValueKind::kNumber), kDefaults) == "\"+w==\"");
  CHECK(Json(Col("numeric(10,2)", "99999999.99", ValueKind::kNumber), kDefaults) == "\"AlQL4/8=\"");
  CHECK(Json(Col("numeric(10,2)", "0.00", ValueKind::kNumber), kDefaults) == "\"AA==\"");
  CHECK(Json(Col("numeric(8,3)", "-12.345", ValueKind::kNumber), kDefaults) == "\"z8c=\"");
  CHECK(ColumnSchemaJson(n, kDefaults) ==
        R"({"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal",)"
        R"("version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"}})");
  CHECK(ColumnSchemaJson(Col("numeric(5)", "1"), kDefaults) ==
        R"({"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal",)"
        R"("version":1,"parameters":{"scale":"0","connect.decimal.precision":"5"}})");
  CHECK(Json(n, kDouble) == "12345.67");
  CHECK(Json(Col("numeric(10,2)", "99999999.99", ValueKind::kNumber), kDouble) == "9.999999999E7");
  CHECK(Json(Col("numeric(10,2)", "0.00", ValueKind::kNumber), kDouble) == "0.0");
  CHECK(ColumnSchemaJson(n, kDouble) == R"({"type":"double","optional":true})");
  CHECK(Json(n, kString) == "\"12345.67\"");
  CHECK(Json(Col("numeric(10,2)", "0.00", ValueKind::kNumber), kString) == "\"0.00\"");
  CHECK(ColumnSchemaJson(n, kString) == R"({"type":"string","optional":true})");
}

TEST_CASE("unconstrained numeric: VariableScaleDecimal without trailing zeros, NaN") {
  const ColumnModes& m = kDefaults;
  CHECK(Json(Col("numeric", "123.4500", ValueKind::kNumber), m) == R"({"scale":2,"value":"MDk="})");
  CHECK(Json(Col("numeric", "-0.0000000001", ValueKind::kNumber), m) ==
        R"({"scale":10,"value":"/w=="})");
  CHECK(Json(Col("numeric", "100", ValueKind::kNumber), m) == R"({"scale":0,"value":"ZA=="})");
  CHECK(Json(Col("numeric", "12345678901234567890.123456789", ValueKind::kNumber), m) ==
        R"({"scale":9,"value":"J+QbMka+ybFuOYEV"})");
  CHECK(Json(Col("numeric", "NaN"), m) == "null");
  CHECK(
      ColumnSchemaJson(Col("numeric", "1"), m) ==
      R"({"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},)"
      R"({"type":"bytes","optional":false,"field":"value"}],"optional":true,)"
      R"("name":"io.debezium.data.VariableScaleDecimal","version":1,"doc":"Variable scaled decimal"})");
  CHECK(Json(Col("numeric", "NaN"), kDouble) == "\"NaN\"");
  CHECK(Json(Col("numeric", "12345678901234567890.123456789", ValueKind::kNumber), kDouble) ==
        "1.2345678901234567E19");
  CHECK(Json(Col("numeric", "-0.000001", ValueKind::kNumber), kDouble) == "-1.0E-6");
  CHECK(Json(Col("numeric", "100", ValueKind::kNumber), kDouble) == "100.0");
  CHECK(Json(Col("numeric", "NaN"), kString) == "\"NAN\"");
  CHECK(Json(Col("numeric", "123.4500", ValueKind::kNumber), kString) == "\"123.4500\"");
}

TEST_CASE("real and double as Java prints them, NaN and infinities quoted") {
  CHECK(Json(Col("real", "1.5", ValueKind::kNumber), kDefaults) == "1.5");
  CHECK(Json(Col("real", "3.4e+38", ValueKind::kNumber), kDefaults) == "3.4E38");
  CHECK(Json(Col("real", "1e-05", ValueKind::kNumber), kDefaults) == "1.0E-5");
  CHECK(Json(Col("real", "1e+10", ValueKind::kNumber), kDefaults) == "1.0E10");
  CHECK(Json(Col("real", "NaN"), kDefaults) == "\"NaN\"");
  CHECK(Json(Col("real", "Infinity"), kDefaults) == "\"Infinity\"");
  CHECK(Json(Col("double precision", "-Infinity"), kDefaults) == "\"-Infinity\"");
  CHECK(Json(Col("double precision", "1e+300", ValueKind::kNumber), kDefaults) == "1.0E300");
  CHECK(Json(Col("double precision", "0.1", ValueKind::kNumber), kDefaults) == "0.1");
  CHECK(Json(Col("double precision", "1234567", ValueKind::kNumber), kDefaults) == "1234567.0");
  CHECK(Json(Col("double precision", "12345678.9", ValueKind::kNumber), kDefaults) ==
        "1.23456789E7");
  CHECK(Json(Col("double precision", "1e-07", ValueKind::kNumber), kDefaults) == "1.0E-7");
  CHECK(ColumnSchemaJson(Col("real", "1"), kDefaults) == R"({"type":"float","optional":true})");
  CHECK(ColumnSchemaJson(Col("double precision", "1"), kDefaults) ==
        R"({"type":"double","optional":true})");
}

TEST_CASE("a NaN or infinity the decoder marked NULL (as wal2json does) is Debezium's value") {
  CHECK(Json(Col("real", "NaN", ValueKind::kNull), kNative) == "null");
  CHECK(Json(Col("real", "NaN", ValueKind::kNull), kDefaults) == "\"NaN\"");
  CHECK(Json(Col("double precision", "-Infinity", ValueKind::kNull), kDefaults) == "\"-Infinity\"");
  CHECK(Json(Col("numeric", "NaN", ValueKind::kNull), kDefaults) == "null");
  CHECK(Json(Col("numeric", "NaN", ValueKind::kNull), kDouble) == "\"NaN\"");
  CHECK(Json(Col("numeric", "NaN", ValueKind::kNull), kString) == "\"NAN\"");
  CHECK(Json(Col("real", "", ValueKind::kNull), kDefaults) == "null");
  auto v = ColumnConnectValue(Col("double precision", "NaN", ValueKind::kNull), kDefaults);
  REQUIRE(v.ok());
  CHECK(*v->bytes == "NaN");
  auto native = ColumnConnectValue(Col("double precision", "NaN", ValueKind::kNull), kNative);
  REQUIRE(native.ok());
  CHECK(!native->bytes.has_value());
}

TEST_CASE("bytea under binary.handling.mode") {
  CHECK(Json(Col("bytea", "00ff10"), kDefaults) == "\"AP8Q\"");
  CHECK(Json(Col("bytea", ""), kDefaults) == "\"\"");
  CHECK(Json(Col("bytea", "fbff"), kDouble) == "\"+/8=\"");
  CHECK(Json(Col("bytea", "fbff"), kString) == "\"-_8=\"");
  CHECK(Json(Col("bytea", "00ff10"), kIso) == "\"00ff10\"");
  CHECK(ColumnSchemaJson(Col("bytea", ""), kDefaults) == R"({"type":"bytes","optional":true})");
  CHECK(ColumnSchemaJson(Col("bytea", ""), kIso) == R"({"type":"string","optional":true})");
  auto v = ColumnConnectValue(Col("bytea", "fbff"), kString);
  REQUIRE(v.ok());
  CHECK(v->shape.type == ConnectType::kString);
  CHECK(*v->bytes == "-_8=");
}

TEST_CASE("date, time and timestamp under time.precision.mode") {
  const Column date = Col("date", "2024-02-29");
  CHECK(Json(date, kDefaults) == "19782");
  CHECK(Json(Col("date", "1960-01-01"), kDefaults) == "-3653");
  CHECK(Json(Col("date", "0001-01-01"), kDefaults) == "-719162");
  CHECK(Json(Col("date", "infinity"), kDefaults) == "-2147472692");
  CHECK(Json(date, kString) == "19782");
  CHECK(Json(date, kIso) == "\"2024-02-29Z\"");
  CHECK(Json(Col("date", "0001-01-01"), kIso) == "\"0001-01-01Z\"");
  CHECK(Json(Col("date", "infinity"), kIso) == "\"-5877611-06-21Z\"");
  CHECK(ColumnSchemaJson(date, kDefaults) ==
        R"({"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1})");
  CHECK(
      ColumnSchemaJson(date, kString) ==
      R"({"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1})");
  CHECK(ColumnSchemaJson(date, kIso) ==
        R"({"type":"string","optional":true,"name":"io.debezium.time.IsoDate","version":1})");

  const Column time = Col("time without time zone", "12:34:56.789012");
  const Column time3 = Col("time(3) without time zone", "01:02:03.4");
  CHECK(Json(time, kDefaults) == "45296789012");
  CHECK(Json(time3, kDefaults) == "3723400");
  CHECK(Json(time3, kDouble) == "3723400000");
  CHECK(Json(time, kString) == "45296789");
  CHECK(Json(time, kIso) == "\"12:34:56.789012Z\"");
  CHECK(Json(time3, kIso) == "\"01:02:03.4Z\"");
  CHECK(Json(Col("time without time zone", "00:00:00"), kIso) == "\"00:00:00Z\"");
  // PostgreSQL's 24:00:00 is Java's LocalTime midnight: Debezium prints 00:00:00Z.
  CHECK(Json(Col("time without time zone", "24:00:00"), kIso) == "\"00:00:00Z\"");
  CHECK(ColumnSchemaJson(time, kDefaults) ==
        R"({"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1})");
  CHECK(ColumnSchemaJson(time3, kDefaults) ==
        R"({"type":"int32","optional":true,"name":"io.debezium.time.Time","version":1})");
  CHECK(ColumnSchemaJson(time3, kDouble) ==
        R"({"type":"int64","optional":true,"name":"io.debezium.time.MicroTime","version":1})");
  CHECK(
      ColumnSchemaJson(time, kString) ==
      R"({"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1})");

  const Column ts = Col("timestamp without time zone", "2024-02-29 12:34:56.789");
  CHECK(Json(ts, kDefaults) == "1709210096789000");
  CHECK(Json(Col("timestamp without time zone", "1969-12-31 23:59:59.999999"), kDefaults) == "-1");
  CHECK(Json(Col("timestamp without time zone", "1969-12-31 23:59:59.999999"), kString) == "-1");
  CHECK(Json(Col("timestamp(0) without time zone", "2024-02-29 12:34:57"), kDefaults) ==
        "1709210097000");
  CHECK(Json(Col("timestamp(3) without time zone", "2024-02-29 12:34:56.789"), kDefaults) ==
        "1709210096789");
  CHECK(Json(ts, kString) == "1709210096789");
  CHECK(Json(ts, kIso) == "\"2024-02-29T12:34:56.789Z\"");
  CHECK(Json(Col("timestamp without time zone", "2024-01-01 00:00:00"), kIso) ==
        "\"2024-01-01T00:00:00Z\"");
  CHECK(Json(Col("timestamp without time zone", "2024-01-01 00:00:00.000001"), kIso) ==
        "\"2024-01-01T00:00:00.000001Z\"");
  CHECK(ColumnSchemaJson(ts, kDefaults) ==
        R"({"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1})");
  CHECK(ColumnSchemaJson(Col("timestamp(3) without time zone", ""), kDefaults) ==
        R"({"type":"int64","optional":true,"name":"io.debezium.time.Timestamp","version":1})");
  CHECK(
      ColumnSchemaJson(ts, kString) ==
      R"({"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1})");
  CHECK(ColumnSchemaJson(ts, kIso) ==
        R"({"type":"string","optional":true,"name":"io.debezium.time.IsoTimestamp","version":1})");
}

TEST_CASE("timestamptz, timetz and interval in every time mode") {
  for (const ColumnModes& m : {kDefaults, kDouble, kString, kIso}) {
    CHECK(Json(Col("timestamp with time zone", "2024-02-29 12:34:56.789+02"), m) ==
          "\"2024-02-29T10:34:56.789000Z\"");
    CHECK(Json(Col("timestamp with time zone", "2024-06-01 10:00:00.5-07:30"), m) ==
          "\"2024-06-01T17:30:00.500000Z\"");
    CHECK(Json(Col("timestamp with time zone", "1900-01-01 00:00:00+00"), m) ==
          "\"1900-01-01T00:00:00.000000Z\"");
    CHECK(Json(Col("timestamp with time zone", "infinity"), m) == "\"infinity\"");
    CHECK(Json(Col("timestamp(3) with time zone", "1970-01-01 00:00:00+00"), m) ==
          "\"1970-01-01T00:00:00.000Z\"");
    CHECK(Json(Col("time with time zone", "12:34:56.5+05:30"), m) == "\"07:04:56.5Z\"");
    CHECK(Json(Col("time with time zone", "00:00:00-08"), m) == "\"08:00:00Z\"");
    CHECK(Json(Col("interval", "1 year 2 mons 3 days 04:05:06.789"), m) == "37091106789000");
    CHECK(Json(Col("interval", "-1 days -00:00:01"), m) == "-86401000000");
    // Beyond 64-bit microseconds (PostgreSQL's intervals go further): saturated, as Java's cast
    // of Debezium's double sum to long saturates.
    CHECK(Json(Col("interval", "178000000 years"), m) == "9223372036854775807");
    CHECK(Json(Col("interval", "-178000000 years"), m) == "-9223372036854775808");
    CHECK(Json(Col("interval", "2562048 days 2562047788:00:54.775807"), m) ==
          "9223372036854775807");
    // A large part cancelled by another stays exact.
    CHECK(Json(Col("interval", "178000000 years -178000000 years 00:00:01"), m) == "1000000");
    CHECK(
        ColumnSchemaJson(Col("timestamp with time zone", ""), m) ==
        R"({"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1})");
    CHECK(ColumnSchemaJson(Col("time with time zone", ""), m) ==
          R"({"type":"string","optional":true,"name":"io.debezium.time.ZonedTime","version":1})");
    CHECK(
        ColumnSchemaJson(Col("interval", ""), m) ==
        R"({"type":"int64","optional":true,"name":"io.debezium.time.MicroDuration","version":1})");
  }
}

TEST_CASE("types no mode governs: schemas, optional, arrays") {
  CHECK(ColumnSchemaJson(Col("uuid", ""), kDefaults) ==
        R"({"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1})");
  CHECK(ColumnSchemaJson(Col("jsonb", ""), kDefaults) ==
        R"({"type":"string","optional":true,"name":"io.debezium.data.Json","version":1})");
  CHECK(ColumnSchemaJson(Col("character varying(20)", ""), kDefaults) ==
        R"({"type":"string","optional":true})");
  CHECK(ColumnSchemaJson(Col("smallint", ""), kDefaults) == R"({"type":"int16","optional":true})");
  CHECK(ColumnSchemaJson(Col("boolean", ""), kDefaults) == R"({"type":"boolean","optional":true})");
  Column id = Col("integer", "1", ValueKind::kNumber);
  id.optional = false;
  CHECK(ColumnSchemaJson(id, kDefaults) == R"({"type":"int32","optional":false})");
  CHECK(Json(Col("bigint", "9007199254740993", ValueKind::kNumber), kDefaults) ==
        "9007199254740993");
  CHECK(Json(Col("character(3)", "ab "), kDefaults) == "\"ab \"");
  CHECK(Json(Col("jsonb", R"({"b": null})"), kDefaults) == R"("{\"b\": null}")");

  CHECK(Json(Col("integer[]", "{1,2,NULL}"), kDefaults) == "[1,2,null]");
  CHECK(Json(Col("text[]", R"({a,"b c"})"), kDefaults) == R"(["a","b c"])");
  CHECK(Json(Col("text[]", "{}"), kDefaults) == "[]");
  // Multi-dimensional: Debezium's items are scalars, so it writes one null per sub-array.
  CHECK(Json(Col("integer[]", "{{1,2},{3,4},{5,6}}"), kDefaults) == "[null,null,null]");
  CHECK(Json(Col("text[]", R"({{"a}","{b"},{c,d}})"), kString) == "[null,null]");
  // numeric[] with NaN or an infinity: Debezium's Decimal cannot hold it, and the whole
  // column is null under decimal.handling.mode=precise; double and string hold them.
  CHECK(Json(Col("numeric[]", "{1.5,NaN}"), kDefaults) == "null");
  CHECK(Json(Col("numeric[]", "{Infinity}"), kDefaults) == "null");
  CHECK(Json(Col("numeric[]", "{1.5,NULL}"), kDefaults).find("null]") != std::string::npos);
  CHECK(Json(Col("numeric[]", "{1.5,NaN}"), kString) == R"(["1.5","NAN"])");
  CHECK(ColumnSchemaJson(Col("integer[]", ""), kDefaults) ==
        R"({"type":"array","items":{"type":"int32","optional":true},"optional":true})");
  CHECK(ColumnSchemaJson(Col("text[]", ""), kDefaults) ==
        R"({"type":"array","items":{"type":"string","optional":true},"optional":true})");
  CHECK(Json(Col("integer", "", ValueKind::kNull), kDefaults) == "null");
}

TEST_CASE("ColumnConnectValue gives the Connect type and the value's bytes") {
  auto ts =
      ColumnConnectValue(Col("timestamp without time zone", "2024-02-29 12:34:56.789"), kDefaults);
  REQUIRE(ts.ok());
  CHECK(ts->shape.type == ConnectType::kInt64);
  CHECK(*ts->bytes == "1709210096789000");
  auto n = ColumnConnectValue(Col("numeric(10,2)", "12345.67", ValueKind::kNumber), kDefaults);
  REQUIRE(n.ok());
  CHECK(n->shape.type == ConnectType::kBytes);
  CHECK(*n->bytes == "\x12\xd6\x87");
  auto null = ColumnConnectValue(Col("date", "", ValueKind::kNull), kDefaults);
  REQUIRE(null.ok());
  CHECK(!null->bytes.has_value());
  auto bad = ColumnConnectValue(Col("date", "not a date"), kDefaults);
  CHECK(!bad.ok());
  CHECK(bad.status().message().find("column 'c'") != std::string::npos);
}

TEST_CASE("ReadColumnModes: absent is native unless schemas are written; unknown is refused") {
  auto none = ReadColumnModes(Properties(std::map<std::string, std::string>{}), false);
  REQUIRE(none.ok());
  CHECK(none->decimal == DecimalMode::kNative);
  CHECK(none->time == TimeMode::kNative);
  CHECK(none->binary == BinaryMode::kNative);
  auto schemas = ReadColumnModes(Properties(std::map<std::string, std::string>{}), true);
  REQUIRE(schemas.ok());
  CHECK(schemas->decimal == DecimalMode::kPrecise);
  CHECK(schemas->time == TimeMode::kAdaptive);
  CHECK(schemas->binary == BinaryMode::kBytes);
  auto named = ReadColumnModes(
      Properties(std::map<std::string, std::string>{{"decimal.handling.mode", "STRING"},
                                                    {"time.precision.mode", "isostring"},
                                                    {"binary.handling.mode", "base64-url-safe"}}),
      false);
  REQUIRE(named.ok());
  CHECK(named->decimal == DecimalMode::kString);
  CHECK(named->time == TimeMode::kIsoString);
  CHECK(named->binary == BinaryMode::kBase64UrlSafe);
  auto bad = ReadColumnModes(
      Properties(std::map<std::string, std::string>{{"time.precision.mode", "nanoseconds"}}),
      false);
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("time.precision.mode") != std::string::npos);
}

}  // namespace
}  // namespace walrelay

namespace walrelay {
namespace {

// What Debezium wrote (3.2.3; the source block as 3.6.1 has it, with origin and origin_lsn)
// (JsonConverter, schemas.enable=true, default handling modes, topic
// prefix itest) for public.typed (id integer PRIMARY KEY, b bigint, s smallint, n
// numeric(10,2), nn numeric, r real, d double precision, flag boolean, t text, vc varchar(20),
// ch char(3), bin bytea, j json, jb jsonb, u uuid, ts timestamp, tstz timestamptz, dt date).
constexpr char kDebeziumEnvelopeSchema[] =
    R"({"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"int64","optional":true,"field":"b"},{"type":"int16","optional":true,"field":"s"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"n"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],"optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"doc":"Variable scaled decimal","field":"nn"},{"type":"float","optional":true,"field":"r"},{"type":"double","optional":true,"field":"d"},{"type":"boolean","optional":true,"field":"flag"},{"type":"string","optional":true,"field":"t"},{"type":"string","optional":true,"field":"vc"},{"type":"string","optional":true,"field":"ch"},{"type":"bytes","optional":true,"field":"bin"},{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"j"},{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"jb"},{"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1,"field":"u"},{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"ts"},{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"tstz"},{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"dt"}],"optional":true,"name":"itest.public.typed.Value","field":"before"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"int64","optional":true,"field":"b"},{"type":"int16","optional":true,"field":"s"},{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"n"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}],"optional":true,"name":"io.debezium.data.VariableScaleDecimal","version":1,"doc":"Variable scaled decimal","field":"nn"},{"type":"float","optional":true,"field":"r"},{"type":"double","optional":true,"field":"d"},{"type":"boolean","optional":true,"field":"flag"},{"type":"string","optional":true,"field":"t"},{"type":"string","optional":true,"field":"vc"},{"type":"string","optional":true,"field":"ch"},{"type":"bytes","optional":true,"field":"bin"},{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"j"},{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"jb"},{"type":"string","optional":true,"name":"io.debezium.data.Uuid","version":1,"field":"u"},{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"ts"},{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","version":1,"field":"tstz"},{"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"dt"}],"optional":true,"name":"itest.public.typed.Value","field":"after"},{"type":"struct","fields":[{"type":"string","optional":false,"field":"version"},{"type":"string","optional":false,"field":"connector"},{"type":"string","optional":false,"field":"name"},{"type":"int64","optional":false,"field":"ts_ms"},{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},{"type":"string","optional":false,"field":"db"},{"type":"string","optional":true,"field":"sequence"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},{"type":"string","optional":false,"field":"schema"},{"type":"string","optional":false,"field":"table"},{"type":"int64","optional":true,"field":"txId"},{"type":"int64","optional":true,"field":"lsn"},{"type":"int64","optional":true,"field":"xmin"},{"type":"string","optional":true,"field":"origin"},{"type":"int64","optional":true,"field":"origin_lsn"}],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"},{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"},{"type":"int64","optional":false,"field":"total_order"},{"type":"int64","optional":false,"field":"data_collection_order"}],"optional":true,"name":"event.block","version":1,"field":"transaction"},{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"}],"optional":false,"name":"itest.public.typed.Envelope","version":2})";
constexpr char kDebeziumKeySchema[] =
    R"({"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"itest.public.typed.Key"})";

TEST_CASE("the change event's Connect schema is Debezium's, byte for byte") {
  RowChange row;
  row.op = ChangeOp::kInsert;
  row.schema = "public";
  row.table = "typed";
  row.primary_key = {"id"};
  const std::vector<std::pair<std::string, std::string>> columns = {
      {"id", "integer"},
      {"b", "bigint"},
      {"s", "smallint"},
      {"n", "numeric(10,2)"},
      {"nn", "numeric"},
      {"r", "real"},
      {"d", "double precision"},
      {"flag", "boolean"},
      {"t", "text"},
      {"vc", "character varying(20)"},
      {"ch", "character(3)"},
      {"bin", "bytea"},
      {"j", "json"},
      {"jb", "jsonb"},
      {"u", "uuid"},
      {"ts", "timestamp without time zone"},
      {"tstz", "timestamp with time zone"},
      {"dt", "date"}};
  for (const auto& [name, type] : columns) {
    Column c;
    c.name = name;
    c.type = type;
    c.kind = name == "id" ? ValueKind::kNumber : ValueKind::kNull;
    c.text = name == "id" ? "1" : "";
    c.optional = name != "id";
    row.columns.push_back(c);
  }
  SourceContext ctx{"itest", "postgres", "c", kDefaults};
  CHECK(ChangeEventSchemaJson(row, ctx) == kDebeziumEnvelopeSchema);
  CHECK(ChangeEventKeySchemaJson(row, ctx) == kDebeziumKeySchema);
  // A delete's columns come from its before image.
  RowChange deleted = row;
  deleted.op = ChangeOp::kDelete;
  deleted.before = row.columns;
  deleted.identity = {row.columns[0]};
  deleted.columns.clear();
  CHECK(ChangeEventSchemaJson(deleted, ctx) == kDebeziumEnvelopeSchema);
  CHECK(ChangeEventKeySchemaJson(deleted, ctx) == kDebeziumKeySchema);
  row.primary_key.clear();
  CHECK(ChangeEventKeySchemaJson(row, ctx).empty());
}

}  // namespace
}  // namespace walrelay
