// plugins/filter (build/plugins/filter.so, plain C) loaded and run as walrelay runs it.
#include <doctest/doctest.h>

#include "plugin_test_support.h"

namespace walrelay {
namespace {

using testing::Contains;
using testing::PluginFile;

TransformChain Filter(const std::map<std::string, std::string>& keys) {
  return testing::OneTransform(PluginFile("filter"), keys, "f");
}

Record WithType(const std::optional<std::string>& type) {
  Record record = testing::RoutedRecord();
  record.headers.pop_back();
  if (type) record.headers.push_back({"eventType", *type});
  return record;
}

TransformOutcome Run(TransformChain& chain, Record record) {
  auto outcome = chain.Apply(record);
  REQUIRE(outcome.ok());
  return *outcome;
}

TEST_CASE("filter drops records whose header has one of the values") {
  TransformChain chain = Filter({{"header", "eventType"}, {"values", " OrderDeleted , Ping,,"}});
  CHECK(Run(chain, WithType("OrderDeleted")) == TransformOutcome::kDrop);
  CHECK(Run(chain, WithType("Ping")) == TransformOutcome::kDrop);
  CHECK(Run(chain, WithType("OrderCreated")) == TransformOutcome::kKeep);
  CHECK(Run(chain, WithType("ping")) == TransformOutcome::kKeep);  // exact bytes
  CHECK(Run(chain, WithType("Ping ")) == TransformOutcome::kKeep);
  CHECK(Run(chain, WithType(std::nullopt)) == TransformOutcome::kKeep);
  Record null_value = WithType(std::nullopt);
  null_value.headers.push_back({"eventType", std::nullopt});
  CHECK(Run(chain, null_value) == TransformOutcome::kKeep);
  // Any header of that name counts, not only the first.
  Record repeated = WithType("OrderCreated");
  repeated.headers.push_back({"eventType", "Ping"});
  CHECK(Run(chain, repeated) == TransformOutcome::kDrop);
}

TEST_CASE("filter with negate=true keeps only the records that match") {
  TransformChain chain =
      Filter({{"header", "eventType"}, {"values", "OrderCreated"}, {"negate", "TRUE"}});
  CHECK(Run(chain, WithType("OrderCreated")) == TransformOutcome::kKeep);
  CHECK(Run(chain, WithType("OrderShipped")) == TransformOutcome::kDrop);
  CHECK(Run(chain, WithType(std::nullopt)) == TransformOutcome::kDrop);
}

TEST_CASE("a kept record passes through filter unchanged") {
  TransformChain chain = Filter({{"header", "eventType"}, {"values", "Ping"}});
  Record record = testing::RoutedRecord();
  const Record before = record;
  REQUIRE(*chain.Apply(record) == TransformOutcome::kKeep);
  CHECK(record.topic == before.topic);
  CHECK(record.key == before.key);
  CHECK(record.value == before.value);
  CHECK(record.headers.size() == before.headers.size());
}

TEST_CASE("filter logs what it does and refuses bad configuration at start") {
  {
    testing::LogCapture log;
    Filter({{"header", "eventType"}, {"values", "a,b"}, {"negate", "false"}});
    CHECK(Contains(log.text(), "transform 'f' (filter): dropping records whose 'eventType' "
                               "header has one of 2 value(s)"));
  }
  const std::string file = PluginFile("filter");
  CHECK(Contains(testing::BuildError(file, {{"values", "a"}}).message(),
                 "failed to start: missing required key 'header'"));
  CHECK(Contains(testing::BuildError(file, {{"header", "h"}}).message(),
                 "failed to start: missing required key 'values'"));
  CHECK(Contains(testing::BuildError(file, {{"header", "h"}, {"values", " , "}}).message(),
                 "'values' lists no value"));
  CHECK(Contains(testing::BuildError(file, {{"header", " "}, {"values", "a"}}).message(),
                 "'header' must name a header"));
  CHECK(Contains(
      testing::BuildError(file, {{"header", "h"}, {"values", "a"}, {"negate", "yes"}}).message(),
      "'negate' must be true or false, got 'yes'"));
  CHECK(Contains(
      testing::BuildError(file, {{"header", "h"}, {"values", "a"}, {"value", "b"}}).message(),
      "unknown key 'value' (known: header, values, negate)"));
}

}  // namespace
}  // namespace walrelay
