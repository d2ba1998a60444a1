// consumer_bench: what the idempotent consumer costs per record. One consumer on one partition
// of a real Apache Kafka broker drains a backlog of N records whose handler writes one row to
// PostgreSQL, in turn:
//   plain           a librdkafka consumer with the same handler and no store (auto commit,
//                   the row written on its own connection): the baseline;
//   plain-commit    the same, committing each offset synchronously: the Kafka commit's cost;
//   postgres        Consumer + PostgresStore, the row written in the store's transaction,
//                   offsets committed per record (the default);
//   postgres-500ms  the same with commit_interval = 500 ms;
//   redis           Consumer + RedisStore, the row written on its own connection;
//   redis-500ms     the same with commit_interval = 500 ms.
// Each mode reads its own copy of the records (its own topic), all on the same broker,
// PostgreSQL and redis-server, started here on loopback. Reported per mode: records/s from the
// first record handled to the last, and the handling time per record (the interval between
// consecutive records finished, which covers poll, store, handler and commit), p50/p99/max.
//
//   bash scripts/fetch-kafka.sh && build/bench/consumer_bench [records] [out.csv]
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "consumer/pg_exec.h"
#include "devtools/kafka_broker.h"
#include "devtools/pg_sandbox.h"
#include "devtools/redis_sandbox.h"
#include "walrelay/consumer.h"

namespace wc = walrelay::consumer;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "consumer_bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Must(walrelay::Result<T> r, const char* what) {
  if (!r.ok()) Die(std::string(what) + ": " + r.status().ToString());
  return std::move(r).value();
}

void Must(const walrelay::Status& st, const char* what) {
  if (!st.ok()) Die(std::string(what) + ": " + st.ToString());
}

// N records with unique id headers and an order-like JSON value, acknowledged by the broker.
void Produce(const std::string& bootstrap, const std::string& topic, int records) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (auto [k, v] : {std::pair{"bootstrap.servers", bootstrap.c_str()}, {"acks", "all"},
                      {"linger.ms", "20"}, {"enable.idempotence", "true"}})
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) Die(err);
  std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)> rk(
      rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err), &rd_kafka_destroy);
  if (!rk) Die(err);
  for (int i = 0; i < records; ++i) {
    char id[40];
    std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i);
    const std::string value = "{\"orderId\": \"order-" + std::to_string(i) +
                              "\", \"amount\": " + std::to_string(i % 100 + 1) + ".5}";
    rd_kafka_headers_t* headers = rd_kafka_headers_new(1);
    rd_kafka_header_add(headers, "id", -1, id, -1);
    while (true) {
      const rd_kafka_resp_err_t e = rd_kafka_producev(
          rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
          RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) Die(rd_kafka_err2str(e));
      rd_kafka_poll(rk.get(), 10);
    }
  }
  if (rd_kafka_flush(rk.get(), 60000) != RD_KAFKA_RESP_ERR_NO_ERROR) Die("flush timed out");
}

// Timestamps of records finished, in order.
struct Timeline {
  std::vector<Clock::time_point> finished;
  void Reserve(int n) { finished.reserve(static_cast<size_t>(n)); }
  void Mark() { finished.push_back(Clock::now()); }
};

