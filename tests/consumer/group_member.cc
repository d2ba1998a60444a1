// One member of a consumer group for the rebalance tests (rebalance_test.cc): the idempotent
// consumer with the PostgreSQL or the Redis store and a handler like the payments example's,
// which records one `effects` row per run in PostgreSQL:
//   --store postgres  the row is written in the store's transaction (exactly-once effects);
//   --store redis     the row is written on its own connection, committed before the key is
//                     marked COMPLETED (at-least-once effects: a crash in between repeats it).
// It prints one line per record outcome ("<topic>[p]@offset event <key>: <outcome>") and a
// final "stats: ..." line when stopped with SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "consumer/pg_exec.h"
#include "walrelay/consumer.h"

namespace wc = walrelay::consumer;

namespace {

void Log(wc::LogLevel level, const std::string& line) {
  static const char* names[] = {"debug", "info", "warn", "error"};
  if (level == wc::LogLevel::kDebug) return;
  std::fprintf(stderr, "member %s: %s\n", names[static_cast<int>(level)], line.c_str());
}

constexpr const char* kEffectSql = "INSERT INTO effects (key, note) VALUES ($1, $2)";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"consumer-group member for walrelay's rebalance tests"};
  std::string store_kind = "postgres", conninfo, bootstrap, topic, name = "members", group;
  int redis_port = 0, commit_interval_ms = 0, lease_ms = 30000;
  std::vector<std::string> kafka;
  app.add_option("--store", store_kind, "postgres or redis")->capture_default_str();
  app.add_option("--conninfo", conninfo, "PostgreSQL: the effects table (and the postgres store)")
      ->required();
  app.add_option("--redis-port", redis_port, "redis-server on 127.0.0.1");
  app.add_option("--bootstrap-servers", bootstrap, "Kafka bootstrap servers")->required();
  app.add_option("--topic", topic, "topic to consume")->required();
  app.add_option("--name", name, "consumer name")->capture_default_str();
  app.add_option("--group", group, "consumer group (default: the name)");
  app.add_option("--commit-interval-ms", commit_interval_ms, "ConsumerOptions::commit_interval")
      ->capture_default_str();
  app.add_option("--lease-ms", lease_ms, "ConsumerOptions::lease")->capture_default_str();
  app.add_option("--kafka", kafka, "extra librdkafka property, key=value (repeatable)");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<wc::IdempotencyStore> store;
  if (store_kind == "postgres") {
    wc::PostgresStoreOptions o;
    o.conninfo = conninfo;
    auto s = wc::PostgresStore::Connect(o);
    if (!s.ok()) return Log(wc::LogLevel::kError, s.status().ToString()), 3;
    store = std::move(s).value();
  } else if (store_kind == "redis") {
    wc::RedisStoreOptions o;
    o.port = redis_port;
    auto s = wc::RedisStore::Connect(o);
    if (!s.ok()) return Log(wc::LogLevel::kError, s.status().ToString()), 3;
    store = std::move(s).value();
  } else {
    return Log(wc::LogLevel::kError, "--store must be postgres or redis"), 2;
  }
  // The Redis store's handler writes its effect on a connection of its own.
  auto effects = wc::ConnectPg(conninfo, "the effects database");
  if (!effects.ok()) return Log(wc::LogLevel::kError, effects.status().ToString()), 3;

  wc::ConsumerOptions options;
  options.name = name;
  options.group_id = group;
  options.bootstrap_servers = bootstrap;
  options.topics = {topic};
  options.commit_interval = std::chrono::milliseconds(commit_interval_ms);
  options.lease = std::chrono::milliseconds(lease_ms);
  options.backoff_initial = std::chrono::milliseconds(20);
  options.backoff_max = std::chrono::milliseconds(200);
  options.store_retry_backoff = std::chrono::milliseconds(200);
  for (const auto& kv : kafka) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Log(wc::LogLevel::kError, "bad --kafka " + kv), 2;
    options.kafka_properties[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  options.log = Log;
  options.on_processed = [](const wc::Message& m, const wc::RecordOutcome& outcome) {
    std::printf("%s[%d]@%lld event %s: %s\n", m.topic.c_str(), m.partition,
                static_cast<long long>(m.offset), outcome.idempotency_key.c_str(),
                wc::RecordOutcomeName(outcome.kind));
    std::fflush(stdout);
  };
  const bool in_store_transaction = store_kind == "postgres";
  PGconn* own = effects->get();
  auto handler = [in_store_transaction, own](wc::HandlerContext& ctx) {
    const std::vector<std::optional<std::string>> params = {ctx.idempotency_key(),
                                                            ctx.message().value};
    if (in_store_transaction) {
      auto r = ctx.Exec(kEffectSql, params);
      if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
    } else {
      auto r = wc::ExecPg(own, kEffectSql, params);
      if (!r.ok()) return wc::HandlerResult::Retry("effects", r.status().message());
    }
    return wc::HandlerResult::Done();
  };

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto consumer = wc::Consumer::Create(options, *store, handler);
  if (!consumer.ok()) return Log(wc::LogLevel::kError, consumer.status().ToString()), 2;
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    (*consumer)->Stop();
  });
  const walrelay::Status status = (*consumer)->Run();
  kill(getpid(), SIGTERM);
  stopper.join();
  const wc::ConsumerStats s = (*consumer)->stats();
  std::printf("stats: completed=%lld duplicates=%lld conflicts=%lld takeovers=%lld\n",
              static_cast<long long>(s.completed), static_cast<long long>(s.duplicates),
              static_cast<long long>(s.conflicts), static_cast<long long>(s.takeovers));
  std::fflush(stdout);
  if (!status.ok()) return Log(wc::LogLevel::kError, status.ToString()), 5;
  return 0;
}
