// Redis Cluster key slots and node names as the Redis store's cluster routing computes them,
// against values Redis documents (cluster spec) and `CLUSTER KEYSLOT` answers.
#include <doctest/doctest.h>

#include "consumer/redis_cluster.h"

namespace walrelay::consumer {
namespace {

TEST_CASE("Redis Cluster: CRC16-XMODEM and key slots") {
  CHECK(Crc16("123456789") == 0x31C3);  // the cluster specification's check value
  CHECK(Crc16("") == 0);
  CHECK(KeySlot("foo") == 12182);
  CHECK(KeySlot("bar") == 5061);
  CHECK(KeySlot("123456789") == 12739);
  CHECK(KeySlot("walrelay:consumer:svc:k-0") == 12268);  // CLUSTER KEYSLOT on redis 7.0
}

TEST_CASE("Redis Cluster: hash tags") {
  // The part between the first '{' and the next '}' decides, when it is not empty.
  CHECK(KeySlot("{user1000}.following") == KeySlot("user1000"));
  CHECK(KeySlot("{user1000}.followers") == KeySlot("{user1000}.following"));
  CHECK(KeySlot("foo{bar}{zap}") == KeySlot("bar"));
  CHECK(KeySlot("foo{{bar}}zap") == KeySlot("{bar"));
  // An empty tag, or no closing brace: the whole key.
  CHECK(KeySlot("foo{}{bar}") == 8363);
  CHECK(KeySlot("foo{bar") == Crc16("foo{bar") % 16384);
  CHECK(KeySlot("walrelay:consumer:{svc}:a") == KeySlot("walrelay:consumer:{svc}:b"));
}

TEST_CASE("Redis Cluster: node names") {
  auto a = ParseHostPort("127.0.0.1:7000");
  REQUIRE(a.ok());
  CHECK(a->first == "127.0.0.1");
  CHECK(a->second == 7000);
  auto v6 = ParseHostPort("[::1]:7001");
  REQUIRE(v6.ok());
  CHECK(v6->first == "::1");
  CHECK(v6->second == 7001);
  for (const char* bad : {"localhost", "host:", ":7000", "host:70000", "host:7x", "host:0"}) {
    auto r = ParseHostPort(bad);
    CHECK_MESSAGE(!r.ok(), bad);
    if (!r.ok()) CHECK(r.status().message().find(bad) != std::string::npos);
  }
}

}  // namespace
}  // namespace walrelay::consumer
