// Shared pieces of the idempotent-consumer tests: the relay tests' PostgreSQL and mock cluster
// with the keys table (docs/consumer.sql) and an `effects` table handlers write to, a producer
// for test records, and a consumer run on its own thread.
#pragma once

#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../integration/relay_fixture.h"
#include "common/rdkafka_handles.h"
#include "walrelay/consumer.h"

namespace walrelay::testing {

using namespace std::chrono_literals;
namespace wc = walrelay::consumer;

// Polls `cond` every 20 ms until it holds or `timeout` passes; returns its last value.
inline bool WaitUntil(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// A plain librdkafka producer for the records the consumers read.
class TestProducer {
 public:
  explicit TestProducer(const std::string& bootstrap) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char err[512];
    for (auto [k, v] : {std::pair{"bootstrap.servers", bootstrap.c_str()}, {"linger.ms", "0"}}) {
      REQUIRE(rd_kafka_conf_set(conf, k, v, err, sizeof(err)) == RD_KAFKA_CONF_OK);
    }
    rk_.reset(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err)));
    REQUIRE_MESSAGE(rk_ != nullptr, err);
  }
  TestProducer(const TestProducer&) = delete;
  TestProducer& operator=(const TestProducer&) = delete;

  // Produces one record and waits until the cluster has it. `id` nullopt: no id header.
  void Send(const std::string& topic, const std::optional<std::string>& id,
            const std::string& value, int32_t partition = 0, const std::string& key = "k") {
    rd_kafka_headers_t* hdrs = rd_kafka_headers_new(1);
    if (id) rd_kafka_header_add(hdrs, "id", -1, id->data(), static_cast<ssize_t>(id->size()));
    void* value_data = const_cast<char*>(value.data());
    const void* key_data = key.data();
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        rk_.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key_data, key.size()),
        RD_KAFKA_V_VALUE(value_data, value.size()), RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
    REQUIRE_MESSAGE(err == RD_KAFKA_RESP_ERR_NO_ERROR, rd_kafka_err2str(err));
    REQUIRE(rd_kafka_flush(rk_.get(), 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  }

 private:
  KafkaHandlePtr rk_;
};

// A Consumer running on its own thread until Stop() or destruction.
class RunningConsumer {
 public:
  RunningConsumer(wc::ConsumerOptions options, wc::IdempotencyStore& store, wc::Handler handler) {
    auto c = wc::Consumer::Create(std::move(options), store, std::move(handler));
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    consumer_ = std::move(c).value();
    thread_ = std::thread([this] { status_ = consumer_->Run(); });
  }
  ~RunningConsumer() { (void)Stop(); }
  RunningConsumer(const RunningConsumer&) = delete;
  RunningConsumer& operator=(const RunningConsumer&) = delete;

  wc::Consumer& consumer() { return *consumer_; }
  wc::ConsumerStats stats() const { return consumer_->stats(); }
  // Stops and joins; returns what Run() returned.
  Status Stop() {
    if (thread_.joinable()) {
      consumer_->Stop();
      thread_.join();
    }
    return status_;
  }

 private:
  std::unique_ptr<wc::Consumer> consumer_;
  std::thread thread_;
  Status status_;
};

// The relay tests' PostgreSQL (outbox table included) and mock cluster, plus the keys table.
class ConsumerFixture : public RelayFixture {
 public:
  ConsumerFixture() {
    const std::string sql =
        devtools::ReadFile(std::string(WALRELAY_SOURCE_DIR) + "/docs/consumer.sql");
    REQUIRE(!sql.empty());
    Exec(sql);
    Exec("CREATE TABLE effects (key text NOT NULL, note text, at timestamptz DEFAULT "
         "clock_timestamp())");
    producer_ = std::make_unique<TestProducer>(kafka().bootstrap_servers());
  }

  TestProducer& producer() { return *producer_; }
  int Count(const std::string& sql) { return std::stoi(Value(sql)); }

  std::unique_ptr<wc::PostgresStore> Store() {
    wc::PostgresStoreOptions o;
    o.conninfo = pg().ConnInfo();
    auto s = wc::PostgresStore::Connect(o);
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    return std::move(s).value();
  }

  // Options for a consumer of `topic` with quick backoff and group timings.
  wc::ConsumerOptions Options(const std::string& name, const std::string& topic,
                              const std::string& group = "") {
    wc::ConsumerOptions o;
    o.name = name;
    o.group_id = group;
    o.bootstrap_servers = kafka().bootstrap_servers();
    o.topics = {topic};
    o.backoff_initial = 20ms;
    o.backoff_max = 100ms;
    o.store_retry_backoff = 100ms;
    o.kafka_properties = {{"session.timeout.ms", "6000"},
                          {"heartbeat.interval.ms", "500"},
                          {"fetch.wait.max.ms", "50"},
                          {"topic.metadata.refresh.interval.ms", "500"}};
    const auto start = std::chrono::steady_clock::now();
    o.log = [name, start](wc::LogLevel level, const std::string& line) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      if (level != wc::LogLevel::kDebug) MESSAGE(ms.count() << " ms " << name << ": " << line);
    };
    return o;
  }

  // A handler that records one row in `effects` per run, in the store's transaction.
  static wc::Handler EffectHandler(std::chrono::milliseconds hold = 0ms) {
    return [hold](wc::HandlerContext& ctx) {
      auto r = ctx.Exec("INSERT INTO effects (key, note) VALUES ($1, $2)",
                        {ctx.idempotency_key(), ctx.message().value});
      if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
      if (hold.count() > 0) std::this_thread::sleep_for(hold);
      return wc::HandlerResult::Done("effect for " + ctx.idempotency_key());
    };
  }

 private:
  std::unique_ptr<TestProducer> producer_;
};

inline std::string HeaderOf(const devtools::ConsumedRecord& r, const std::string& name) {
  for (const auto& h : r.headers)
    if (h.key == name) return h.value.value_or("(null)");
  return "(missing)";
}

}  // namespace walrelay::testing
