// Test fixture for the relay's integration tests: a throwaway PostgreSQL 15 with wal2json (and
// the built-in pgoutput; another major with pgoutput only under WALRELAY_TEST_PG_MAJOR), the
// outbox table from docs/outbox.sql, Kafka (librdkafka's mock cluster in this process by
// default, or a real Apache Kafka broker: RelayFixture(RealBroker{...})), and the walrelay
// binary run as a child process with a config written to a temp dir.
#pragma once

#include <doctest/doctest.h>
#include <libpq-fe.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/lsn.h"
#include "devtools/child_process.h"
#include "devtools/kafka_broker.h"
#include "devtools/mock_kafka.h"
#include "devtools/pg_sandbox.h"
#include "devtools/topic_reader.h"
#include "pg/pg_handles.h"

namespace walrelay::testing {

// Helpers the integration suites share.

// Polls `pred` until it holds or `timeout` passes; the last answer is returned.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// How often `needle` occurs in `text` (overlapping occurrences count).
inline size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

inline std::string ReadWholeFile(const std::string& path) { return devtools::ReadFile(path); }

// Selects a real Apache Kafka cluster (scripts/fetch-kafka.sh) instead of the mock.
struct RealBroker {
  devtools::KafkaBrokerOptions options;
};

class RelayFixture {
 public:
  RelayFixture() {
    StartPostgres();
    auto kafka = devtools::MockKafka::Start(1);
    REQUIRE_MESSAGE(kafka.ok(), kafka.status().ToString());
    kafka_ = std::move(kafka).value();
    bootstrap_servers_ = kafka_->bootstrap_servers();
    CreateTables();
  }
  // The mock cluster and a PostgreSQL of the caller's choosing (e.g. major 17).
  explicit RelayFixture(const devtools::PgSandboxOptions& pg_options) {
    StartPostgres(pg_options);
    auto kafka = devtools::MockKafka::Start(1);
    REQUIRE_MESSAGE(kafka.ok(), kafka.status().ToString());
    kafka_ = std::move(kafka).value();
    bootstrap_servers_ = kafka_->bootstrap_servers();
    CreateTables();
  }
  explicit RelayFixture(const RealBroker& real) {
    StartPostgres();
    auto broker = devtools::KafkaBroker::Start(real.options);
    REQUIRE_MESSAGE(broker.ok(), broker.status().ToString());
    broker_ = std::move(broker).value();
    MESSAGE("Apache Kafka " << devtools::KafkaBroker::Version() << ", " << broker_->nodes()
                            << " node(s), started in " << broker_->start_seconds() << " s");
    bootstrap_servers_ = broker_->bootstrap_servers();
    CreateTables();
  }

  devtools::PgSandbox& pg() { return *pg_; }
  // The mock cluster; only for fixtures built without RealBroker.
  devtools::MockKafka& kafka() {
    REQUIRE(kafka_ != nullptr);
    return *kafka_;
  }
  // The real broker; only for fixtures built with RealBroker.
  devtools::KafkaBroker& broker() {
    REQUIRE(broker_ != nullptr);
    return *broker_;
  }
  const std::string& bootstrap_servers() const { return bootstrap_servers_; }

 private:
  void StartPostgres(const devtools::PgSandboxOptions& opts = SandboxOptionsFromEnv()) {
    auto pg = devtools::PgSandbox::Start(opts);
    REQUIRE_MESSAGE(pg.ok(), pg.status().ToString());
    pg_ = std::move(pg).value();
    if (opts.major != 0) REQUIRE(pg_->major_version() == opts.major);
    // The other majors' builds have no wal2json: suites that do not choose run on pgoutput.
    if (!pg_->has_wal2json()) plugin_ = "pgoutput";
  }
  // WALRELAY_TEST_PG_MAJOR=<N> runs a suite on PostgreSQL N (tests/CMakeLists.txt's version
  // matrix); unset, Debian's default.
  static devtools::PgSandboxOptions SandboxOptionsFromEnv() {
    devtools::PgSandboxOptions opts;
    if (const char* major = std::getenv("WALRELAY_TEST_PG_MAJOR"); major != nullptr && *major) {
      opts.major = std::atoi(major);
      REQUIRE_MESSAGE(opts.major > 0, "WALRELAY_TEST_PG_MAJOR=" << major << " is not a number");
      MESSAGE("PostgreSQL " << opts.major << " (WALRELAY_TEST_PG_MAJOR)");
    }
    return opts;
  }
  void CreateTables() {
    const std::string sql = ReadWholeFile(std::string(WALRELAY_SOURCE_DIR) + "/docs/outbox.sql");
    REQUIRE(!sql.empty());
    Exec(sql);
    Exec("CREATE TABLE public.unrelated (id bigserial primary key, filler text)");
    work_dir_ = pg_->base_dir();
  }