struct Result {
  std::string mode;
  int records = 0;
  double records_per_second = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

Result Summarise(const std::string& mode, const Timeline& t) {
  Result r;
  r.mode = mode;
  r.records = static_cast<int>(t.finished.size());
  if (t.finished.size() < 2) return r;
  std::vector<double> gaps;
  for (size_t i = 1; i < t.finished.size(); ++i)
    gaps.push_back(std::chrono::duration<double, std::milli>(t.finished[i] - t.finished[i - 1]).count());
  const double seconds =
      std::chrono::duration<double>(t.finished.back() - t.finished.front()).count();
  r.records_per_second = static_cast<double>(gaps.size()) / seconds;
  std::sort(gaps.begin(), gaps.end());
  r.p50_ms = gaps[gaps.size() / 2];
  r.p99_ms = gaps[std::min(gaps.size() - 1, gaps.size() * 99 / 100)];
  r.max_ms = gaps.back();
  return r;
}

constexpr const char* kInsert = "INSERT INTO effects (key, note) VALUES ($1, $2)";

// The baseline: a plain librdkafka consumer, auto commit, the row on its own connection.
Timeline RunPlain(const std::string& bootstrap, const std::string& topic, int records,
                  PGconn* effects, bool commit_each = false) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  const std::string group = "plain-" + topic;
  for (auto [k, v] : {std::pair{"bootstrap.servers", bootstrap.c_str()}, {"group.id", group.c_str()},
                      {"auto.offset.reset", "earliest"}, {"fetch.wait.max.ms", "50"}})
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) Die(err);
  std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)> rk(
      rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err), &rd_kafka_destroy);
  if (!rk) Die(err);
  rd_kafka_poll_set_consumer(rk.get());
  rd_kafka_topic_partition_list_t* topics = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(topics, topic.c_str(), RD_KAFKA_PARTITION_UA);
  rd_kafka_subscribe(rk.get(), topics);
  rd_kafka_topic_partition_list_destroy(topics);
  Timeline t;
  t.Reserve(records);
  while (static_cast<int>(t.finished.size()) < records) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const void* id = nullptr;
      size_t id_size = 0;
      rd_kafka_headers_t* headers = nullptr;
      rd_kafka_message_headers(m, &headers);
      if (headers) rd_kafka_header_get_last(headers, "id", &id, &id_size);
      const std::string key(static_cast<const char*>(id), id_size);
      const std::string value(static_cast<const char*>(m->payload), m->len);
      Must(wc::ExecPg(effects, kInsert, {key, value}).status(), "plain insert");
      if (commit_each) rd_kafka_commit_message(rk.get(), m, 0);
      t.Mark();
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk.get());
  return t;
}

