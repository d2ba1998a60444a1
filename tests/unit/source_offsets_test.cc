// The offsets-topic record (Kafka Connect's layout, Debezium's members) and the classification
// of librdkafka's transactional errors.
#include <doctest/doctest.h>

#include "delivery/source_offsets.h"
#include "delivery/transactional_producer.h"

using namespace walrelay;

namespace {
SourceOffset Sample() {
  SourceOffset o;
  o.lsn = Lsn(0x16B374D848ULL);
  o.lsn_commit = Lsn(0x16B374D900ULL);
  o.tx_id = 771;
  o.ts_usec = 1700000000123456;
  o.system_identifier = "7311111111111111111";
  o.timeline = 2;
  o.slot = "walrelay";
  return o;
}
}  // namespace

TEST_CASE("the key is Connect's [connector, {server: topic.prefix}]") {
  CHECK(SourceOffsetKey("orders-connector", "dbserver1") ==
        R"(["orders-connector",{"server":"dbserver1"}])");
  CHECK(SourceOffsetKey("a\"b", "p") == R"(["a\"b",{"server":"p"}])");
}

TEST_CASE("the value has Debezium's members, numbers for LSNs, and round-trips") {
  const std::string json = SerializeSourceOffset(Sample());
  CHECK(
      json ==
      R"({"lsn":97500059720,"lsn_commit":97500059904,"txId":771,"ts_usec":1700000000123456,)"
      R"("walrelay_system_identifier":"7311111111111111111","walrelay_timeline":2,"walrelay_slot":"walrelay"})");
  auto parsed = ParseSourceOffset(json);
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().ToString());
  CHECK(*parsed == Sample());
}

TEST_CASE("a position inside a source transaction round-trips; its members come all or none") {
  SourceOffset inside = Sample();
  inside.inside = InsideTransaction{771, Lsn(0x16B374D000ULL), Lsn(0x16B374D848ULL), 3};
  const std::string json = SerializeSourceOffset(inside);
  CHECK(json.find(R"("walrelay_txn_xid":771,"walrelay_txn_first_lsn":97500057600,)"
                  R"("walrelay_txn_lsn":97500059720,"walrelay_txn_at_lsn":3})") !=
        std::string::npos);
  auto parsed = ParseSourceOffset(json);
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().ToString());
  CHECK(*parsed == inside);
  // A whole-transaction position has none of them.
  CHECK(SerializeSourceOffset(Sample()).find("walrelay_txn") == std::string::npos);
  CHECK_FALSE(ParseSourceOffset(SerializeSourceOffset(Sample()))->inside.has_value());
  // Some of them only, or wrong types: refused, naming them.
  const std::string base = R"({"lsn":1,"lsn_commit":1,)";
  CHECK(ParseSourceOffset(base + R"("walrelay_txn_xid":5})")
            .status()
            .message()
            .find("only some of") != std::string::npos);
  CHECK(ParseSourceOffset(base + R"("walrelay_txn_xid":-5,"walrelay_txn_first_lsn":1,)"
                                 R"("walrelay_txn_lsn":2,"walrelay_txn_at_lsn":1})")
            .status()
            .message()
            .find("walrelay_txn_xid") != std::string::npos);
  CHECK(ParseSourceOffset(base + R"("walrelay_txn_xid":5,"walrelay_txn_first_lsn":1,)"
                                 R"("walrelay_txn_lsn":2,"walrelay_txn_at_lsn":0})")
            .status()
            .message()
            .find("walrelay_txn_at_lsn") != std::string::npos);
  CHECK(ParseSourceOffset(base + R"("walrelay_txn_xid":5,"walrelay_txn_first_lsn":"0/1",)"
                                 R"("walrelay_txn_lsn":2,"walrelay_txn_at_lsn":1})")
            .status()
            .message()
            .find("walrelay_txn_first_lsn") != std::string::npos);
}

TEST_CASE("KafkaHolds: a replayed change is held exactly when it is the split transaction's and "
          "at or before the stored change; every combination") {
  const InsideTransaction held{700, Lsn(1000), Lsn(1500), 2};
  // Every combination of: same or other xid, same or other first LSN, the change's LSN
  // before/at/after the stored one, its ordinal at that LSN before/at/after.
  int rows = 0;
  for (uint32_t xid : {700u, 701u}) {
    for (uint64_t first : {1000u, 999u}) {
      for (uint64_t lsn : {1400u, 1500u, 1600u}) {
        for (uint64_t at : {1u, 2u, 3u}) {
          const bool same_txn = xid == 700 && first == 1000;
          const bool expected = same_txn && (lsn < 1500 || (lsn == 1500 && at <= 2));
          INFO("xid ", xid, " first ", first, " lsn ", lsn, " at ", at);
          CHECK(KafkaHolds(held, InsideTransaction{xid, Lsn(first), Lsn(lsn), at}) == expected);
          ++rows;
        }
      }
    }
  }
  CHECK(rows == 36);
}