 public:
  void Exec(const std::string& sql) {
    Status st = pg_->Exec(sql);
    REQUIRE_MESSAGE(st.ok(), st.ToString());
  }
  std::string Value(const std::string& sql) {
    auto v = pg_->QueryValue(sql);
    REQUIRE_MESSAGE(v.ok(), v.status().ToString());
    return *v;
  }
  Lsn CurrentWal() { return *Lsn::Parse(Value("SELECT pg_current_wal_lsn()::text")); }
  // Runs one INSERT (with or without its ';') as its own transaction and returns a position
  // after its row and before its commit record: a slot confirmed below it replays the row.
  // CurrentWal() taken before the statement is no such bound: WAL other processes write
  // meanwhile (a standby snapshot) may be confirmed while the row is not.
  Lsn InsertBeforeCommit(std::string insert) {
    while (!insert.empty() && (insert.back() == ';' || insert.back() == ' ')) insert.pop_back();
    return *Lsn::Parse(Value("WITH ins AS (" + insert +
                             " RETURNING 1) SELECT pg_current_wal_insert_lsn()::text FROM ins"));
  }
  Lsn ConfirmedFlush(const std::string& slot) {
    auto v = pg_->QueryValue("SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM "
                             "pg_replication_slots WHERE slot_name = '" +
                             slot + "'");
    if (!v.ok()) return Lsn();
    return *Lsn::Parse(*v);
  }
  // Waits until the slot's confirmed_flush_lsn reaches `target`; returns the last value seen.
  Lsn WaitConfirmed(const std::string& slot, Lsn target, std::chrono::seconds timeout) {
    Lsn seen;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      seen = ConfirmedFlush(slot);
      if (seen >= target) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return seen;
  }

