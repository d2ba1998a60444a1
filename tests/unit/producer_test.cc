// KafkaProducer against librdkafka's in-process mock cluster: Produce never waits for room in a
// full queue, and an exception from a callback handler never unwinds through librdkafka; and
// KafkaOutput's two transactional producers taking turns.
#include <doctest/doctest.h>
#include <poll.h>

#include <utility>

#include <boost/asio.hpp>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "delivery/kafka_output.h"
#include "delivery/kafka_transactions.h"
#include "delivery/producer.h"
#include "devtools/mock_kafka.h"

using namespace walrelay;
using namespace std::chrono_literals;

namespace {

Record MakeRecord(const std::string& topic, const std::string& value) {
  Record r;
  r.topic = topic;
  r.key = "k";
  r.value = value;
  return r;
}

// Serves delivery reports until `done` or the deadline.
template <typename Done>
bool PollUntil(KafkaProducer& producer, Done done, std::chrono::seconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    producer.Poll();
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

TEST_CASE("an exception thrown by the delivery handler stops the producer as an internal error") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  int reports = 0;
  int failures = 0;
  Status reported;
  auto producer = KafkaProducer::Create(
      {{"bootstrap.servers", (*kafka)->bootstrap_servers()}},
      [&](const DeliveryReport&) {
        ++reports;
        throw std::runtime_error("handler broke");
      },
      [&](const Status& failure) {
        ++failures;
        reported = failure;
      });
  REQUIRE(producer.ok());
  REQUIRE((*producer)->Produce(MakeRecord("cb", "one"), 1).ok());
  // Without the catch, the exception would unwind through librdkafka's C frames and end the
  // process here.
  REQUIRE(PollUntil(**producer, [&] { return failures > 0; }));
  CHECK(reports == 1);
  CHECK(failures == 1);
  CHECK(reported.code() == ErrorCode::kInternal);
  CHECK(reported.message().find("handler broke") != std::string::npos);
  CHECK(reported.message().find("delivery report") != std::string::npos);
  CHECK((*producer)->failure().code() == ErrorCode::kInternal);
}

TEST_CASE("an exception thrown by the failure handler for a fatal error is caught") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic("fatal", 1, 1).ok());
  int acked = 0;
  int calls = 0;
  auto producer = KafkaProducer::Create(
      {{"bootstrap.servers", (*kafka)->bootstrap_servers()}, {"enable.idempotence", "true"}},
      [&](const DeliveryReport& r) { acked += r.error == RD_KAFKA_RESP_ERR_NO_ERROR; },
      [&](const Status&) {
        ++calls;
        throw std::logic_error("failure handler broke");
      });
  REQUIRE(producer.ok());
  REQUIRE((*producer)->Produce(MakeRecord("fatal", "one"), 1).ok());
  REQUIRE(PollUntil(**producer, [&] { return acked == 1; }));
  // An idempotent producer's batch answered with OUT_OF_ORDER_SEQUENCE_NUMBER after earlier
  // records were acknowledged is a fatal error, served by the error callback.
  (*kafka)->PushProduceErrors(1, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
  REQUIRE((*producer)->Produce(MakeRecord("fatal", "two"), 2).ok());
  REQUIRE((*producer)->Produce(MakeRecord("fatal", "three"), 3).ok());
  REQUIRE(PollUntil(**producer, [&] { return calls > 0; }));
  (*producer)->Poll();
  CHECK(calls == 1);  // reported once; the exception did not escape
  CHECK_FALSE((*producer)->failure().ok());
}

TEST_CASE("a full librdkafka queue: Produce returns QUEUE_FULL at once instead of waiting") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->SetBrokerDown(1).ok());
  int acked = 0;
  auto producer = KafkaProducer::Create(
      {{"bootstrap.servers", (*kafka)->bootstrap_servers()}, {"queue.buffering.max.messages", "3"}},
      [&](const DeliveryReport& r) { acked += r.error == RD_KAFKA_RESP_ERR_NO_ERROR; });
  REQUIRE(producer.ok());
  for (uint64_t t = 0; t < 3; ++t) REQUIRE((*producer)->Produce(MakeRecord("full", "v"), t).ok());
  rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
  const auto start = std::chrono::steady_clock::now();
  Status st = (*producer)->Produce(MakeRecord("full", "v"), 3, &code);
  CHECK(std::chrono::steady_clock::now() - start < 50ms);
  CHECK_FALSE(st.ok());
  CHECK(code == RD_KAFKA_RESP_ERR__QUEUE_FULL);
  REQUIRE((*kafka)->SetBrokerUp(1).ok());
  REQUIRE(PollUntil(
      **producer, [&] { return acked == 3; }, 20s));
  CHECK((*producer)->Produce(MakeRecord("full", "v"), 3).ok());
  REQUIRE(PollUntil(
      **producer, [&] { return acked == 4; }, 20s));
}

