// The LSN rules of the record pipeline (delivery/record_pipeline.h), with a fake sink in place
// of Kafka: what may be confirmed to the slot as records are produced, acknowledged, refused
// or held, and as streams start on the same or another server.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "delivery/record_pipeline.h"
#include "pipeline_fakes.h"

using namespace walrelay;

namespace {

using testing::FakeSink;

RelaySettings Settings(const std::string& extra = "") {
  return testing::PipelineSettings(R"(,"max.queue.size":"3")" + extra);
}

const SourceIdentity kServerA{"7000000000000000001", 1};
const SourceIdentity kServerB{"7000000000000000002", 1};

// A pipeline over a FakeSink with the at-least-once guarantee, and the stream to feed it.
struct Harness {
  explicit Harness(const std::string& extra = "") : settings(Settings(extra)) {
    auto guarantee = MakeDeliveryGuarantee(settings, *unused_output(), counters);
    REQUIRE_MESSAGE(guarantee.ok(), guarantee.status().ToString());
    auto made = RecordPipeline::Create(settings, sink, std::move(guarantee).value(), counters,
                                       [this](Status failure) { failures.push_back(failure); });
    REQUIRE_MESSAGE(made.ok(), made.status().ToString());
    pipeline = std::move(made).value();
  }

  // At least once does not use the relay's Kafka output; MakeDeliveryGuarantee takes one for
  // exactly once. One that never connects anywhere.
  KafkaOutput* unused_output() {
    if (!output) {
      RelaySettings unused = settings;
      unused.kafka = {{"bootstrap.servers", "127.0.0.1:9"}, {"log_level", "0"}};
      auto made = KafkaOutput::Create(io, unused, [](const DeliveryReport&) {}, {});
      REQUIRE_MESSAGE(made.ok(), made.status().ToString());
      output = std::move(made).value();
    }
    return output.get();
  }

  void Start(const SourceIdentity& server, Lsn slot, Lsn start = Lsn()) {
    pipeline->StreamStarted(StreamStart{server, slot, start, false, std::nullopt});
  }
  Status Begin(uint32_t xid) { return pipeline->Handle(testing::BeginMessage(xid)); }
  Status Row(Lsn lsn, const std::string& table = "outbox", ChangeOp op = ChangeOp::kInsert) {
    return pipeline->Handle(testing::RowMessage(lsn, table, op));
  }
  Status Commit(uint32_t xid, Lsn end) {
    return pipeline->Handle(testing::CommitMessage(xid, end));
  }
  // One source transaction of `rows` rows of public.outbox, ending at `end`.
  void Transaction(uint32_t xid, Lsn first, int rows, Lsn end) {
    REQUIRE(Begin(xid).ok());
    for (int i = 0; i < rows; ++i) REQUIRE(Row(Lsn(first.value() + i)).ok());
    REQUIRE(Commit(xid, end).ok());
  }
  // Kafka's report for the n-th record produced.
  Status Report(size_t n, rd_kafka_resp_err_t error = RD_KAFKA_RESP_ERR_NO_ERROR) {
    REQUIRE(n < sink.produced.size());
    --sink.outstanding;
    DeliveryReport report{sink.produced[n].ticket, error, "record " + std::to_string(n),
                          error ? sink.produced[n].record : Record{}};
    return pipeline->OnDelivery(report);
  }

  RelaySettings settings;
  RelayCounters counters;
  FakeSink sink;
  boost::asio::io_context io;
  std::unique_ptr<KafkaOutput> output;
  std::vector<Status> failures;
  std::unique_ptr<RecordPipeline> pipeline;
};

constexpr Lsn L(uint64_t v) { return Lsn(v); }

}  // namespace

TEST_CASE("a transaction is confirmable once Kafka acknowledged all of its records") {
  Harness h;
  h.Start(kServerA, L(100));
  CHECK(h.pipeline->Confirmable() == L(100));
  h.Transaction(1, L(110), 2, L(200));
  REQUIRE(h.sink.produced.size() == 2);
  CHECK(h.sink.produced[0].record.topic == "shop.public.outbox");
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.Report(1).ok());
  CHECK(h.pipeline->Confirmable() == L(100));  // the first record is still in flight
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(200));
  CHECK(h.counters.acked["shop.public.outbox"] == 2);
}