  // After a relay was killed the server needs a moment to notice its walsender's client is
  // gone; a new relay started before that would wait as a standby.
  void WaitSlotFree(const std::string& slot,
                    std::chrono::seconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto active = pg_->QueryValue(
          "SELECT active::text FROM pg_replication_slots WHERE slot_name='" + slot + "'");
      if (!active.ok() || *active == "false") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  // Drops `slot` and makes it again from `saved`, a copy taken earlier with
  // pg_copy_logical_replication_slot (then dropped): the slot stands where the copy did, behind
  // whatever a relay confirmed since, as after a crash between delivery and confirmation.
  void RestoreSlotCopy(const std::string& slot, const std::string& saved) {
    WaitSlotFree(slot);
    Exec("SELECT pg_drop_replication_slot('" + slot + "')");
    Exec("SELECT pg_copy_logical_replication_slot('" + saved + "', '" + slot + "')");
    Exec("SELECT pg_drop_replication_slot('" + saved + "')");
  }

  // The plugin.name WriteConfig writes unless an override sets it: wal2json, so the suites
  // written for it stay on it; a pgoutput suite calls UsePlugin("pgoutput").
  void UsePlugin(const std::string& plugin) { plugin_ = plugin; }

  // Writes a connector config; `overrides` replace or add keys.
  std::string WriteConfig(const std::string& slot,
                          const std::map<std::string, std::string>& overrides,
                          bool with_router = true) {
    std::map<std::string, std::string> cfg = {
        {"connector.class", "io.debezium.connector.postgresql.PostgresConnector"},
        {"database.hostname", "127.0.0.1"},
        {"database.port", std::to_string(pg_->port())},
        {"database.user", "postgres"},
        {"database.dbname", "postgres"},
        {"plugin.name", plugin_},
        {"slot.name", slot},
        {"table.include.list", "public.outbox"},
        {"topic.prefix", "itest"},
        {"status.update.interval.ms", "200"},
        {"shutdown.timeout.ms", "5000"},
        {"kafka.bootstrap.servers", bootstrap_servers_},
        // Any free port: relays of one test, and tests run in parallel, never collide.
        {"listeners", "http://127.0.0.1:0"},
    };
    if (with_router) {
      cfg["transforms"] = "outbox";
      cfg["transforms.outbox.type"] = "io.debezium.transforms.outbox.EventRouter";
    }
    for (const auto& [k, v] : overrides) cfg[k] = v;
    std::string json = "{\"name\": \"itest-" + slot + "\", \"config\": {";
    bool first = true;
    for (const auto& [k, v] : cfg) {
      json += (first ? "\n  \"" : ",\n  \"") + k + "\": \"" + v + "\"";
      first = false;
    }
    json += "\n}}\n";
    last_config_json_ = json;
    const std::string path =
        work_dir_ + "/" + slot + "-" + std::to_string(config_count_++) + ".json";
    std::ofstream(path) << json;
    return path;
  }

  // Starts `walrelay run` and waits until it streams; its log goes to log_path().
  std::unique_ptr<devtools::ChildProcess> StartRelay(const std::string& config_path) {
    auto child = SpawnRelay(config_path);
    const bool streaming =
        devtools::WaitForFileContains(log_path_, "streaming slot", std::chrono::seconds(20));
    REQUIRE_MESSAGE(streaming, ReadWholeFile(log_path_));
    return child;
  }
  // Starts `walrelay run` without waiting; each start logs to a new file (log_path()).
  std::unique_ptr<devtools::ChildProcess> SpawnRelay(const std::string& config_path) {
    log_path_ = config_path + "." + std::to_string(config_count_++) + ".log";
    auto child =
        devtools::ChildProcess::Spawn({WALRELAY_BINARY, "run", "--config", config_path}, log_path_);
    REQUIRE_MESSAGE(child.ok(), child.status().ToString());
    return std::move(child).value();
  }
  const std::string& log_path() const { return log_path_; }
  const std::string& last_config_json() const { return last_config_json_; }

  // Runs a walrelay subcommand to completion; returns its exit code and output.
  std::pair<int, std::string> RunCommand(const std::vector<std::string>& args) {
    const std::string out = work_dir_ + "/cmd-" + std::to_string(config_count_++) + ".out";
    std::vector<std::string> argv = {WALRELAY_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    auto child = devtools::ChildProcess::Spawn(argv, out);
    REQUIRE(child.ok());
    auto code = (*child)->Wait(std::chrono::seconds(60));
    REQUIRE_MESSAGE(code.ok(), code.status().ToString());
    return {*code, ReadWholeFile(out)};
  }

  std::unique_ptr<devtools::TopicReader> Reader(
      devtools::IsolationLevel isolation = devtools::IsolationLevel::kReadCommitted) {
    auto reader = devtools::TopicReader::Create(bootstrap_servers_, isolation);
    REQUIRE(reader.ok());
    return std::move(reader).value();
  }

 private:
  std::unique_ptr<devtools::PgSandbox> pg_;
  std::unique_ptr<devtools::MockKafka> kafka_;
  std::unique_ptr<devtools::KafkaBroker> broker_;
  std::string bootstrap_servers_;
  std::string work_dir_;
  std::string log_path_;
  std::string last_config_json_;
  std::string plugin_ = "wal2json";
  int config_count_ = 0;
};

// Resident memory of a process, from /proc: VmRSS (now) or VmHWM (peak), in KiB.
inline long ProcKib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

// The relay log of the fixture's relays so far.
inline std::string Log(const RelayFixture& fx) { return devtools::ReadFile(fx.log_path()); }

}  // namespace walrelay::testing
