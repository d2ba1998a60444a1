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
