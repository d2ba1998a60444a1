// The converters against the bytes Kafka Connect's classes write for the same Connect data
// (Kafka 3.9 JsonConverter with Jackson, StringConverter, ByteArrayConverter,
// SimpleHeaderConverter / Values.convertToString; Debezium's BinaryDataConverter).
#include <doctest/doctest.h>

#include "config/properties.h"
#include "convert/connect_converters.h"
#include "convert/converters.h"
#include "convert/java_text.h"

using namespace walrelay;

namespace {

using Keys = std::map<std::string, std::string>;

const ConnectShape kString{ConnectType::kString, R"({"type":"string","optional":false})"};
const ConnectShape kOptionalString{ConnectType::kString, R"({"type":"string","optional":true})"};
const ConnectShape kBytes{ConnectType::kBytes, R"({"type":"bytes","optional":true})"};
const ConnectShape kInt64{ConnectType::kInt64, R"({"type":"int64","optional":true})"};
const ConnectShape kDouble{ConnectType::kFloat64, R"({"type":"double","optional":true})"};
const ConnectShape kStruct{ConnectType::kStruct,
                           R"({"type":"struct","fields":[],"optional":false,"name":"x.Value"})"};
const ConnectShape kDecimal{
    ConnectType::kBytes,
    R"({"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"3","connect.decimal.precision":"12"}})"};
const ConnectShape kNoSchema{ConnectType::kString, ""};

std::unique_ptr<Converter> Make(const std::string& class_name,
                                std::map<std::string, std::string> keys = {}) {
  Properties props(std::move(keys));
  auto made = MakeConverter(class_name, "value.converter", props.Scoped("value.converter."));
  REQUIRE_MESSAGE(made.ok(), made.status().ToString());
  return std::move(made).value();
}

std::optional<std::string> Convert(const Converter& c, const ConnectShape& shape,
                                   const std::optional<std::string>& value) {
  auto out = c.FromConnectData("t", shape, value);
  REQUIRE_MESSAGE(out.ok(), out.status().ToString());
  return *out;
}

}  // namespace

TEST_CASE("Java's text for doubles, floats and decimals") {
  CHECK(*JavaDoubleText("1.5") == "1.5");
  CHECK(*JavaDoubleText("100") == "100.0");
  CHECK(*JavaDoubleText("1e10") == "1.0E10");
  CHECK(*JavaDoubleText("12345678") == "1.2345678E7");
  CHECK(*JavaDoubleText("0.0001") == "1.0E-4");
  CHECK(*JavaDoubleText("0.001") == "0.001");
  CHECK(*JavaDoubleText("-0") == "-0.0");
  CHECK(*JavaDoubleText("-Infinity") == "-Infinity");
  CHECK(*JavaFloatText("0.1") == "0.1");
  CHECK(*JacksonDoubleJson("NaN", false) == "\"NaN\"");
  CHECK(!JavaDoubleText("abc"));
  // 12345670 = 0xBC6146, -1 = 0xFF
  CHECK(JavaDecimalText(std::string("\x00\xbc\x61\x46", 4), 3) == "12345.670");
  CHECK(JavaDecimalText(std::string("\xff", 1), 3) == "-0.001");
  CHECK(JavaDecimalText(std::string("\x7b", 1), 9) == "1.23E-7");
  CHECK(JavaDecimalText(std::string("\x00", 1), 0) == "0");
  CHECK(JavaDecimalText(std::string("\x7b", 1), -2) == "1.23E+4");
}

TEST_CASE("Jackson escapes characters outside the BMP as surrogate pairs, upper-case hex") {
  CHECK(JacksonStringLiteral("h\xC3\xA9 \xF0\x9F\x98\x80 \"q\" \\ \n\x01") ==
        "\"h\xC3\xA9 \\uD83D\\uDE00 \\\"q\\\" \\\\ \\n\\u0001\"");
  CHECK(EscapeOutsideBmp("{\"m\":\"\xF0\x9F\x98\x80\"}") == "{\"m\":\"\\uD83D\\uDE00\"}");
}

