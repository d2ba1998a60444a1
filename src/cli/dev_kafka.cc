// `walrelay dev-kafka`: librdkafka's mock cluster as a standalone process, for demos and tests.
#include <csignal>
#include <cstdio>

#include "cli/commands.h"
#include "devtools/mock_kafka.h"

namespace walrelay {

int DevKafkaCommand(int brokers) {
  // Block the signals first so sigwait, not the default handler, receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto mock = devtools::MockKafka::Start(brokers);
  if (!mock.ok()) {
    std::fprintf(stderr, "%s\n", mock.status().ToString().c_str());
    return ExitCodeFor(mock.status());
  }
  std::printf("bootstrap.servers=%s\n", (*mock)->bootstrap_servers().c_str());
  std::fflush(stdout);
  std::fprintf(stderr,
               "mock Kafka cluster (librdkafka's test mock, in memory, NOT a real broker) with %d "
               "broker(s); stop with Ctrl-C\n",
               brokers);
  int signo = 0;
  sigwait(&set, &signo);
  return kExitOk;
}

}  // namespace walrelay