TEST_CASE("exactly once: each Kafka transaction goes to the other of two producers") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic("turns", 1, 1).ok());
  RelaySettings settings;
  settings.exactly_once.support = ExactlyOnceSupport::kRequired;
  settings.exactly_once.transactional_id = "walrelay-turns";
  settings.kafka = {{"bootstrap.servers", (*kafka)->bootstrap_servers()},
                    {"transactional.id", "walrelay-turns"}};
  boost::asio::io_context io;
  std::vector<uint64_t> acked;
  auto output = KafkaOutput::Create(io, settings,
                                    [&](const DeliveryReport& r) {
                                      if (r.error == RD_KAFKA_RESP_ERR_NO_ERROR)
                                        acked.push_back(r.ticket);
                                    },
                                    {});
  REQUIRE_MESSAGE(output.ok(), output.status().ToString());
  KafkaOutput& out = **output;
  REQUIRE(out.producer_count() == 2);
  CHECK(out.transactional_id(0) == "walrelay-turns");
  CHECK(out.transactional_id(1) == "walrelay-turns.1");

  auto transactions = MakeKafkaTransactions(out);
  TxnStatus init = transactions->Init(10s);
  REQUIRE_MESSAGE(init.ok(), init.status.ToString());
  std::vector<rd_kafka_t*> holders;
  for (uint64_t i = 0; i < 4; ++i) {
    // Begins while the transaction before it commits in the background.
    REQUIRE(transactions->Begin().ok());
    holders.push_back(out.active().native_handle());
    REQUIRE(out.Produce(MakeRecord("turns", "committed-" + std::to_string(i)), i).ok());
    TxnStatus started = transactions->StartCommit(10s, "committing");
    REQUIRE_MESSAGE(started.ok(), started.status.ToString());
    // Its record was acknowledged first; the report waits for the next Poll(), on the
    // caller's thread but never nested in the call that commits.
    CHECK(acked.size() == i);
    CHECK(out.Poll() >= 1);
    CHECK(acked.size() == i + 1);
  }
  TxnStatus committed = transactions->FinishCommit();
  REQUIRE_MESSAGE(committed.ok(), committed.status.ToString());
  CHECK(transactions->CommitFinished());
  CHECK(holders[0] != holders[1]);
  CHECK(holders[2] == holders[0]);
  CHECK(holders[3] == holders[1]);
  CHECK(acked == std::vector<uint64_t>{0, 1, 2, 3});

  // An abort while the transaction before commits waits for that commit, then aborts; it does
  // not change the order of turns, and the next one commits.
  REQUIRE(transactions->Begin().ok());
  CHECK(out.active().native_handle() == holders[0]);
  REQUIRE(out.Produce(MakeRecord("turns", "committed-4"), 4).ok());
  REQUIRE(transactions->StartCommit(10s, "committing").ok());
  REQUIRE(transactions->Begin().ok());
  CHECK(out.active().native_handle() == holders[1]);
  REQUIRE(out.Produce(MakeRecord("turns", "aborted"), 5).ok());
  REQUIRE(transactions->Abort(10s).ok());
  CHECK(transactions->FinishCommit().ok());  // nothing left to finish
  REQUIRE(transactions->Begin().ok());
  CHECK(out.active().native_handle() == holders[0]);
  REQUIRE(out.Produce(MakeRecord("turns", "committed-6"), 6).ok());
  REQUIRE(transactions->StartCommit(10s, "committing").ok());
  REQUIRE(transactions->FinishCommit().ok());
  CHECK(out.OutstandingMessages() == 0);
}

TEST_CASE("callbacks a call on another thread serves wait for the producer's next Poll") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic("deferred", 1, 1).ok());
  std::vector<std::thread::id> served_on;
  auto producer = KafkaProducer::Create({{"bootstrap.servers", (*kafka)->bootstrap_servers()}},
                                        [&](const DeliveryReport& r) {
                                          CHECK(r.error == RD_KAFKA_RESP_ERR_NO_ERROR);
                                          served_on.push_back(std::this_thread::get_id());
                                        });
  REQUIRE(producer.ok());
  REQUIRE((*producer)->Produce(MakeRecord("deferred", "v"), 1).ok());
  rd_kafka_resp_err_t flushed = RD_KAFKA_RESP_ERR_NO_ERROR;
  std::thread other([&] {
    KafkaProducer::DeferCallbacks defer;
    // Without the scope, flush would serve the report here.
    flushed = rd_kafka_flush((*producer)->native_handle(), 10000);
  });
  other.join();
  CHECK(flushed == RD_KAFKA_RESP_ERR_NO_ERROR);
  CHECK(served_on.empty());
  // The loop is woken for it.
  pollfd wake{(*producer)->event_fd(), POLLIN, 0};
  CHECK(poll(&wake, 1, 1000) == 1);
  (*producer)->ClearEvent();
  CHECK((*producer)->Poll() == 1);  // the kept report
  REQUIRE(served_on.size() == 1);
  CHECK(served_on[0] == std::this_thread::get_id());
}

