// walrelay: PostgreSQL outbox (pgoutput or wal2json) -> Kafka relay. Command-line entry point.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <unistd.h>
#include <CLI/CLI.hpp>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "cli/commands.h"
#include "common/logging.h"
#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "relay/relay.h"
#include "status/http_server.h"
#include "status/rest_api.h"

namespace walrelay {

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case ErrorCode::kOk: return kExitOk;
    case ErrorCode::kConfig: return kExitConfig;
    case ErrorCode::kConnection: return kExitConnection;
    case ErrorCode::kPrecondition: return kExitSetup;
    case ErrorCode::kKafka: return kExitKafka;
    case ErrorCode::kTransform: return kExitTransform;
    case ErrorCode::kDecode:
    case ErrorCode::kProtocol: return kExitDecode;
    case ErrorCode::kInternal: return kExitInternal;
    case ErrorCode::kAuthentication: return kExitConnection;
    case ErrorCode::kSlotInUse: return kExitSetup;
    case ErrorCode::kWalLevel: return kExitWalLevel;
    case ErrorCode::kNoReplicationRole: return kExitNoReplicationRole;
    case ErrorCode::kTableMissing: return kExitTableMissing;
    case ErrorCode::kSlotMissing: return kExitSlotMissing;
    case ErrorCode::kSlotInvalidated: return kExitSlotInvalidated;
    case ErrorCode::kSlotWrongPlugin: return kExitSlotWrongPlugin;
    case ErrorCode::kSlotGone: return kExitSlotGone;
    case ErrorCode::kPublicationMissing: return kExitPublicationMissing;
    case ErrorCode::kPublicationLacksTable: return kExitPublicationLacksTable;
    case ErrorCode::kPublicationPrivilege: return kExitPublicationPrivilege;
    case ErrorCode::kKafkaAuthentication: return kExitKafkaAuthentication;
    case ErrorCode::kKafkaTls: return kExitKafkaTls;
    case ErrorCode::kKafkaFenced: return kExitFenced;
    case ErrorCode::kOffsetMismatch: return kExitOffsetMismatch;
    case ErrorCode::kSlotWalRemoved: return kExitSlotWalRemoved;
  }
  return kExitInternal;
}

namespace {

const char* SignalName(int signo) { return signo == SIGINT ? "SIGINT" : "SIGTERM"; }

// Ends the process without the relay's own stop: no further status update, so the slot stays
// where the last one put it and everything after it is sent again on the next start.
[[noreturn]] void ExitAtOnce(int code) {
  spdlog::default_logger()->flush();
  std::_Exit(code);
}

// SIGTERM and SIGINT, taken by a thread of their own rather than on the relay's loop: steps of
// the stop block the loop (ending the COPY stream waits for the server, dropping the slot or a
// connection attempt for theirs), and a second signal, or a stop that overruns, must end the
// process all the same. The first signal asks the relay to stop; the whole stop is bounded by
// shutdown.timeout.ms plus kGrace (for the final status update and closing the connections);
// a second signal, or that bound passing, exits at once with 128 + the signal number.
class StopSignalWatcher {
 public:
  static constexpr std::chrono::seconds kGrace{5};

  // Blocks the signals in this thread before any other thread starts, so that every thread
  // inherits the mask and only sigtimedwait() below receives them.
  // A signal that arrives before Watch() stays pending until then.
  explicit StopSignalWatcher(std::chrono::milliseconds shutdown_timeout)
      : shutdown_timeout_(shutdown_timeout) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }
  void Watch(RunningRelay& relay) {
    relay_ = &relay;
    thread_ = std::thread([this] { Watch(); });
  }
  ~StopSignalWatcher() { Finish(); }

