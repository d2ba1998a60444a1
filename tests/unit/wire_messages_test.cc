#include <doctest/doctest.h>

#include "pg/wire_messages.h"

using namespace walrelay;

namespace {
std::string Be64(uint64_t v) {
  std::string s;
  for (int i = 7; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}
}  // namespace

TEST_CASE("XLogData header is parsed byte-exactly") {
  const std::string msg =
      "w" + Be64(0x1544D90) + Be64(0x2000000) + Be64(12345) + "{\"action\":\"C\"}";
  auto x = ParseXLogData(msg);
  REQUIRE(x.ok());
  CHECK(x->data_start == Lsn(0x1544D90));
  CHECK(x->wal_end == Lsn(0x2000000));
  CHECK(x->payload == "{\"action\":\"C\"}");
}

TEST_CASE("short or mistyped messages are protocol errors") {
  CHECK_FALSE(ParseXLogData("w" + Be64(1)).ok());
  CHECK_FALSE(ParseXLogData("k" + Be64(1) + Be64(2) + Be64(3)).ok());
  CHECK_FALSE(ParseKeepalive("k" + Be64(1) + Be64(2)).ok());
  CHECK(ParseKeepalive("k" + Be64(1) + Be64(2)).status().code() == ErrorCode::kProtocol);
}

TEST_CASE("keepalive carries walEnd and the reply flag") {
  auto k = ParseKeepalive("k" + Be64(0xABCDEF) + Be64(99) + std::string(1, '\1'));
  REQUIRE(k.ok());
  CHECK(k->wal_end == Lsn(0xABCDEF));
  CHECK(k->reply_requested);
  CHECK_FALSE(ParseKeepalive("k" + Be64(1) + Be64(2) + std::string(1, '\0'))->reply_requested);
}

TEST_CASE("standby status update is 34 bytes with flush in its own field") {
  const std::string r = EncodeStandbyStatus(Lsn(0x30), Lsn(0x20), Lsn(), 777, false);
  REQUIRE(r.size() == 34);
  CHECK(r[0] == 'r');
  CHECK(r.substr(1, 8) == Be64(0x30));
  CHECK(r.substr(9, 8) == Be64(0x20));
  CHECK(r.substr(17, 8) == Be64(0));
  CHECK(r.substr(25, 8) == Be64(777));
  CHECK(r[33] == 0);
}