// The idempotent consumer with `store`; `in_store_transaction` writes the row through ctx.
Timeline RunConsumer(const std::string& bootstrap, const std::string& topic, int records,
                     wc::IdempotencyStore& store, bool in_store_transaction, PGconn* effects,
                     std::chrono::milliseconds commit_interval) {
  wc::ConsumerOptions o;
  o.name = "bench-" + topic;
  o.bootstrap_servers = bootstrap;
  o.topics = {topic};
  o.commit_interval = commit_interval;
  o.kafka_properties = {{"fetch.wait.max.ms", "50"}};
  o.log = [](wc::LogLevel level, const std::string& line) {
    if (level >= wc::LogLevel::kWarn) std::fprintf(stderr, "consumer: %s\n", line.c_str());
  };
  Timeline t;
  t.Reserve(records);
  std::unique_ptr<wc::Consumer> consumer;
  o.on_processed = [&](const wc::Message&, const wc::RecordOutcome&) {
    t.Mark();
    if (static_cast<int>(t.finished.size()) == records) consumer->Stop();
  };
  auto handler = [in_store_transaction, effects](wc::HandlerContext& ctx) {
    const wc::SqlParams params = {ctx.idempotency_key(), ctx.message().value};
    if (in_store_transaction) {
      auto r = ctx.Exec(kInsert, params);
      if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
    } else {
      auto r = wc::ExecPg(effects, kInsert, params);
      if (!r.ok()) return wc::HandlerResult::Retry("effects", r.status().message());
    }
    return wc::HandlerResult::Done();
  };
  consumer = Must(wc::Consumer::Create(o, store, handler), "consumer");
  Must(consumer->Run(), "consumer run");
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int records = argc > 1 ? std::atoi(argv[1]) : 20000;
  const std::string csv = argc > 2 ? argv[2] : "";

  auto pg = Must(walrelay::devtools::PgSandbox::Start(), "PostgreSQL");
  auto redis = Must(walrelay::devtools::RedisSandbox::Start(), "redis-server");
  auto broker = Must(walrelay::devtools::KafkaBroker::Start(), "Apache Kafka");
  std::fprintf(stderr, "PostgreSQL, redis-server and Apache Kafka %s up; %d records per mode\n",
               walrelay::devtools::KafkaBroker::Version().c_str(), records);
  std::ifstream keys_sql(std::string(WALRELAY_SOURCE_DIR) + "/docs/consumer.sql");
  const std::string ddl((std::istreambuf_iterator<char>(keys_sql)), std::istreambuf_iterator<char>());
  Must(pg->Exec(ddl), "keys table");
  Must(pg->Exec("CREATE TABLE effects (key text NOT NULL, note text)"), "effects table");
  auto effects = Must(wc::ConnectPg(pg->ConnInfo(), "effects"), "effects connection");

  wc::PostgresStoreOptions pg_options;
  pg_options.conninfo = pg->ConnInfo();
  auto pg_store = Must(wc::PostgresStore::Connect(pg_options), "PostgresStore");
  wc::RedisStoreOptions redis_options;
  redis_options.port = redis->port();
  auto redis_store = Must(wc::RedisStore::Connect(redis_options), "RedisStore");

  struct Mode {
    std::string name;
    std::function<Timeline(const std::string& topic)> run;
  };
  const std::string bootstrap = broker->bootstrap_servers();
  const std::vector<Mode> modes = {
      {"plain", [&](const std::string& t) { return RunPlain(bootstrap, t, records, effects.get()); }},
      {"plain-commit",
       [&](const std::string& t) { return RunPlain(bootstrap, t, records, effects.get(), true); }},
      {"postgres", [&](const std::string& t) {
         return RunConsumer(bootstrap, t, records, *pg_store, true, nullptr, std::chrono::milliseconds(0));
       }},
      {"postgres-500ms", [&](const std::string& t) {
         return RunConsumer(bootstrap, t, records, *pg_store, true, nullptr, std::chrono::milliseconds(500));
       }},
      {"redis", [&](const std::string& t) {
         return RunConsumer(bootstrap, t, records, *redis_store, false, effects.get(),
                            std::chrono::milliseconds(0));
       }},
      {"redis-500ms", [&](const std::string& t) {
         return RunConsumer(bootstrap, t, records, *redis_store, false, effects.get(),
                            std::chrono::milliseconds(500));
       }},
  };
  // Warm-up: the broker's JIT and the first group join are not timed.
  Must(broker->CreateTopic("bench.warmup", 1, 1), "topic");
  Produce(bootstrap, "bench.warmup", 2000);
  (void)RunPlain(bootstrap, "bench.warmup", 2000, effects.get());

  std::vector<Result> results;
  for (const Mode& mode : modes) {
    const std::string topic = "bench." + mode.name;
    Must(broker->CreateTopic(topic, 1, 1), "topic");
    Produce(bootstrap, topic, records);
    results.push_back(Summarise(mode.name, mode.run(topic)));
    const Result& r = results.back();
    std::fprintf(stderr, "%-15s %6d records  %8.0f records/s  p50 %.3f ms  p99 %.3f ms  max %.1f ms\n",
                 r.mode.c_str(), r.records, r.records_per_second, r.p50_ms, r.p99_ms, r.max_ms);
  }
  std::printf("mode,records,records_per_s,p50_ms,p99_ms,max_ms\n");
  for (const Result& r : results)
    std::printf("%s,%d,%.0f,%.3f,%.3f,%.1f\n", r.mode.c_str(), r.records, r.records_per_second,
                r.p50_ms, r.p99_ms, r.max_ms);
  if (!csv.empty()) {
    std::ofstream out(csv);
    out << "mode,records,records_per_s,p50_ms,p99_ms,max_ms\n";
    for (const Result& r : results) {
      char line[200];
      std::snprintf(line, sizeof line, "%s,%d,%.0f,%.3f,%.3f,%.1f\n", r.mode.c_str(), r.records,
                    r.records_per_second, r.p50_ms, r.p99_ms, r.max_ms);
      out << line;
    }
  }
  return 0;
}
