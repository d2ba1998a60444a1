// plugins/cloudevents (build/plugins/cloudevents.so) loaded and run as walrelay runs it.
#include <doctest/doctest.h>
#include <rapidjson/document.h>

#include "plugin_test_support.h"

namespace walrelay {
namespace {

using testing::Contains;
using testing::HeaderText;
using testing::PluginFile;

TransformChain CloudEvents(const std::map<std::string, std::string>& keys = {}) {
  return testing::OneTransform(PluginFile("cloudevents"), keys, "ce");
}

rapidjson::Document Parse(const Record& record) {
  rapidjson::Document doc;
  REQUIRE(record.value.has_value());
  doc.Parse(record.value->c_str());
  REQUIRE_MESSAGE(!doc.HasParseError(), *record.value);
  return doc;
}

std::string Text(const rapidjson::Value& v, const char* member) {
  REQUIRE_MESSAGE(v.HasMember(member), member);
  return v[member].GetString();
}

TEST_CASE("structured mode: the value becomes a CloudEvents 1.0 JSON event") {
  TransformChain chain = CloudEvents();
  Record record = testing::RoutedRecord();
  REQUIRE(chain.Apply(record).ok());
  CHECK(*record.value ==
        R"({"specversion":"1.0","id":"8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70",)"
        R"("source":"/walrelay/orders-outbox","type":"OrderCreated","subject":"42",)"
        R"("time":"2023-11-14T22:13:20.123Z","datacontenttype":"application/json",)"
        R"("data":{"total":12345678901234567890.50,"n":[1,2]}})");
  CHECK(record.key == "42");
  CHECK(record.topic == "outbox.event.Order");
  CHECK(HeaderText(record, "id") == testing::kEventId);
  CHECK(HeaderText(record, "content-type") == "application/cloudevents+json; charset=UTF-8");
}

TEST_CASE("structured mode: source and the type header are configurable; no key, no subject") {
  TransformChain chain =
      CloudEvents({{"source", "urn:shop:orders"}, {"type.header", "kind"}, {"mode", "Structured"}});
  Record record = testing::RoutedRecord();
  record.key.reset();
  record.headers.push_back({"kind", "shop.order.created"});
  record.value = R"("just a string")";
  REQUIRE(chain.Apply(record).ok());
  rapidjson::Document event = Parse(record);
  CHECK(Text(event, "source") == "urn:shop:orders");
  CHECK(Text(event, "type") == "shop.order.created");
  CHECK_FALSE(event.HasMember("subject"));
  CHECK(Text(event, "data") == "just a string");
}

TEST_CASE("binary mode: the value is unchanged and the attributes become ce_ headers") {
  TransformChain chain = CloudEvents({{"mode", "binary"}});
  Record record = testing::RoutedRecord();
  const std::string value = *record.value;
  record.headers.push_back({"content-type", "text/plain"});
  REQUIRE(chain.Apply(record).ok());
  CHECK(record.value == value);
  CHECK(HeaderText(record, "ce_specversion") == "1.0");
  CHECK(HeaderText(record, "ce_id") == testing::kEventId);
  CHECK(HeaderText(record, "ce_source") == "/walrelay/orders-outbox");
  CHECK(HeaderText(record, "ce_type") == "OrderCreated");
  CHECK(HeaderText(record, "ce_subject") == "42");
  CHECK(HeaderText(record, "ce_time") == "2023-11-14T22:13:20.123Z");
  CHECK(HeaderText(record, "content-type") == "application/json");  // replaced, not repeated
  CHECK(HeaderText(record, "id") == testing::kEventId);
  CHECK(record.headers.size() == 2 + 7);

  Record keyless = testing::RoutedRecord();
  keyless.key.reset();
  REQUIRE(chain.Apply(keyless).ok());
  CHECK(HeaderText(keyless, "ce_subject") == "(missing)");
}

TEST_CASE("time is RFC 3339 in UTC, also before 1970") {
  TransformChain chain = CloudEvents({{"mode", "binary"}});
  Record record = testing::RoutedRecord();
  record.timestamp_ms = -1;
  REQUIRE(chain.Apply(record).ok());
  CHECK(HeaderText(record, "ce_time") == "1969-12-31T23:59:59.999Z");
}

TEST_CASE("tombstones pass unchanged") {
  TransformChain chain = CloudEvents();
  Record record = testing::RoutedRecord();
  record.value.reset();
  REQUIRE(chain.Apply(record).ok());
  CHECK_FALSE(record.value.has_value());
  CHECK(HeaderText(record, "content-type") == "(missing)");
}

TEST_CASE("a record without an id, a type, or a JSON value fails, without quoting the value") {
  TransformChain chain = CloudEvents();
  Record no_id = testing::RoutedRecord();
  no_id.headers.erase(no_id.headers.begin());
  auto failed = chain.Apply(no_id);
  REQUIRE_FALSE(failed.ok());
  CHECK(Contains(failed.status().message(), "the record has no 'id' header"));

  Record no_type = testing::RoutedRecord();
  no_type.headers.pop_back();
  failed = chain.Apply(no_type);
  REQUIRE_FALSE(failed.ok());
  CHECK(Contains(failed.status().message(), "no 'eventType' header for the event type"));
  CHECK(Contains(failed.status().message(), "event id '" + std::string(testing::kEventId) + "'"));

  Record not_json = testing::RoutedRecord();
  not_json.value = "secret@example.com";
  failed = chain.Apply(not_json);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.status().code() == ErrorCode::kTransform);
  CHECK(Contains(failed.status().message(), "the value is not JSON (Invalid value. at offset 0)"));
  CHECK_FALSE(Contains(failed.status().message(), "secret"));
}

TEST_CASE("cloudevents refuses bad configuration at start") {
  CHECK(Contains(testing::BuildError(PluginFile("cloudevents"), {{"mode", "compact"}}).message(),
                 "failed to start: 'mode' must be structured or binary, got 'compact'"));
  CHECK(Contains(testing::BuildError(PluginFile("cloudevents"), {{"sauce", "x"}}).message(),
                 "failed to start: unknown key 'sauce' (known: mode, type.header, source)"));
  CHECK(Contains(testing::BuildError(PluginFile("cloudevents"), {{"source", ""}}).message(),
                 "'type.header' and 'source' must not be empty"));
}

}  // namespace
}  // namespace walrelay