  // The relay has stopped on its own; the thread ends within one poll interval.
  void Finish() {
    finished_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  static constexpr std::chrono::milliseconds kPoll{100};

  // The next signal before `deadline`, or 0 when the deadline passed or the relay finished.
  int WaitForSignal(std::chrono::steady_clock::time_point deadline) {
    while (!finished_ && std::chrono::steady_clock::now() < deadline) {
      const timespec poll{0, std::chrono::nanoseconds(kPoll).count()};
      const int signo = sigtimedwait(&signals_, nullptr, &poll);
      if (signo > 0) return signo;
    }
    return 0;
  }

  void Watch() {
    const int first = WaitForSignal(std::chrono::steady_clock::time_point::max());
    if (first == 0) return;
    spdlog::info("received {}; stopping within shutdown.timeout.ms={} (a second SIGTERM or "
                 "SIGINT exits at once)",
                 SignalName(first), shutdown_timeout_.count());
    relay_->RequestStop();
    const int second = WaitForSignal(std::chrono::steady_clock::now() + shutdown_timeout_ + kGrace);
    if (finished_) return;
    if (second != 0) {
      spdlog::warn("received {} again: exiting at once without waiting for Kafka or confirming "
                   "anything more; {}",
                   SignalName(second), relay_->StaysConfirmed());
      ExitAtOnce(128 + second);
    }
    spdlog::error("the stop did not finish within shutdown.timeout.ms={} plus {} s; exiting "
                  "without confirming anything more; {}",
                  shutdown_timeout_.count(), kGrace.count(), relay_->StaysConfirmed());
    ExitAtOnce(128 + first);
  }

  RunningRelay* relay_ = nullptr;
  const std::chrono::milliseconds shutdown_timeout_;
  sigset_t signals_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace

int RunRelayCommand(const std::string& config_path, bool log_level_given) {
  auto config = LoadConnectorConfig(config_path);
  if (!config.ok()) {
    spdlog::error("{}", config.status().ToString());
    return ExitCodeFor(config.status());
  }
  auto settings = ParseRelaySettings(*config);
  if (!settings.ok()) {
    spdlog::error("{}", settings.status().ToString());
    return ExitCodeFor(settings.status());
  }
  // --log-level on the command line wins over log.level in the config.
  if (!settings->log_level.empty() && !log_level_given) {
    (void)SetLogLevel("log.level", settings->log_level);  // validated by ParseRelaySettings
  }
  if (Status st = SetLogFormat(settings->log_format); !st.ok()) {
    spdlog::error("{}", st.ToString());
    return ExitCodeFor(st);
  }
  boost::asio::io_context io(1);
  // Before Create: the threads librdkafka starts inherit the blocked signals.
  StopSignalWatcher watcher(std::chrono::milliseconds(settings->shutdown_timeout_ms));
  auto built = CreateRelay(std::move(settings).value(), io);
  if (!built.ok()) {
    spdlog::error("{}", built.status().ToString());
    return ExitCodeFor(built.status());
  }
  RunningRelay& relay = **built;
  watcher.Watch(relay);
  // The REST API shares the relay's loop, so its handlers read relay state without locks.
  std::unique_ptr<RestApi> api;
  auto server =
      HttpServer::Start(io, relay.settings().listener,
                        [&api](const HttpRequest& request) { return api->Handle(request); });
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return ExitCodeFor(server.status());
  }
  api = std::make_unique<RestApi>(relay, (*server)->HostPort(), server->get());
  spdlog::info("REST API listening on {}://{}", relay.settings().listener.scheme(),
               (*server)->HostPort());
  if (const std::string warning = api->access().StartupWarning(); !warning.empty()) {
    spdlog::warn("{}", warning);
  }
  const Status status = relay.Run();
  watcher.Finish();
  if (!status.ok()) return ExitCodeFor(status);
  return kExitOk;
}

// GnuTLS, loaded only because libpq links libldap, initialises itself from a load-time
// constructor unless GNUTLS_NO_IMPLICIT_INIT is set: about 1 MB of resident memory in a
// process that never uses it (libldap initialises GnuTLS itself when it needs TLS). The
// variable only counts when set before the library loads, so the first run re-executes
// itself once with it set. Any failure just leaves the process as it was.
void SkipImplicitGnuTlsInit(char** argv) {
  if (std::getenv("GNUTLS_NO_IMPLICIT_INIT") != nullptr) return;
  if (setenv("GNUTLS_NO_IMPLICIT_INIT", "1", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GNUTLS_NO_IMPLICIT_INIT");
}

}  // namespace walrelay

int main(int argc, char** argv) {
  using namespace walrelay;
  SkipImplicitGnuTlsInit(argv);
  auto logger = spdlog::stderr_color_mt("walrelay");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  CLI::App app{
      "walrelay: relays a PostgreSQL outbox table (logical replication, pgoutput or wal2json) to "
      "Kafka, Debezium-compatible, confirming WAL only after Kafka acknowledged it."};
  app.set_version_flag("--version", std::string("walrelay ") + WALRELAY_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // `walrelay run --config f --log-level debug` works as well as before `run`
  std::string log_level = "info";
  auto* log_level_option =
      app.add_option("--log-level", log_level,
                     "trace, debug, info, warn, error, off (overrides "
                     "log.level in the config)")
          ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
          ->capture_default_str();

  std::string config_path;
  auto* run =
      app.add_subcommand("run", "Run the relay with a Kafka Connect style connector config");
  run->add_option("-c,--config", config_path, "connector config (JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  auto* validate = app.add_subcommand(
      "validate", "Check a config, connect, and report wal_level, the slot and the tables");
  validate->add_option("-c,--config", config_path, "connector config (JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  DevKafkaOptions dev_kafka_options;
  auto* dev_kafka = app.add_subcommand(
      "dev-kafka",
      "FOR DEMOS, TESTS AND LOCAL TRIALS: run a throwaway Kafka on loopback; prints "
      "bootstrap.servers=... first, runs until SIGINT/SIGTERM. --broker mock (default): "
      "librdkafka's in-process mock cluster, starts at once, enforces little (no acks, size "
      "limits or security) and persists nothing. --broker apache: a real Apache Kafka broker "
      "(KRaft, JVM) from scripts/fetch-kafka.sh's cache, a few seconds to start");
  dev_kafka->add_option("--broker", dev_kafka_options.broker, "mock or apache")
      ->check(CLI::IsMember({"mock", "apache"}))
      ->capture_default_str();
  dev_kafka
      ->add_option("--brokers", dev_kafka_options.brokers,
                   "number of brokers (mock: 1-9; apache: 1, or 3 with replication factor 3 "
                   "and min.insync.replicas=2)")
      ->check(CLI::Range(1, 9))
      ->capture_default_str();
  int events = 6;
  std::string demo_kafka = "mock";
  auto* demo = app.add_subcommand(
      "demo",
      "Start a throwaway PostgreSQL and Kafka, relay sample outbox events and print them as a "
      "consumer sees them, then clean up. --kafka mock (default) uses librdkafka's mock "
      "cluster and needs no JVM; --kafka apache uses a real Apache Kafka broker");
  demo->add_option("--events", events, "sample events to insert")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  bool demo_polling = false;
  demo->add_flag("--polling", demo_polling,
                 "relay by polling the outbox table (source.mode=polling) instead of a slot");
  demo->add_option("--kafka", demo_kafka, "mock or apache")
      ->check(CLI::IsMember({"mock", "apache"}))
      ->capture_default_str();

  ConsumerGcOptions gc;
  auto* consumer_gc = app.add_subcommand(
      "consumer-gc",
      "Delete expired keys of the idempotent consumer's PostgreSQL table (docs/consumer.md) in "
      "batches");
  consumer_gc->add_option("--conninfo", gc.conninfo,
                          "libpq connection string of the database holding the table (PG* "
                          "environment variables apply; keep the password in PGPASSWORD or "
                          "~/.pgpass)");
  consumer_gc->add_option("--table", gc.table, "[schema.]table of processed keys")
      ->capture_default_str();
  consumer_gc->add_option("--batch", gc.batch_size, "rows deleted per transaction")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  consumer_gc
      ->add_option("--pending-retention-hours", gc.pending_retention_hours,
                   "also delete PENDING keys whose lease ended this long ago")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage mistake is a configuration error (exit 2).
    return app.exit(e) == 0 ? kExitOk : kExitConfig;
  }
  spdlog::set_level(spdlog::level::from_str(log_level));

  if (*run) return RunRelayCommand(config_path, log_level_option->count() > 0);
  if (*validate) return ValidateCommand(config_path);
  if (*dev_kafka) return DevKafkaCommand(dev_kafka_options);
  if (*demo) return DemoCommand(events, demo_kafka == "apache", demo_polling);
  if (*consumer_gc) return ConsumerGcCommand(gc);
  return kExitInternal;
}
