#include <doctest/doctest.h>

#include "common/lsn.h"
#include "common/pg_time.h"

using walrelay::Lsn;

TEST_CASE("Lsn parses and prints PostgreSQL's X/X form") {
  auto lsn = Lsn::Parse("16/B374D848");
  REQUIRE(lsn.ok());
  CHECK(lsn->value() == ((0x16ULL << 32) | 0xB374D848ULL));
  CHECK(lsn->ToString() == "16/B374D848");
  CHECK(Lsn::Parse("0/0")->valid() == false);
  CHECK(Lsn::Parse("FFFFFFFF/FFFFFFFF")->value() == ~0ULL);
  CHECK(Lsn(0x1544D90).ToString() == "0/1544D90");
}

TEST_CASE("Lsn rejects malformed input and quotes it") {
  for (const char* bad : {"", "/", "1/", "/1", "12345", "G/1", "1/2/3", "123456789/0", "1/ 2"}) {
    auto lsn = Lsn::Parse(bad);
    CHECK_FALSE(lsn.ok());
    CHECK(lsn.status().message().find(std::string("'") + bad + "'") != std::string::npos);
  }
}

TEST_CASE("Lsn orders by position") {
  CHECK(*Lsn::Parse("0/FF") < *Lsn::Parse("1/0"));
  CHECK(*Lsn::Parse("1/10") > *Lsn::Parse("1/F"));
}

TEST_CASE("PostgreSQL timestamps convert to epoch milliseconds") {
  CHECK(*walrelay::ParsePgTimestampMillis("2019-03-24 20:52:59") == 1553460779000);
  CHECK(*walrelay::ParsePgTimestampMillis("2019-03-24 20:52:59.123456") == 1553460779123);
  CHECK(*walrelay::ParsePgTimestampMillis("2019-03-24 20:52:59.5") == 1553460779500);
  CHECK(*walrelay::ParsePgTimestampMillis("2026-11-21 17:48:20.962784+00") == 1795283300962);
  CHECK(*walrelay::ParsePgTimestampMillis("2019-03-24 22:52:59+02") == 1553460779000);
  CHECK(*walrelay::ParsePgTimestampMillis("2019-03-24 15:22:59-05:30") == 1553460779000);
  CHECK(*walrelay::ParsePgTimestampMillis("1969-12-31 23:59:59") == -1000);
  CHECK_FALSE(walrelay::ParsePgTimestampMillis("2019-03-24").ok());
  CHECK_FALSE(walrelay::ParsePgTimestampMillis("2019-13-24 20:52:59").ok());
  CHECK_FALSE(walrelay::ParsePgTimestampMillis("2019-03-24 20:52:59 UTC").ok());
}
