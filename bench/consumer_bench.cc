// consumer_bench: what the idempotent consumer costs per record. One consumer on one partition
// of a real Apache Kafka broker drains a backlog of N records whose handler writes one row to
// PostgreSQL, in turn:
//   plain           a librdkafka consumer with the same handler and no store (auto commit,
//                   the row written on its own connection): the baseline;
//   plain-commit    the same, committing each offset synchronously: the Kafka commit's cost;
//   postgres        Consumer + PostgresStore with the default options (batches of up to 500,
//                   offsets committed per batch), the row written in the store's transaction;
//   postgres-batch1 the same with max_batch = 1: a record at a time, as before batching;
//   redis           Consumer + RedisStore, defaults, the row written on its own connection;
//   redis-batch1    the same with max_batch = 1;
//   dynamodb        Consumer + DynamoStore, defaults, against dynalite (a DynamoDB-API server
//                   on loopback, scripts/install-deps.sh installs it; left out when missing),
//                   the row written on its own connection.
// Each mode reads its own copy of the records (its own topic), all on the same broker,
// PostgreSQL and redis-server, started here on loopback; the modes take turns for three rounds
// (WALRELAY_BENCH_ROUNDS) and each reports its median round. Reported per mode: records/s from the
// first record handled to the last, and the interval between consecutive records finished
// (poll, store, handler and commit; with batches, records finish in bursts), p50/p99/max.
//
// Then the latency at a steady 2,000 records/s (rows plain@2000, postgres@2000, redis@2000,
// dynamodb@2000):
// a producer sends R records/s for a few seconds while the consumer keeps up; p50/p99/max are
// the time from the send to the record finished (store modes: after the store recorded its
// outcome), and added_p99_ms is a store mode's p99 minus plain@2000's, what the store adds.
//
//   bash scripts/fetch-kafka.sh && build/bench/consumer_bench [records] [out.csv] [rate]
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/rdkafka_handles.h"
#include "consumer/pg_exec.h"
#include "devtools/dynalite_sandbox.h"
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
// `rate` > 0: sent at that many records/s, each with a "sent" header (steady clock, ns).
void Produce(const std::string& bootstrap, const std::string& topic, int records, int rate = 0) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  // Paced: a 2 ms linger, as a relay batches its sends; one request per record would load the
  // broker more than the consumers under test.
  const char* linger = rate > 0 ? "2" : "20";
  for (auto [k, v] : {std::pair{"bootstrap.servers", bootstrap.c_str()},
                      {"acks", "all"},
                      {"linger.ms", linger},
                      {"enable.idempotence", "true"}})
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) Die(err);
  walrelay::KafkaHandlePtr rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err));
  if (!rk) Die(err);
  if (rate > 0) {
    // Paced: the producer id (idempotence), the connection and the topic's metadata are in
    // place before the first record is stamped, so the first second's latencies measure the
    // consumer, not the producer starting ("Coordinator load in progress" can take 500 ms).
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
    const struct rd_kafka_metadata* md = nullptr;
    if (rd_kafka_metadata(rk.get(), 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR)
      rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    const char prime[] = "prime";
    if (rd_kafka_producev(rk.get(), RD_KAFKA_V_TOPIC("bench.prime"),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_VALUE(const_cast<char*>(prime), sizeof prime - 1),
                          RD_KAFKA_V_END) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_flush(rk.get(), 30000) != RD_KAFKA_RESP_ERR_NO_ERROR)
      Die("priming the paced producer failed");
  }
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < records; ++i) {
    char id[40];
    std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i);
    const std::string value = "{\"orderId\": \"order-" + std::to_string(i) +
                              "\", \"amount\": " + std::to_string(i % 100 + 1) + ".5}";
    rd_kafka_headers_t* headers = rd_kafka_headers_new(2);
    rd_kafka_header_add(headers, "id", -1, id, -1);
    if (rate > 0) {
      std::this_thread::sleep_until(start + std::chrono::microseconds(int64_t{1000000} * i / rate));
      rd_kafka_poll(rk.get(), 0);
      const std::string sent = std::to_string(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
              .count());
      rd_kafka_header_add(headers, "sent", -1, sent.data(), static_cast<ssize_t>(sent.size()));
    }
    while (true) {
      const rd_kafka_resp_err_t e =
          rd_kafka_producev(rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
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

// Timestamps of records finished, in order, and (paced runs) each record's latency.
struct Timeline {
  std::vector<Clock::time_point> finished;
  std::vector<double> latency_ms;
  void Reserve(int n) { finished.reserve(static_cast<size_t>(n)); }
  // `sent` is the record's "sent" header (steady clock, ns), when it has one.
  void Mark(const std::optional<std::string>& sent = std::nullopt) {
    finished.push_back(Clock::now());
    if (sent) {
      const Clock::time_point at{std::chrono::nanoseconds(std::atoll(sent->c_str()))};
      latency_ms.push_back(std::chrono::duration<double, std::milli>(finished.back() - at).count());
    }
  }
};

struct Result {
  std::string mode;
  int records = 0;
  double records_per_second = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  std::optional<double> added_p99_ms;
  // Over the rounds: the slowest and fastest records/s, the lowest and highest p99.
  double min_per_s = 0, max_per_s = 0, min_p99_ms = 0, max_p99_ms = 0;
  int rounds = 1;
};

// The median round of `r` by `key`, with the spread of the rounds.
template <typename Key>
Result Median(std::vector<Result> r, Key key) {
  std::sort(r.begin(), r.end(), [&](const Result& a, const Result& b) { return key(a) < key(b); });
  Result m = r[r.size() / 2];
  m.rounds = static_cast<int>(r.size());
  m.min_per_s = m.max_per_s = m.records_per_second;
  m.min_p99_ms = m.max_p99_ms = m.p99_ms;
  for (const Result& x : r) {
    m.min_per_s = std::min(m.min_per_s, x.records_per_second);
    m.max_per_s = std::max(m.max_per_s, x.records_per_second);
    m.min_p99_ms = std::min(m.min_p99_ms, x.p99_ms);
    m.max_p99_ms = std::max(m.max_p99_ms, x.p99_ms);
  }
  return m;
}

void Percentiles(std::vector<double> v, Result& r) {
  if (v.empty()) return;
  std::sort(v.begin(), v.end());
  r.p50_ms = v[v.size() / 2];
  r.p99_ms = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  r.max_ms = v.back();
}

Result Summarise(const std::string& mode, const Timeline& t) {
  Result r;
  r.mode = mode;
  r.records = static_cast<int>(t.finished.size());
  if (t.finished.size() < 2) return r;
  std::vector<double> gaps;
  for (size_t i = 1; i < t.finished.size(); ++i)
    gaps.push_back(
        std::chrono::duration<double, std::milli>(t.finished[i] - t.finished[i - 1]).count());
  const double seconds =
      std::chrono::duration<double>(t.finished.back() - t.finished.front()).count();
  r.records_per_second = static_cast<double>(gaps.size()) / seconds;
  Percentiles(t.latency_ms.empty() ? gaps : t.latency_ms, r);
  return r;
}

std::optional<std::string> SentHeader(rd_kafka_message_t* m) {
  rd_kafka_headers_t* headers = nullptr;
  const void* v = nullptr;
  size_t size = 0;
  if (rd_kafka_message_headers(m, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      rd_kafka_header_get_last(headers, "sent", &v, &size) != RD_KAFKA_RESP_ERR_NO_ERROR)
    return std::nullopt;
  return std::string(static_cast<const char*>(v), size);
}

constexpr const char* kInsert = "INSERT INTO effects (key, note) VALUES ($1, $2)";

// The baseline: a plain librdkafka consumer, auto commit, the row on its own connection.
// Set once the consumer has its partition, for the paced runs.
std::atomic<bool> g_assigned{false};

Timeline RunPlain(const std::string& bootstrap, const std::string& topic, int records,
                  PGconn* effects, bool commit_each = false) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  const std::string group = "plain-" + topic;
  for (auto [k, v] : {std::pair{"bootstrap.servers", bootstrap.c_str()},
                      {"group.id", group.c_str()},
                      {"auto.offset.reset", "earliest"},
                      {"fetch.wait.max.ms", "50"}})
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) Die(err);
  walrelay::KafkaHandlePtr rk(rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err));
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
    if (!g_assigned) {
      rd_kafka_topic_partition_list_t* assigned = nullptr;
      if (rd_kafka_assignment(rk.get(), &assigned) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (assigned->cnt > 0) g_assigned = true;
        rd_kafka_topic_partition_list_destroy(assigned);
      }
    }
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
      t.Mark(SentHeader(m));
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk.get());
  return t;
}