TEST_CASE("an unacknowledged record holds every later transaction back") {
  Harness h;
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  h.Transaction(2, L(210), 1, L(300));
  REQUIRE(h.Report(1).ok());
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(300));
}

TEST_CASE("reports around a record Kafka holds back each count once, in any order") {
  Harness h;
  h.Start(kServerA, L(100));
  constexpr int kTransactions = 300;
  for (int i = 0; i < kTransactions; ++i) h.Transaction(i + 1, L(110 + 10 * i), 1, L(115 + 10 * i));
  REQUIRE(h.sink.produced.size() == kTransactions);
  // Every record but the first, the later half before the earlier one.
  for (int i = kTransactions / 2; i < kTransactions; ++i) REQUIRE(h.Report(i).ok());
  for (int i = 1; i < kTransactions / 2; ++i) REQUIRE(h.Report(i).ok());
  CHECK(h.counters.acked["shop.public.outbox"] == kTransactions - 1);
  CHECK(h.pipeline->inflight_records() == 1);
  auto waiting = h.pipeline->OldestWaiting();
  REQUIRE(waiting.has_value());
  CHECK(waiting->ticket == h.sink.produced[0].ticket);
  CHECK(waiting->topic == "shop.public.outbox");
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(115 + 10 * (kTransactions - 1)));
  CHECK_FALSE(h.pipeline->OldestWaiting().has_value());
  // A repeated report finds nothing in flight.
  ++h.sink.outstanding;
  REQUIRE(h.Report(7).ok());
  CHECK(h.counters.acked["shop.public.outbox"] == kTransactions);
}

TEST_CASE("nothing of an open source transaction is confirmable before its commit") {
  Harness h;
  h.Start(kServerA, L(100));
  REQUIRE(h.Begin(1).ok());
  REQUIRE(h.Row(L(110)).ok());
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(100));
  // A keepalive inside the transaction does not count either.
  h.pipeline->ServerPosition(L(150));
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.Commit(1, L(200)).ok());
  CHECK(h.pipeline->Confirmable() == L(200));
}

TEST_CASE("an idle stream adopts the keepalive's walEnd, a busy one does not") {
  Harness h;
  h.Start(kServerA, L(100));
  h.pipeline->ServerPosition(L(500));
  CHECK(h.pipeline->Confirmable() == L(500));  // an idle outbox does not pin WAL
  h.Transaction(1, L(510), 1, L(600));
  h.pipeline->ServerPosition(L(700));
  CHECK(h.pipeline->Confirmable() == L(500));  // a record is in flight
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(600));
  h.pipeline->ServerPosition(L(700));
  CHECK(h.pipeline->Confirmable() == L(700));
}

TEST_CASE("rows of tables outside table.include.list are not relayed but their commits count") {
  Harness h;
  h.Start(kServerA, L(100));
  REQUIRE(h.Begin(1).ok());
  REQUIRE(h.Row(L(110), "audit").ok());
  REQUIRE(h.Commit(1, L(200)).ok());
  CHECK(h.sink.produced.empty());
  CHECK(h.pipeline->Confirmable() == L(200));
  CHECK_FALSE(h.pipeline->IncludesTable("public", "audit"));
  CHECK(h.pipeline->IncludesTable("public", "outbox"));
}

TEST_CASE("a refused record stops the relay and is never confirmed (errors.tolerance=none)") {
  Harness h;
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  h.Transaction(2, L(210), 1, L(300));
  Status refused = h.Report(0, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("the row is at LSN 0/6E") != std::string::npos);
  CHECK(refused.message().find("stays confirmed at 0/64") != std::string::npos);
  REQUIRE(h.Report(1).ok());
  CHECK(h.pipeline->Confirmable() == L(100));
  CHECK(h.counters.failed["produce"] == 1);
}

