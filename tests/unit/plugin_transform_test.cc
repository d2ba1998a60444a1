// The host's side of the ABI (PluginTransform), watched through test_transform.so: what a
// plugin is shown, how its output is copied back, and how a misbehaving plugin is contained.
#include "transform/plugin_transform.h"

#include <doctest/doctest.h>

#include "plugin_test_support.h"

namespace walrelay {
namespace {

using testing::Contains;
using testing::HeaderText;
using testing::TestPluginFile;

TransformChain TestTransform(const std::string& action,
                             const std::map<std::string, std::string>& keys = {}) {
  std::map<std::string, std::string> all = keys;
  all["action"] = action;
  return testing::OneTransform(TestPluginFile("test_transform"), all, "probe");
}

Status Failure(TransformChain& chain, Record& record) {
  auto outcome = chain.Apply(record);
  REQUIRE(!outcome.ok());
  CHECK(outcome.status().code() == ErrorCode::kTransform);
  return outcome.status();
}

TEST_CASE("a plugin sees every field of the record and its source") {
  TransformChain chain = TestTransform("describe");
  Record record = testing::RoutedRecord();
  record.headers.push_back({"empty", ""});
  record.headers.push_back({"nothing", std::nullopt});
  record.partition = 3;
  record.source.op = ChangeOp::kUpdate;
  REQUIRE(chain.Apply(record).ok());
  CHECK(*record.value ==
        "topic=[outbox.event.Order] key=[42] "
        R"(value=[{"total": 12345678901234567890.50, "n": [1, 2]}] )"
        "header=[id] header.value=[8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70] "
        "header=[eventType] header.value=[OrderCreated] header=[empty] header.value=[] "
        "header=[nothing] header.value=null "
        "timestamp=1700000000123 partition=3 op=u lsn=" +
            std::to_string(Lsn::Parse(testing::kLsnText)->value()) +
            " commit=1700000000123 xid=771 table=[public.outbox] ");
}

TEST_CASE("null key and tombstone reach the plugin as NULL, distinct from empty") {
  TransformChain chain = TestTransform("describe");
  Record record = testing::RoutedRecord();
  record.key.reset();
  record.value.reset();
  record.headers.clear();
  REQUIRE(chain.Apply(record).ok());
  CHECK(Contains(*record.value, "topic=[outbox.event.Order] key=null value=null timestamp="));
}

TEST_CASE("every output field the plugin sets is copied back") {
  TransformChain chain = TestTransform("rewrite", {{"topic", "audit"}});
  Record record = testing::RoutedRecord();
  REQUIRE(chain.Apply(record).ok());
  CHECK(record.topic == "audit");
  CHECK_FALSE(record.key.has_value());
  REQUIRE(record.value.has_value());  // empty, not a tombstone
  CHECK(record.value->empty());
  CHECK(record.partition == 2);
  CHECK(record.timestamp_ms == 42);
  CHECK(record.headers.empty());
  CHECK(record.source.table == "public.outbox");  // source is not the plugin's to change
}

TEST_CASE("fields the plugin leaves alone are kept, and outputs may point into the input") {
  TransformChain chain = TestTransform("swap");
  Record record = testing::RoutedRecord();
  const std::string value = *record.value;
  REQUIRE(chain.Apply(record).ok());
  CHECK(record.key == value);
  CHECK(record.value == "42");
  CHECK(record.topic == "outbox.event.Order");
  CHECK(HeaderText(record, "id") == testing::kEventId);
  CHECK(record.timestamp_ms == testing::kCommitMs);
}

TEST_CASE("a plugin's buffers may be reused from one record to the next") {
  TransformChain chain = TestTransform("tag", {{"tag", "+"}});
  Record first = testing::RoutedRecord();
  Record second = testing::RoutedRecord();
  second.headers.push_back({"trace", "second"});
  REQUIRE(chain.Apply(first).ok());
  REQUIRE(chain.Apply(second).ok());
  CHECK(HeaderText(first, "trace") == "+");
  CHECK(HeaderText(second, "trace") == "second+");
  CHECK(HeaderText(second, "id") == testing::kEventId);
}

TEST_CASE("a misbehaving plugin fails the record instead of corrupting it") {
  Record record = testing::RoutedRecord();
  TransformChain bad_status = TestTransform("bad_status");
  CHECK(Contains(Failure(bad_status, record).message(),
                 "returned unknown status 7 (treated as a failure): (no message)"));
  TransformChain empty_topic = TestTransform("empty_topic");
  CHECK(Contains(Failure(empty_topic, record).message(), "set an empty topic"));
  CHECK(record.topic == "outbox.event.Order");
  // An error buffer filled to its end without a terminator is cut, not overrun.
  TransformChain long_error = TestTransform("long_error");
  const std::string message = Failure(long_error, record).message();
  CHECK(Contains(message, "failed the record: xxxx"));
  CHECK(message.size() < 1024 + 300);
}

}  // namespace
}  // namespace walrelay
