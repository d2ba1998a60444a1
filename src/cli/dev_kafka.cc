// `walrelay dev-kafka`: a throwaway Kafka for demos, tests and local trials, as a standalone
// process: librdkafka's mock cluster, or a real Apache Kafka broker (devtools/kafka_broker.h).
#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "devtools/kafka_broker.h"
#include "devtools/mock_kafka.h"

namespace walrelay {
namespace {

int ReportStartFailure(const Status& status) {
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return ExitCodeFor(status);
}

// The first line of stdout, so scripts can read it before anything else.
void AnnounceBootstrap(const std::string& servers) {
  std::printf("bootstrap.servers=%s\n", servers.c_str());
  std::fflush(stdout);
}

}  // namespace

int DevKafkaCommand(const DevKafkaOptions& options) {
  // Block the signals first so sigwait, not the default handler, receives them; threads
  // started from here on (librdkafka's, the broker's reaper) inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::unique_ptr<devtools::MockKafka> mock;
  std::unique_ptr<devtools::KafkaBroker> apache;
  if (options.broker == "apache") {
    if (options.brokers != 1 && options.brokers != 3) {
      return ReportStartFailure(Status::Config(
          "--brokers must be 1 or 3 with --broker apache, not " + std::to_string(options.brokers)));
    }
    devtools::KafkaBrokerOptions broker_options;
    broker_options.nodes = options.brokers;
    auto started = devtools::KafkaBroker::Start(broker_options);
    if (!started.ok()) return ReportStartFailure(started.status());
    apache = std::move(started).value();
    AnnounceBootstrap(apache->bootstrap_servers());
    std::fprintf(stderr,
                 "Apache Kafka %s (KRaft), %d node(s), started in %.1f s; data in %s (deleted "
                 "on exit); stop with Ctrl-C\n",
                 devtools::KafkaBroker::Version().c_str(), apache->nodes(), apache->start_seconds(),
                 apache->base_dir().c_str());
  } else {
    auto started = devtools::MockKafka::Start(options.brokers);
    if (!started.ok()) return ReportStartFailure(started.status());
    mock = std::move(started).value();
    AnnounceBootstrap(mock->bootstrap_servers());
    std::fprintf(stderr,
                 "mock Kafka cluster (librdkafka's test mock, in memory, NOT a real broker) with "
                 "%d broker(s); stop with Ctrl-C\n",
                 options.brokers);
  }
  int signo = 0;
  sigwait(&set, &signo);
  return kExitOk;
}

}  // namespace walrelay