TEST_CASE("a dead letter takes the refused record's place in the ledger") {
  Harness h(R"(,"errors.tolerance":"all","errors.deadletterqueue.topic.name":"dlq")");
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  REQUIRE(h.Report(0, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE).ok());
  REQUIRE(h.sink.produced.size() == 2);
  CHECK(h.sink.produced[1].record.topic == "dlq");
  CHECK(h.sink.produced[1].ticket == h.sink.produced[0].ticket);
  CHECK(h.pipeline->Confirmable() == L(100));  // not before the dead letter is acknowledged
  REQUIRE(h.Report(1).ok());
  CHECK(h.pipeline->Confirmable() == L(200));
  CHECK(h.counters.dead_letters == 1);
  CHECK(h.counters.acked["dlq"] == 1);
}

TEST_CASE("a dead letter Kafka refuses too stops the relay") {
  Harness h(R"(,"errors.tolerance":"all","errors.deadletterqueue.topic.name":"dlq")");
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  REQUIRE(h.Report(0, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE).ok());
  CHECK_FALSE(h.Report(1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED).ok());
  CHECK(h.pipeline->Confirmable() == L(100));
}

TEST_CASE("errors.tolerance=all without a dead-letter topic skips the record and confirms on") {
  Harness h(R"(,"errors.tolerance":"all")");
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  REQUIRE(h.Report(0, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE).ok());
  CHECK(h.pipeline->Confirmable() == L(200));
  CHECK(h.counters.skipped == 1);
}

TEST_CASE("a refusal of the whole topic or broker is never skipped, whatever the tolerance") {
  Harness h(R"(,"errors.tolerance":"all")");
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  CHECK_FALSE(h.Report(0, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED).ok());
  CHECK(h.pipeline->Confirmable() == L(100));
  CHECK(h.counters.skipped == 0);
}

TEST_CASE("a record the producer refuses at once stops the relay before anything after it") {
  Harness h;
  h.Start(kServerA, L(100));
  REQUIRE(h.Begin(1).ok());
  h.sink.refuse = RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
  Status refused = h.Row(L(110));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.message().find("table public.outbox at LSN 0/6E") != std::string::npos);
  CHECK(h.pipeline->Confirmable() == L(100));
}

TEST_CASE("records librdkafka has no room for are held in order and block the stream") {
  Harness h(R"(,"max.queue.size":"100")");
  h.Start(kServerA, L(100));
  h.sink.room = 1;
  h.Transaction(1, L(110), 3, L(200));
  CHECK(h.sink.produced.size() == 1);
  CHECK(h.pipeline->held_records() == 2);
  CHECK(h.pipeline->Backpressured());
  CHECK(h.counters.queue_full == 2);
  REQUIRE(h.Report(0).ok());
  REQUIRE(h.pipeline->SendHeld().ok());
  REQUIRE(h.sink.produced.size() == 2);
  CHECK(h.sink.produced[1].record.source.lsn == L(111));
  CHECK(h.pipeline->holding());
  REQUIRE(h.Report(1).ok());
  REQUIRE(h.pipeline->SendHeld().ok());
  CHECK_FALSE(h.pipeline->holding());
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.Report(2).ok());
  CHECK(h.pipeline->Confirmable() == L(200));
}

TEST_CASE("a record too large for librdkafka's empty queue fails instead of waiting forever") {
  Harness h;
  h.Start(kServerA, L(100));
  h.sink.room = 0;
  REQUIRE(h.Begin(1).ok());
  Status st = h.Row(L(110));
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("queue.buffering.max.kbytes") != std::string::npos);
}

TEST_CASE("max.queue.size records in flight backpressure the stream") {
  Harness h;  // max.queue.size 3
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 2, L(200));
  CHECK_FALSE(h.pipeline->Backpressured());
  h.Transaction(2, L(210), 1, L(300));
  CHECK(h.pipeline->Backpressured());
  REQUIRE(h.Report(0).ok());
  CHECK_FALSE(h.pipeline->Backpressured());
}

TEST_CASE("another server rebases the ledger on its slot: no position learnt before is confirmed") {
  Harness h;
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(900));
  h.Start(kServerB, L(150));  // a promoted standby whose slot is behind
  CHECK(h.pipeline->Confirmable() == L(150));
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(150));  // not 0/900: that was the old server's WAL
  CHECK(h.pipeline->FlushPosition() == L(150));
  h.Transaction(2, L(160), 1, L(250));
  REQUIRE(h.Report(1).ok());
  CHECK(h.pipeline->Confirmable() == L(250));
}

