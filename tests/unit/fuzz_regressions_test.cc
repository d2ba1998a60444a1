// Inputs that the fuzz targets (fuzz/) or their seed corpus showed to be handled wrongly, kept
// as plain unit tests so the fix is checked on every build, not only by a fuzz run. Each input
// is also in the seed corpus under fuzz/corpus/.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "config/connector_config.h"
#include "decode/wal2json_decoder.h"

using namespace walrelay;

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