TEST_CASE("ChangeCounter: changes sharing one LSN (a multi-insert) get ordinals from 1") {
  ChangeCounter counter;
  counter.Begin(9, Lsn(100));
  CHECK(counter.Next(Lsn(110)) == InsideTransaction{9, Lsn(100), Lsn(110), 1});
  CHECK(counter.Next(Lsn(110)) == InsideTransaction{9, Lsn(100), Lsn(110), 2});
  CHECK(counter.Next(Lsn(120)) == InsideTransaction{9, Lsn(100), Lsn(120), 1});
  counter.Begin(10, Lsn(200));
  CHECK(counter.Next(Lsn(120)) == InsideTransaction{10, Lsn(200), Lsn(120), 1});
}

TEST_CASE("an offset Debezium wrote parses; walrelay's members read as absent") {
  auto parsed = ParseSourceOffset(
      R"({"transaction_id":null,"lsn_proc":24023128,"messageType":"INSERT","lsn_commit":24023064,)"
      R"("lsn":24023128,"txId":555,"ts_usec":1559033904863619})");
  REQUIRE_MESSAGE(parsed.ok(), parsed.status().ToString());
  CHECK(parsed->lsn == Lsn(24023128));
  CHECK(parsed->lsn_commit == Lsn(24023064));
  CHECK(parsed->tx_id == 555);
  CHECK(parsed->system_identifier.empty());
  CHECK(parsed->slot.empty());
}

TEST_CASE("malformed offsets are refused, naming the member") {
  CHECK(ParseSourceOffset("not json").status().message().find("not JSON") != std::string::npos);
  CHECK(ParseSourceOffset("[1]").status().message().find("not a JSON object") != std::string::npos);
  CHECK(ParseSourceOffset(R"({"lsn":1})").status().message().find("\"lsn_commit\"") !=
        std::string::npos);
  CHECK(ParseSourceOffset(R"({"lsn":"0/1","lsn_commit":1})").status().message().find("\"lsn\"") !=
        std::string::npos);
  CHECK(ParseSourceOffset(R"({"lsn":1,"lsn_commit":1,"walrelay_slot":3})")
            .status()
            .message()
            .find("walrelay_slot") != std::string::npos);
}

TEST_CASE("an offset of another server or slot is refused, naming both") {
  const SourceOffset o = Sample();
  CHECK(CheckOffsetOrigin(o, "7311111111111111111", "walrelay").ok());
  const Status server = CheckOffsetOrigin(o, "7322222222222222222", "walrelay");
  CHECK(server.code() == ErrorCode::kOffsetMismatch);
  CHECK(server.message().find("7311111111111111111") != std::string::npos);
  CHECK(server.message().find("7322222222222222222") != std::string::npos);
  const Status slot = CheckOffsetOrigin(o, "7311111111111111111", "other_slot");
  CHECK(slot.message().find("'walrelay'") != std::string::npos);
  CHECK(slot.message().find("'other_slot'") != std::string::npos);
  SourceOffset debezium = o;
  debezium.system_identifier.clear();
  CHECK(CheckOffsetOrigin(debezium, "7311111111111111111", "walrelay")
            .message()
            .find("no system identifier") != std::string::npos);
}

TEST_CASE("transactional errors: fenced wins over fatal, fatal over abortable, abortable over "
          "retriable") {
  CHECK(ClassifyTxnError(RD_KAFKA_RESP_ERR__FENCED, true, false, false) == TxnErrorKind::kFenced);
  CHECK(ClassifyTxnError(RD_KAFKA_RESP_ERR_PRODUCER_FENCED, true, true, true) ==
        TxnErrorKind::kFenced);
  CHECK(ClassifyTxnError(RD_KAFKA_RESP_ERR__FATAL, true, true, true) == TxnErrorKind::kFatal);
  CHECK(ClassifyTxnError(RD_KAFKA_RESP_ERR__TIMED_OUT, false, true, true) ==
        TxnErrorKind::kAbortable);
  CHECK(ClassifyTxnError(RD_KAFKA_RESP_ERR__TIMED_OUT, false, false, true) ==
        TxnErrorKind::kRetriable);
  CHECK(ClassifyTxnError(RD_KAFKA_RESP_ERR__STATE, false, false, false) ==
        TxnErrorKind::kAbortable);
  CHECK(DefaultTransactionalId("orders") == "walrelay-orders");
}
