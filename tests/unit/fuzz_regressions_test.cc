// Inputs that the fuzz targets (fuzz/) or their seed corpus showed to be handled wrongly, kept
// as plain unit tests so the fix is checked on every build, not only by a fuzz run. Each input
// is also in the seed corpus under fuzz/corpus/.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/regex_limits.h"
#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "decode/wal2json_decoder.h"
#include "transform/java_regex.h"

using namespace walrelay;

namespace {
// Backslashes and quotes of a regex written into a JSON string.
std::string JsonEscapeForTest(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}
}  // namespace

// fuzz/corpus/config/router-all-keys.json: a named group in route.topic.replacement was taken
// for a config reference and rejected ("unknown reference ${kind:...}"), so even Debezium's
// documented default written out explicitly failed to load.
TEST_CASE("${name} without a provider is kept as written, not taken for a config reference") {
  auto config = ParseConnectorConfig(R"json({"config": {
    "database.hostname": "h", "database.user": "u", "database.dbname": "d", "topic.prefix": "p",
    "kafka.bootstrap.servers": "k:9092", "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.route.topic.regex": "(?<routedByValue>.*)",
    "transforms.outbox.route.topic.replacement": "outbox.event.${routedByValue}"}})json",
                                     "test");
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  CHECK(config->properties.Get("transforms.outbox.route.topic.replacement") ==
        "outbox.event.${routedByValue}");

  setenv("WALRELAY_FUZZ_REGRESSION_VAR", "v", 1);
  auto mixed = SubstituteConfigValue("k", "a.${group}.${env:WALRELAY_FUZZ_REGRESSION_VAR}.$1");
  REQUIRE(mixed.ok());
  CHECK(*mixed == "a.${group}.v.$1");
  CHECK_FALSE(SubstituteConfigValue("k", "${vault:x}").ok());
  CHECK_FALSE(SubstituteConfigValue("k", "${env:X").ok());
}

// The provider of an unknown reference is part of the value; for a secret it must not be shown.
TEST_CASE("an unknown reference in a secret names the key but not the provider") {
  auto pw = SubstituteConfigValue("database.password", "pa${Zq7Sec:ret}ss");
  REQUIRE_FALSE(pw.ok());
  CHECK(pw.status().message().find("database.password") != std::string::npos);
  CHECK(pw.status().message().find("Zq7Sec") == std::string::npos);
  auto other = SubstituteConfigValue("slot.name", "${vault:x}");
  REQUIRE_FALSE(other.ok());
  CHECK(other.status().message().find("${vault:...}") != std::string::npos);
}

// fuzz/corpus/*/regression-deep-nesting.json: RapidJSON's default parser recurses once per
// nesting level, so about 100,000 '[' overflowed the stack (SIGSEGV; `walrelay validate` exited
// 139 instead of 2) in the wal2json decoder and the config loader. A million levels is deeper
// than any stack could take recursively; both must answer with an error instead.
TEST_CASE("deeply nested JSON is an error, not a stack overflow") {
  const std::string deep(1000000, '[');
  Wal2JsonDecoder decoder;
  DecodedMessage out;
  const Status decoded = decoder.Decode(deep, Lsn(0x16B3748), out);
  CHECK(decoded.code() == ErrorCode::kDecode);
  const std::string balanced = deep + std::string(deep.size(), ']');
  CHECK(decoder.Decode(balanced, Lsn(0x16B3748), out).code() == ErrorCode::kDecode);

  auto config = ParseConnectorConfig("{\"config\": " + balanced + "}", "test");
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().code() == ErrorCode::kConfig);
  CHECK_FALSE(ParseConnectorConfig("{\"database.hostname\": " + deep, "test").ok());
}

// fuzz/corpus/config/regression-regex-number-overflow.json: libstdc++'s std::regex reads the
// number of a backreference or a `{n,m}` bound into a long without an overflow check, so
// `table.include.list` entry `public\555...5.outbox` (39 digits) was undefined behaviour
// (UBSan: signed integer overflow) while the config loaded. Oversized numbers are a config
// error naming the key; ordinary bounds, `\0`, classes and escaped braces are unaffected.
TEST_CASE("an oversized number in a configured regex is a config error, not an overflow") {
  const std::string digits(39, '5');
  const std::vector<std::string> oversized = {
      "public\\" + digits + ".outbox", "public.outbox_x{" + digits + "}",
      "public.outbox_x{1," + digits + "}", "public.x{10000}"};
  for (const std::string& entry : oversized) {
    CAPTURE(entry);
    const Status checked = CheckRegexNumbers(entry, "table.include.list");
    CHECK(checked.code() == ErrorCode::kConfig);
    CHECK(checked.message().find("table.include.list") != std::string::npos);

    auto config = ParseConnectorConfig(R"({"config": {"database.hostname": "h",
      "database.user": "u", "database.dbname": "d", "topic.prefix": "p",
      "kafka.bootstrap.servers": "k:9092", "table.include.list": ")" +
                                           JsonEscapeForTest(entry) + R"("}})",
                                       "test");
    REQUIRE_MESSAGE(config.ok(), config.status().ToString());
    auto settings = ParseRelaySettings(*config);
    REQUIRE_FALSE(settings.ok());
    CHECK(settings.status().message().find("table.include.list") != std::string::npos);
  }
  const std::vector<std::string> accepted = {"public.outbox",
                                             "public.x{2,9999}",
                                             "public.x\\0" + digits,
                                             "public.[{" + digits + "}]",
                                             "public.x\\{" + digits + "\\}",
                                             "(a)\\1",
                                             "public.x\\c{" + digits};
  for (const std::string& fine : accepted) {
    CAPTURE(fine);
    CHECK(CheckRegexNumbers(fine, "table.include.list").ok());
  }

  auto route = TopicRegex::Compile("(.*){" + digits + "}", "$1", "route.topic.regex");
  REQUIRE_FALSE(route.ok());
  CHECK(route.status().message().find("route.topic.regex") != std::string::npos);
  CHECK(TopicRegex::Compile("(.*){1,9999}", "$1", "route.topic.regex").ok());
}