TEST_CASE("JsonConverter: schemas on and off, nulls with and without a schema") {
  auto on = Make(kJsonConverterClass);
  auto off = Make(kJsonConverterClass, {{"value.converter.schemas.enable", "false"}});
  CHECK(on->WritesSchemas());
  CHECK_FALSE(off->WritesSchemas());
  CHECK(*Convert(*off, kString, "a\"b") == "\"a\\\"b\"");
  CHECK(*Convert(*on, kString, "x") ==
        R"({"schema":{"type":"string","optional":false},"payload":"x"})");
  CHECK(*Convert(*off, kBytes, std::string("\x00\xff\x10", 3)) == "\"AP8Q\"");
  CHECK(*Convert(*off, kInt64, "9007199254740993") == "9007199254740993");
  CHECK(*Convert(*off, kDouble, "1e20") == "1.0E20");
  CHECK(*Convert(*off, kStruct, "{\"a\":\"\xF0\x9F\x98\x80\"}") == "{\"a\":\"\\uD83D\\uDE00\"}");
  // A NULL with a schema is JSON null; without one (a tombstone) a Kafka null.
  CHECK(*Convert(*off, kOptionalString, std::nullopt) == "null");
  CHECK(*Convert(*on, kOptionalString, std::nullopt) ==
        R"({"schema":{"type":"string","optional":true},"payload":null})");
  CHECK(!Convert(*on, kNoSchema, std::nullopt));
  CHECK(!Convert(*off, kNoSchema, std::nullopt));
  CHECK(*Convert(*on, kNoSchema, "x") == R"({"schema":null,"payload":"x"})");
  // A required schema refuses null, as Connect does.
  CHECK_FALSE(on->FromConnectData("t", kString, std::nullopt).ok());
}

TEST_CASE("StringConverter: toString of the Connect value") {
  auto c = Make(kStringConverterClass);
  CHECK(*Convert(*c, kString, "ünï") == "ünï");
  CHECK(*Convert(*c, kDouble, "1e20") == "1.0E20");
  CHECK(*Convert(*c, kDecimal, std::string("\x00\xbc\x61\x46", 4)) == "12345.670");
  CHECK(*Convert(*c, kBytes, "abc") == "java.nio.HeapByteBuffer[pos=0 lim=3 cap=3]");
  CHECK(*Convert(*c, kStruct, R"({"payload":{"a":[1,"x"],"n":null},"type":"T"})") ==
        "Struct{payload=Struct{a=[1, x]},type=T}");
  CHECK(!Convert(*c, kString, std::nullopt));
  // A Decimal member (decimal.handling.mode=precise, an envelope placement of a numeric
  // column) is the BigDecimal Java holds, not its bytes: "ALxhRg==" is 12345670 unscaled.
  const ConnectShape envelope{
      ConnectType::kStruct,
      R"({"type":"struct","fields":[{"type":"string","optional":true,"field":"payload"},)"
      R"({"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal",)"
      R"("version":1,"parameters":{"scale":"3","connect.decimal.precision":"12"},)"
      R"("field":"amount"},{"type":"string","optional":true,"field":"note"}],)"
      R"("optional":false,"name":"x.Value"})"};
  CHECK(*Convert(*c, envelope, R"({"payload":"ALxhRg==","amount":"ALxhRg==","note":"n"})") ==
        "Struct{payload=ALxhRg==,amount=12345.670,note=n}");
  CHECK(*Convert(*c, envelope, R"({"payload":"p","amount":"/w==","note":null})") ==
        "Struct{payload=p,amount=-0.001}");
  CHECK(*Convert(*c, envelope, R"({"payload":"p","amount":null})") == "Struct{payload=p}");
  CHECK_FALSE(MakeConverter(kStringConverterClass, "value.converter",
                            Properties(Keys{{"value.converter.converter.encoding", "UTF-16"}})
                                .Scoped("value.converter."))
                  .ok());
}

TEST_CASE("ByteArrayConverter and BinaryDataConverter pass bytes and refuse other types") {
  auto bytes = Make(kByteArrayConverterClass);
  CHECK(*Convert(*bytes, kBytes, std::string("\x00\x01", 2)) == std::string("\x00\x01", 2));
  auto refused = bytes->FromConnectData("t", kString, "x");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message() == "Invalid schema type for ByteArrayConverter: STRING");
  auto schemaless = bytes->FromConnectData("t", kNoSchema, "x");
  REQUIRE_FALSE(schemaless.ok());
  CHECK(schemaless.status().message() ==
        "ByteArrayConverter is not compatible with objects of type class java.lang.String");

  auto binary = Make(kBinaryDataConverterClass);
  CHECK(*Convert(*binary, kBytes, "raw") == "raw");
  CHECK(!Convert(*binary, kNoSchema, std::nullopt));
  CHECK_FALSE(binary->FromConnectData("t", kString, "x").ok());
  auto delegating = Make(kBinaryDataConverterClass,
                         {{"value.converter.delegate.converter.type", kJsonConverterClass},
                          {"value.converter.delegate.converter.type.schemas.enable", "false"}});
  CHECK(*Convert(*delegating, kString, "x") == "\"x\"");
}

TEST_CASE("SimpleHeaderConverter: Values.convertToString") {
  auto c = Make(kSimpleHeaderConverterClass);
  CHECK(*Convert(*c, kString, "a\"b") == "a\"b");
  CHECK(*Convert(*c, kBytes, std::string("\x00\xff\x10", 3)) == "AP8Q");
  CHECK(*Convert(*c, kDouble, "100") == "100.0");
  CHECK(*Convert(*c, kDecimal, std::string("\xff", 1)) == "-0.001");
  CHECK(*Convert(*c, kStruct, R"({"a":"q\"x","n":null,"l":[1,true]})") ==
        R"({"a":"q\"x","n":null,"l":[1,true]})");
  CHECK(!Convert(*c, kString, std::nullopt));
}