// The idempotent consumer with `store`; `in_store_transaction` writes the row through ctx.
Timeline RunConsumer(const std::string& bootstrap, const std::string& topic, int records,
                     wc::IdempotencyStore& store, bool in_store_transaction, PGconn* effects,
                     size_t max_batch) {
  wc::ConsumerOptions o;
  o.name = "bench-" + topic;
  o.bootstrap_servers = bootstrap;
  o.topics = {topic};
  o.max_batch = max_batch;
  o.kafka_properties = {{"fetch.wait.max.ms", "50"}};
  o.log = [](wc::LogLevel level, const std::string& line) {
    if (line.rfind("assigned ", 0) == 0) g_assigned = true;
    if (level >= wc::LogLevel::kWarn) std::fprintf(stderr, "consumer: %s\n", line.c_str());
  };
  Timeline t;
  t.Reserve(records);
  std::unique_ptr<wc::Consumer> consumer;
  o.on_processed = [&](const wc::Message& m, const wc::RecordOutcome&) {
    const wc::MessageHeader* sent = m.FindHeader("sent");
    t.Mark(sent != nullptr ? sent->value : std::nullopt);
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
  const int rate = argc > 3 ? std::atoi(argv[3]) : 2000;
  // WALRELAY_BENCH_PACED_SECONDS: how long each paced round sends (10 s by default).
  const int paced_seconds =
      std::getenv("WALRELAY_BENCH_PACED_SECONDS") != nullptr
          ? std::max(1, std::atoi(std::getenv("WALRELAY_BENCH_PACED_SECONDS")))
          : 10;
  const int rounds = std::getenv("WALRELAY_BENCH_ROUNDS") != nullptr
                         ? std::max(1, std::atoi(std::getenv("WALRELAY_BENCH_ROUNDS")))
                         : 3;
  // WALRELAY_BENCH_MODES=plain,postgres runs only the modes named (all by default).
  const char* only = std::getenv("WALRELAY_BENCH_MODES");
  auto wanted = [only](const std::string& mode) {
    if (only == nullptr || *only == '\0') return true;
    const std::string list = std::string(",") + only + ",";
    return list.find("," + mode + ",") != std::string::npos;
  };

  auto pg = Must(walrelay::devtools::PgSandbox::Start(), "PostgreSQL");
  auto redis = Must(walrelay::devtools::RedisSandbox::Start(), "redis-server");
  auto broker = Must(walrelay::devtools::KafkaBroker::Start(), "Apache Kafka");
  std::fprintf(stderr, "PostgreSQL, redis-server and Apache Kafka %s up; %d records per mode\n",
               walrelay::devtools::KafkaBroker::Version().c_str(), records);
  std::ifstream keys_sql(std::string(WALRELAY_SOURCE_DIR) + "/docs/consumer.sql");
  const std::string ddl((std::istreambuf_iterator<char>(keys_sql)),
                        std::istreambuf_iterator<char>());
  Must(pg->Exec(ddl), "keys table");
  Must(pg->Exec("CREATE TABLE effects (key text NOT NULL, note text)"), "effects table");
  auto effects = Must(wc::ConnectPg(pg->ConnInfo(), "effects"), "effects connection");

  wc::PostgresStoreOptions pg_options;
  pg_options.conninfo = pg->ConnInfo();
  auto pg_store = Must(wc::PostgresStore::Connect(pg_options), "PostgresStore");
  wc::RedisStoreOptions redis_options;
  redis_options.port = redis->port();
  auto redis_store = Must(wc::RedisStore::Connect(redis_options), "RedisStore");
  // dynalite is an npm package: without it the DynamoDB modes are left out, not the bench.
  std::unique_ptr<walrelay::devtools::DynaliteSandbox> dynalite;
  std::unique_ptr<wc::DynamoStore> dynamo_store;
  if (wanted("dynamodb") || wanted("dynamodb@" + std::to_string(rate))) {
    auto started = walrelay::devtools::DynaliteSandbox::Start();
    if (started.ok()) {
      dynalite = std::move(started).value();
      wc::DynamoStoreOptions dynamo_options;
      dynamo_options.endpoint = dynalite->endpoint();
      dynamo_options.access_key_id = "AKIDEXAMPLE";
      dynamo_options.secret_access_key = "bench";
      dynamo_store = Must(wc::DynamoStore::Connect(dynamo_options), "DynamoStore");
      Must(dynamo_store->CreateSchema(), "DynamoStore table");
    } else {
      std::fprintf(stderr, "no DynamoDB modes: %s\n", started.status().ToString().c_str());
    }
  }

  struct Mode {
    std::string name;
    std::function<Timeline(const std::string& topic, int records)> run;
  };
  const std::string bootstrap = broker->bootstrap_servers();
  auto plain = [&](const std::string& t, int n) {
    return RunPlain(bootstrap, t, n, effects.get());
  };
  auto postgres = [&](size_t batch) {
    return [&, batch](const std::string& t, int n) {
      return RunConsumer(bootstrap, t, n, *pg_store, true, nullptr, batch);
    };
  };
  auto redis_mode = [&](size_t batch) {
    return [&, batch](const std::string& t, int n) {
      return RunConsumer(bootstrap, t, n, *redis_store, false, effects.get(), batch);
    };
  };
  auto dynamo_mode = [&](const std::string& t, int n) {
    return RunConsumer(bootstrap, t, n, *dynamo_store, false, effects.get(),
                       wc::ConsumerOptions{}.max_batch);
  };
  const size_t defaults = wc::ConsumerOptions{}.max_batch;
  std::vector<Mode> modes = {
      {"plain", plain},
      {"plain-commit",
       [&](const std::string& t, int n) { return RunPlain(bootstrap, t, n, effects.get(), true); }},
      {"postgres", postgres(defaults)},
      {"postgres-batch1", postgres(1)},
      {"redis", redis_mode(defaults)},
      {"redis-batch1", redis_mode(1)},
  };
  if (dynamo_store) modes.push_back({"dynamodb", dynamo_mode});
  // Warm-up: the broker's JIT and the first group join are not timed.
  Must(broker->CreateTopic("bench.warmup", 1, 1), "topic");
  Produce(bootstrap, "bench.warmup", 2000);
  (void)RunPlain(bootstrap, "bench.warmup", 2000, effects.get());

  std::vector<Result> results;
  auto report = [&](const Result& r) {
    std::fprintf(stderr,
                 "%-15s %6d records  %8.0f records/s  p50 %.3f ms  p99 %.3f ms  max %.1f ms\n",
                 r.mode.c_str(), r.records, r.records_per_second, r.p50_ms, r.p99_ms, r.max_ms);
  };
  // The modes take turns, `rounds` times, and each reports its median round: a burst of
  // other work on the machine then costs one round of one mode, not the comparison. The
  // record-at-a-time modes and dynalite take at most 5,000 records (they run at 300-3,000/s).
  auto records_for = [records](const std::string& mode) {
    const bool slow =
        mode.find("batch1") != std::string::npos || mode == "dynamodb" || mode == "plain-commit";
    return slow ? std::min(records, 5000) : records;
  };
  std::map<std::string, std::vector<Result>> rounds_of;
  for (int round = 0; round < rounds; ++round) {
    for (const Mode& mode : modes) {
      if (!wanted(mode.name)) continue;
      const std::string topic = "bench." + mode.name + "." + std::to_string(round);
      const int n = records_for(mode.name);
      Must(broker->CreateTopic(topic, 1, 1), "topic");
      Produce(bootstrap, topic, n);
      rounds_of[mode.name].push_back(Summarise(mode.name, mode.run(topic, n)));
      report(rounds_of[mode.name].back());
    }
  }
  for (const Mode& mode : modes) {
    auto& r = rounds_of[mode.name];
    if (r.empty()) continue;
    results.push_back(Median(r, [](const Result& x) { return x.records_per_second; }));
  }
  // Latency at a steady rate: the consumer is up and waiting before the first record is sent.
  // The paced modes take turns too, `rounds` times; each reports its median-p99 round, and a
  // store's added_p99_ms is its median p99 minus plain's.
  std::vector<Mode> paced = {
      {"plain@" + std::to_string(rate), plain},
      {"postgres@" + std::to_string(rate), postgres(defaults)},
      {"redis@" + std::to_string(rate), redis_mode(defaults)},
  };
  if (dynamo_store) paced.push_back({"dynamodb@" + std::to_string(rate), dynamo_mode});
  Must(broker->CreateTopic("bench.prime", 1, 1), "topic");
  std::map<std::string, std::vector<Result>> paced_rounds;
  // Round -1 is a warm-up, not timed: the broker's first paced seconds (JIT, page cache of new
  // segments) cost the first round 100+ ms at p99, whatever runs first.
  for (int round = -1; round < rounds; ++round) {
    bool warmed = false;
    for (const Mode& mode : paced) {
      if (!wanted(mode.name) || (round < 0 && warmed)) continue;
      warmed = true;
      // dynalite cannot keep up with the rate: one round, and fewer records, tell enough.
      const bool dynamo = mode.name.rfind("dynamodb", 0) == 0;
      if (dynamo && round > 0) continue;
      const int paced_records = rate * (dynamo || round < 0 ? 2 : paced_seconds);
      std::string topic = "bench.paced." + mode.name + "." + std::to_string(round + 1);
      topic.replace(topic.find('@'), 1, "-at-");
      Must(broker->CreateTopic(topic, 1, 1), "topic");
      Timeline t;
      g_assigned = false;
      std::thread consumer([&] { t = mode.run(topic, paced_records); });
      const auto joined = Clock::now() + std::chrono::seconds(60);
      while (!g_assigned && Clock::now() < joined)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(500));  // fetching
      Produce(bootstrap, topic, paced_records, rate);
      consumer.join();
      Result r = Summarise(mode.name, t);
      if (const char* dump = std::getenv("WALRELAY_BENCH_DUMP")) {
        std::ofstream d(std::string(dump) + "." + mode.name + "." + std::to_string(round));
        for (double v : t.latency_ms) d << v << "\n";
      }
      if (round < 0) continue;
      report(r);
      paced_rounds[mode.name].push_back(r);
    }
  }
  std::optional<double> plain_p99;
  for (const Mode& mode : paced) {
    auto& r = paced_rounds[mode.name];
    if (r.empty()) continue;
    Result m = Median(r, [](const Result& x) { return x.p99_ms; });
    if (!plain_p99) plain_p99 = m.p99_ms;
    else m.added_p99_ms = m.p99_ms - *plain_p99;
    results.push_back(m);
  }
  auto line = [](const Result& r) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s,%d,%.0f,%.3f,%.3f,%.1f,", r.mode.c_str(), r.records,
                  r.records_per_second, r.p50_ms, r.p99_ms, r.max_ms);
    std::string out = buf;
    if (r.added_p99_ms) {
      std::snprintf(buf, sizeof buf, "%.3f", *r.added_p99_ms);
      out += buf;
    }
    std::snprintf(buf, sizeof buf, ",%d,%.0f,%.0f,%.3f,%.3f", r.rounds, r.min_per_s, r.max_per_s,
                  r.min_p99_ms, r.max_p99_ms);
    return out + buf + "\n";
  };
  const char* header =
      "mode,records,records_per_s,p50_ms,p99_ms,max_ms,added_p99_ms,rounds,min_records_per_s,"
      "max_records_per_s,min_p99_ms,max_p99_ms\n";
  std::printf("%s", header);
  for (const Result& r : results) std::printf("%s", line(r).c_str());
  if (!csv.empty()) {
    std::ofstream out(csv);
    out << header;
    for (const Result& r : results) out << line(r);
  }
  return 0;
}
