// What the record pipeline's unit suites share (pipeline_test.cc, exactly_once_test.cc): a sink
// in place of Kafka, the connector settings they start from, and the decoded messages of a
// replication stream.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "decode/decoder.h"
#include "delivery/record_sink.h"

namespace walrelay::testing {

// Takes records until `room` is used up (then QUEUE_FULL), or refuses them with `refuse`.
// Delivery reports come from the test, as the relay serves them from the producer.
class FakeSink final : public RecordSink {
 public:
  struct Produced {
    uint64_t ticket;
    Record record;
  };
  Status Produce(const Record& record, uint64_t ticket, rd_kafka_resp_err_t* code) override {
    if (refuse != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (code) *code = refuse;
      return Status::Kafka(std::string("refused: ") + rd_kafka_err2name(refuse));
    }
    if (outstanding >= room) {
      if (code) *code = RD_KAFKA_RESP_ERR__QUEUE_FULL;
      return Status::Kafka("queue full");
    }
    ++outstanding;
    produced.push_back({ticket, record});
    return Status::Ok();
  }
  int OutstandingMessages() const override { return outstanding; }
  size_t MaxValueBytes() const override { return 1 << 20; }

  std::vector<Produced> produced;
  int outstanding = 0;
  int room = 1000;
  rd_kafka_resp_err_t refuse = RD_KAFKA_RESP_ERR_NO_ERROR;
};

// Connector "orders" relaying public.outbox of database "shop" to a Kafka that is never
// reached, plus `members` (JSON members, each with its leading comma).
inline RelaySettings PipelineSettings(const std::string& members) {
  const std::string json =
      R"({"name":"orders","config":{"database.hostname":"h","database.user":"u",)"
      R"("database.dbname":"shop","topic.prefix":"shop","slot.name":"orders_slot",)"
      R"("table.include.list":"public.outbox","kafka.bootstrap.servers":"127.0.0.1:9",)"
      R"("kafka.log_level":"0")" +
      members + "}}";
  auto config = ParseConnectorConfig(json, "test");
  REQUIRE_MESSAGE(config.ok(), config.status().ToString());
  auto settings = ParseRelaySettings(*config);
  REQUIRE_MESSAGE(settings.ok(), settings.status().ToString());
  return std::move(settings).value();
}

inline DecodedMessage BeginMessage(uint32_t xid) {
  DecodedMessage m;
  m.kind = MessageKind::kBegin;
  m.begin.xid = xid;
  return m;
}

// A row of public.<table> whose integer primary key `id` is the row's LSN.
inline DecodedMessage RowMessage(Lsn lsn, const std::string& table = "outbox",
                                 ChangeOp op = ChangeOp::kInsert) {
  DecodedMessage m;
  m.kind = MessageKind::kChange;
  m.change.op = op;
  m.change.lsn = lsn;
  m.change.schema = "public";
  m.change.table = table;
  m.change.primary_key = {"id"};
  Column id{"id", "integer", ValueKind::kNumber, std::to_string(lsn.value()), false};
  if (op == ChangeOp::kDelete) {
    m.change.identity = {id};
    m.change.before = {id};
  } else {
    m.change.columns = {id};
  }
  return m;
}

inline DecodedMessage CommitMessage(uint32_t xid, Lsn end) {
  DecodedMessage m;
  m.kind = MessageKind::kCommit;
  m.commit.xid = xid;
  m.commit.end_lsn = end;
  return m;
}

}  // namespace walrelay::testing