TEST_CASE("exactly once: the offset record waits for room in a full queue instead of failing the "
          "transaction") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic("roomy", 1, 1).ok());
  REQUIRE((*kafka)->CreateTopic("offsets", 1, 1).ok());
  RelaySettings settings;
  settings.exactly_once.support = ExactlyOnceSupport::kRequired;
  settings.exactly_once.transactional_id = "walrelay-roomy";
  // Room for one record: the transaction's record fills the queue.
  settings.kafka = {{"bootstrap.servers", (*kafka)->bootstrap_servers()},
                    {"transactional.id", "walrelay-roomy"},
                    {"queue.buffering.max.messages", "1"},
                    {"linger.ms", "50"}};
  boost::asio::io_context io;
  std::vector<uint64_t> acked;
  auto output = KafkaOutput::Create(
      io, settings, [&](const DeliveryReport& r) { acked.push_back(r.ticket); }, {});
  REQUIRE_MESSAGE(output.ok(), output.status().ToString());
  KafkaOutput& out = **output;
  auto transactions = MakeKafkaTransactions(out);
  REQUIRE(transactions->Init(10s).ok());
  REQUIRE(transactions->Begin().ok());
  REQUIRE(out.Produce(MakeRecord("roomy", "record"), 1).ok());
  rd_kafka_resp_err_t full = RD_KAFKA_RESP_ERR_NO_ERROR;
  CHECK_FALSE(out.Produce(MakeRecord("roomy", "one too many"), 2, &full).ok());
  REQUIRE(full == RD_KAFKA_RESP_ERR__QUEUE_FULL);
  TxnStatus sent = transactions->SendOffset(MakeRecord("offsets", "position"));
  CHECK_MESSAGE(sent.ok(), sent.status.ToString());
  CHECK(acked.empty());  // the record's report waits for the loop
  REQUIRE(transactions->StartCommit(10s, "committing").ok());
  TxnStatus committed = transactions->FinishCommit();
  CHECK_MESSAGE(committed.ok(), committed.status.ToString());
  CHECK(out.Poll() >= 1);
  CHECK(acked == std::vector<uint64_t>{1});
}

TEST_CASE("exactly once: an Init that fails half-way (a coordinator down) is resumed only with "
          "new producers") {
  auto kafka = devtools::MockKafka::Start(2);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic("halfway", 1, 1).ok());
  RelaySettings settings;
  settings.exactly_once.support = ExactlyOnceSupport::kRequired;
  settings.exactly_once.transactional_id = "walrelay-halfway";
  settings.kafka = {{"bootstrap.servers", (*kafka)->bootstrap_servers()},
                    {"transactional.id", "walrelay-halfway"}};
  boost::asio::io_context io;
  auto output = KafkaOutput::Create(io, settings, [](const DeliveryReport&) {}, {});
  REQUIRE_MESSAGE(output.ok(), output.status().ToString());
  KafkaOutput& out = **output;
  auto transactions = MakeKafkaTransactions(out);
  // The second producer's coordinator is a broker that is down: the first producer is
  // initialised, the second is not. The first one's coordinator is pinned to the broker that
  // stays up (the mock cluster would otherwise pick either, and a first producer whose
  // coordinator is down is merely timed out, which librdkafka lets Init retry), and it gets
  // time enough on a loaded machine.
  rd_kafka_mock_cluster_t* cluster = (*kafka)->cluster();
  rd_kafka_mock_coordinator_set(cluster, "transaction", out.transactional_id(0).c_str(), 1);
  rd_kafka_mock_coordinator_set(cluster, "transaction", out.transactional_id(1).c_str(), 2);
  rd_kafka_mock_broker_set_down(cluster, 2);
  TxnStatus half = transactions->Init(5s);
  CHECK_FALSE(half.ok());
  MESSAGE("initialising with the second coordinator down: " << half.status.ToString());
  rd_kafka_mock_broker_set_up(cluster, 2);
  // librdkafka initialises a producer once: the first one refuses to be initialised again.
  TxnStatus again = transactions->Init(10s);
  CHECK_FALSE(again.ok());
  MESSAGE("initialising again without new producers: " << again.status.ToString());
  // New producers from the same properties are initialised, and a transaction commits.
  REQUIRE(transactions->Renew().ok());
  CHECK_FALSE(transactions->NeedsRenewal());
  TxnStatus fresh = transactions->Init(10s);
  REQUIRE_MESSAGE(fresh.ok(), fresh.status.ToString());
  REQUIRE(transactions->Begin().ok());
  REQUIRE(out.Produce(MakeRecord("halfway", "after renewal"), 1).ok());
  REQUIRE(transactions->StartCommit(10s, "committing").ok());
  TxnStatus committed = transactions->FinishCommit();
  CHECK_MESSAGE(committed.ok(), committed.status.ToString());
}