TEST_CASE("Converters: absent keys keep walrelay's bytes; an unknown class names its key") {
  Record r;
  r.topic = "t";
  r.key = "k";
  r.value = "{\"a\":\"\xF0\x9F\x98\x80\"}";
  r.value_shape = kStruct;
  r.headers.push_back(Header{"id", "1", kString});
  auto native = Converters::Build(Properties(Keys{}));
  REQUIRE(native.ok());
  CHECK_FALSE(native->WritesSchemas());
  Record same = r;
  CHECK(!native->Apply(same));
  CHECK(same.value == r.value);

  auto unknown = Converters::Build(
      Properties(Keys{{"value.converter", "io.confluent.connect.avro.AvroConverter"}}));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == ErrorCode::kConfig);
  CHECK(unknown.status().message().find("'value.converter'") != std::string::npos);

  auto json = Converters::Build(Properties(Keys{{"value.converter", kJsonConverterClass},
                                                {"value.converter.schemas.enable", "false"},
                                                {"header.converter", kJsonConverterClass}}));
  REQUIRE(json.ok());
  CHECK(json->WritesSchemas());  // the header converter writes schemas
  Record converted = r;
  CHECK(!json->Apply(converted));
  CHECK(converted.key == "k");  // no key.converter: walrelay's bytes
  CHECK(*converted.value == "{\"a\":\"\\uD83D\\uDE00\"}");
  CHECK(*converted.headers[0].value ==
        R"({"schema":{"type":"string","optional":false},"payload":"1"})");

  auto bytes = Converters::Build(Properties(Keys{{"value.converter", kByteArrayConverterClass}}));
  REQUIRE(bytes.ok());
  Record refused = r;
  refused.source.table = "public.outbox";
  auto failure = bytes->Apply(refused);
  REQUIRE(failure);
  CHECK(failure->stage == "VALUE_CONVERTER");
  CHECK(failure->class_name == kByteArrayConverterClass);
  CHECK(failure->status.message().find("'value.converter'") != std::string::npos);
  CHECK(failure->status.message().find("topic 't'") != std::string::npos);
  CHECK(failure->status.message().find("table public.outbox") != std::string::npos);
  CHECK(refused.value == r.value);  // unchanged, for the dead letter
}

TEST_CASE("with walrelay's number rendering, floating values keep PostgreSQL's text") {
  auto header = Make(kSimpleHeaderConverterClass);
  auto json = Make(kJsonConverterClass, {{"value.converter.schemas.enable", "false"}});
  header->KeepNumberText(true);
  json->KeepNumberText(true);
  CHECK(*Convert(*header, kDouble, "12345.670") == "12345.670");  // a numeric(12,3) column
  CHECK(*Convert(*json, kDouble, "12345.670") == "12345.670");
  CHECK(*Convert(*json, kDouble, "NaN") == "\"NaN\"");
  header->KeepNumberText(false);
  CHECK(*Convert(*header, kDouble, "12345.670") == "12345.67");
}

TEST_CASE("StringConverter passes bytes without a schema (a plugin's value) as they are") {
  auto c = Make(kStringConverterClass);
  CHECK(*Convert(*c, ConnectShape{ConnectType::kBytes, ""}, "{\"ce\":1}") == "{\"ce\":1}");
}

TEST_CASE("Connect's Date, Time and Timestamp: Values' ISO text and Date.toString, in UTC") {
  const ConnectShape date{
      ConnectType::kInt32,
      R"({"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Date","version":1})"};
  const ConnectShape time{
      ConnectType::kInt32,
      R"({"type":"int32","optional":true,"name":"org.apache.kafka.connect.data.Time","version":1})"};
  const ConnectShape ts{
      ConnectType::kInt64,
      R"({"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1})"};
  auto header = Make(kSimpleHeaderConverterClass);
  auto string = Make(kStringConverterClass);
  auto json = Make(kJsonConverterClass, {{"value.converter.schemas.enable", "false"}});
  CHECK(*Convert(*header, date, "19782") == "2024-02-29");
  CHECK(*Convert(*header, time, "45296789") == "12:34:56.789Z");
  CHECK(*Convert(*header, ts, "1709210096789") == "2024-02-29T12:34:56.789Z");
  CHECK(*Convert(*string, ts, "1709210096789") == "Thu Feb 29 12:34:56 UTC 2024");
  CHECK(*Convert(*json, ts, "1709210096789") == "1709210096789");  // JsonConverter: the number
}
