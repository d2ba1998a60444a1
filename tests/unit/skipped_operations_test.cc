// skipped.operations: every combination of the four operations, parsed, skipped and turned
// into the publication's `publish` value as Debezium 3.6 writes it; the values refused; and
// which existing publications filtered mode must change.
#include <doctest/doctest.h>

#include <map>

#include "config/skipped_operations.h"
#include "pg/publication.h"

using namespace walrelay;

namespace {

Result<SkippedOperations> Parse(const std::optional<std::string>& value) {
  std::map<std::string, std::string> values;
  if (value) values["skipped.operations"] = *value;
  return ParseSkippedOperations(Properties(values));
}

}  // namespace

TEST_CASE("skipped.operations: each of the 16 combinations skips exactly what it names and "
          "publishes the rest") {
  const char kOps[] = {'c', 'u', 'd', 't'};
  const char* kNames[] = {"insert", "update", "delete", "truncate"};
  for (int mask = 1; mask < 16; ++mask) {
    std::string value, publish;
    for (int i = 0; i < 4; ++i) {
      if (mask & (1 << i)) {
        value += (value.empty() ? "" : ",") + std::string(1, kOps[i]);
      } else {
        publish += (publish.empty() ? "" : ", ") + std::string(kNames[i]);
      }
    }
    CAPTURE(value);
    auto parsed = Parse(value);
    REQUIRE(parsed.ok());
    CHECK(parsed->set);
    for (int i = 0; i < 4; ++i) CHECK(parsed->Skips(kOps[i]) == bool(mask & (1 << i)));
    CHECK_FALSE(parsed->Skips('m'));  // logical decoding messages are not operations
    REQUIRE(parsed->PublishOption().has_value());
    CHECK(*parsed->PublishOption() == publish);  // all four skipped: '' publishes nothing
  }
}

TEST_CASE("skipped.operations: unset skips truncates and leaves the publication alone; none "
          "skips nothing; spelling and spaces as Debezium takes them") {
  auto unset = Parse(std::nullopt);
  REQUIRE(unset.ok());
  CHECK_FALSE(unset->set);
  CHECK(unset->Skips('t'));
  CHECK_FALSE(unset->Skips('c'));
  CHECK_FALSE(unset->Skips('u'));
  CHECK_FALSE(unset->Skips('d'));
  CHECK_FALSE(unset->PublishOption().has_value());

  for (const char* none : {"none", " NONE "}) {
    auto parsed = Parse(std::string(none));
    REQUIRE(parsed.ok());
    CHECK(parsed->set);
    for (char op : {'c', 'u', 'd', 't'}) CHECK_FALSE(parsed->Skips(op));
    CHECK_FALSE(parsed->PublishOption().has_value());
  }
  auto spaced = Parse(" u , D,t ");
  REQUIRE(spaced.ok());
  CHECK(*spaced->PublishOption() == "insert");
  auto repeated = Parse("d,d");
  REQUIRE(repeated.ok());
  CHECK(*repeated->PublishOption() == "insert, update, truncate");
}

TEST_CASE("skipped.operations: values that name no operation are config errors naming the key") {
  for (const char* bad : {"", " , ", "r", "c,x", "insert", "none,d"}) {
    CAPTURE(bad);
    auto parsed = Parse(std::string(bad));
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == ErrorCode::kConfig);
    CHECK(parsed.status().message().find("skipped.operations") != std::string::npos);
  }
  CHECK(Parse("c,x").status().message().find("'x'") != std::string::npos);
}

TEST_CASE("skipped.operations: an existing publication is changed only when the key is set and "
          "its operations differ from the ones not skipped") {
  struct Row {
    std::optional<std::string> skipped;
    PublishedOperations current;
    std::optional<std::string> change;
  };
  const PublishedOperations all{true, true, true, true};
  const PublishedOperations inserts{true, false, false, false};
  const PublishedOperations no_truncate{true, true, true, false};
  const Row rows[] = {
      {std::nullopt, all, std::nullopt},      // unset: never changed
      {std::nullopt, inserts, std::nullopt},  // unset: never widened either
      {"none", inserts, std::nullopt},        // none: the relay needs nothing narrowed
      {"u,d,t", all, "insert"},
      {"u,d,t", inserts, std::nullopt},
      {"u,d,t", no_truncate, "insert"},
      {"t", all, "insert, update, delete"},
      {"t", no_truncate, std::nullopt},
      {"t", inserts, "insert, update, delete"},  // widened: updates would never arrive
      {"c,u,d,t", all, ""},
      {"c,u,d,t", PublishedOperations{false, false, false, false}, std::nullopt},
  };
  for (const Row& row : rows) {
    CAPTURE(row.skipped.value_or("(unset)"));
    CAPTURE(row.current.ToString());
    auto skipped = Parse(row.skipped);
    REQUIRE(skipped.ok());
    CHECK(PublishChange(*skipped, row.current) == row.change);
  }
  CHECK(inserts.ToString() == "insert");
  CHECK(all.ToString() == "insert, update, delete, truncate");
  CHECK(PublishedOperations{false, false, false, false}.ToString() == "nothing");
}