TEST_CASE("a reconnect to the same server keeps records in flight and replays the open "
          "transaction") {
  Harness h;
  h.Start(kServerA, L(100));
  REQUIRE(h.Begin(1).ok());
  REQUIRE(h.Row(L(110)).ok());  // the connection breaks here
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));  // the server sends the transaction again
  REQUIRE(h.sink.produced.size() == 2);
  REQUIRE(h.Report(1).ok());
  CHECK(h.pipeline->Confirmable() == L(100));  // the first copy is still in flight
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(200));
}

TEST_CASE("a slot moved past the relay's position by someone else: the relay follows it") {
  Harness h;
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  h.Start(kServerA, L(800));
  CHECK(h.pipeline->Confirmable() == L(800));
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(800));
}

TEST_CASE("the flush position is never below the slot's position read at connect") {
  Harness h;
  h.Start(kServerA, L(500));
  CHECK(h.pipeline->FlushPosition() == L(500));
  h.pipeline->Confirmed(h.pipeline->FlushPosition());
  CHECK(h.pipeline->last_confirmed() == L(500));
  // A restart that starts past the slot (the guarantee skips what Kafka holds already).
  Harness later;
  later.Start(kServerA, L(500), L(700));
  CHECK(later.pipeline->Confirmable() == L(700));
  CHECK(later.pipeline->FlushPosition() == L(700));
}

TEST_CASE("a slot created again is reported with the range at risk and rebases the ledger") {
  Harness h;
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  REQUIRE(h.Report(0).ok());
  h.pipeline->Confirmed(h.pipeline->FlushPosition());
  h.pipeline->StreamStarted(StreamStart{kServerA, L(50), Lsn(), true, std::nullopt});
  CHECK(h.counters.slots_recreated == 1);
  CHECK(h.pipeline->Confirmable() == L(50));
}

TEST_CASE("a delete is followed by its tombstone under the same commit") {
  Harness h;
  h.Start(kServerA, L(100));
  REQUIRE(h.Begin(1).ok());
  REQUIRE(h.Row(L(110), "outbox", ChangeOp::kDelete).ok());
  REQUIRE(h.Commit(1, L(200)).ok());
  REQUIRE(h.sink.produced.size() == 2);
  CHECK_FALSE(h.sink.produced[1].record.value.has_value());
  REQUIRE(h.Report(0).ok());
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.Report(1).ok());
  CHECK(h.pipeline->Confirmable() == L(200));
}

TEST_CASE("records purged by the relay's own stop are not confirmed and stop nothing") {
  Harness h;
  h.Start(kServerA, L(100));
  h.Transaction(1, L(110), 1, L(200));
  h.pipeline->Stopping();
  CHECK(h.Report(0, RD_KAFKA_RESP_ERR__PURGE_QUEUE).ok());
  CHECK(h.pipeline->Confirmable() == L(100));
  CHECK(h.failures.empty());
}

TEST_CASE("logical decoding messages: a prefix outside message.prefix.include.list is filtered "
          "before the transactional check, so another consumer's messages draw no warning") {
  Harness h(R"(,"message.prefix.include.list":"outbox")");
  h.Start(kServerA, Lsn(100));
  auto message = [](bool transactional, const std::string& prefix) {
    DecodedMessage m;
    m.kind = MessageKind::kMessage;
    m.message.lsn = Lsn(150);
    m.message.transactional = transactional;
    m.message.prefix = prefix;
    m.message.content = "{}";
    return m;
  };
  REQUIRE(h.pipeline->Handle(message(false, "audit")).ok());
  REQUIRE(h.pipeline->Handle(message(true, "audit")).ok());
  CHECK(h.counters.logical_messages["filtered"] == 2);
  CHECK(h.counters.logical_messages["non_transactional"] == 0);
  // An included prefix written outside a transaction is still refused, and counted so.
  REQUIRE(h.pipeline->Handle(message(false, "outbox")).ok());
  CHECK(h.counters.logical_messages["non_transactional"] == 1);
  CHECK(h.sink.produced.empty());
}
