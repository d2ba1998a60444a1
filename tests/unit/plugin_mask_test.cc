// plugins/mask (build/plugins/mask.so) loaded and run as walrelay runs it.
#include <doctest/doctest.h>

#include "plugin_test_support.h"

namespace walrelay {
namespace {

using testing::Contains;
using testing::PluginFile;

// The value after masking `value` with `keys`.
std::string Masked(const std::map<std::string, std::string>& keys, const std::string& value) {
  TransformChain chain = testing::OneTransform(PluginFile("mask"), keys, "pii");
  Record record = testing::RoutedRecord();
  record.value = value;
  auto outcome = chain.Apply(record);
  REQUIRE_MESSAGE(outcome.ok(), outcome.status().ToString());
  REQUIRE(record.value.has_value());
  return *record.value;
}

constexpr const char* kOrder =
    R"({"id": 7, "customer": {"name": "Ada", "email": "ada@example.com", "phone": null},)"
    R"( "items": [{"sku": "A1", "email": "gift@example.com"}, {"sku": "B2"}, 5],)"
    R"( "total": 12345678901234567890.50, "email": "top@example.com"})";

TEST_CASE("mask replaces the named fields, nested and top-level, keeping everything else") {
  CHECK(Masked({{"fields", "customer.email, email"}}, kOrder) ==
        R"({"id":7,"customer":{"name":"Ada","email":"****","phone":null},)"
        R"("items":[{"sku":"A1","email":"gift@example.com"},{"sku":"B2"},5],)"
        R"("total":12345678901234567890.50,"email":"****"})");
}

TEST_CASE("mask crosses arrays without an index and masks whole objects and arrays") {
  CHECK(Masked({{"fields", "items.email,customer"}, {"replacement", "[redacted]"}}, kOrder) ==
        R"({"id":7,"customer":"[redacted]",)"
        R"("items":[{"sku":"A1","email":"[redacted]"},{"sku":"B2"},5],)"
        R"("total":12345678901234567890.50,"email":"top@example.com"})");
  CHECK(Masked({{"fields", "email"}}, R"([{"email": "a"}, [{"email": "b"}]])") ==
        R"([{"email":"****"},[{"email":"****"}]])");
}

TEST_CASE("mask mode=remove drops the named members") {
  CHECK(Masked({{"fields", "customer.email,customer.phone,items"}, {"mode", "remove"}}, kOrder) ==
        R"({"id":7,"customer":{"name":"Ada"},)"
        R"("total":12345678901234567890.50,"email":"top@example.com"})");
}

TEST_CASE("a value with nothing to mask passes byte for byte") {
  CHECK(Masked({{"fields", "customer.ssn,name"}}, kOrder) == kOrder);
  CHECK(Masked({{"fields", "a"}}, "  42 ") == "  42 ");
}

TEST_CASE("tombstones pass; a value that is not JSON fails without being quoted") {
  TransformChain chain = testing::OneTransform(PluginFile("mask"), {{"fields", "email"}}, "pii");
  Record tombstone = testing::RoutedRecord();
  tombstone.value.reset();
  REQUIRE(chain.Apply(tombstone).ok());
  CHECK_FALSE(tombstone.value.has_value());

  Record broken = testing::RoutedRecord();
  broken.value = R"({"email": "ada@example.com")";
  auto outcome = chain.Apply(broken);
  REQUIRE_FALSE(outcome.ok());
  CHECK(outcome.status().code() == ErrorCode::kTransform);
  CHECK(Contains(outcome.status().message(), "transform 'pii': plugin 'mask'"));
  CHECK(Contains(outcome.status().message(), "the value is not JSON ("));
  CHECK(Contains(outcome.status().message(), "so its fields cannot be masked"));
  CHECK_FALSE(Contains(outcome.status().message(), "ada@"));
}

TEST_CASE("mask refuses bad configuration at start") {
  const std::string file = PluginFile("mask");
  CHECK(Contains(testing::BuildError(file).message(),
                 "failed to start: 'fields' must list at least one dotted field path"));
  CHECK(Contains(testing::BuildError(file, {{"fields", "a"}, {"mode", "hash"}}).message(),
                 "'mode' must be replace or remove, got 'hash'"));
  CHECK(Contains(testing::BuildError(file, {{"fields", "a"}, {"field", "b"}}).message(),
                 "unknown key 'field' (known: fields, mode, replacement)"));
}

}  // namespace
}  // namespace walrelay
