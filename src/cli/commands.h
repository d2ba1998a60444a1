// The walrelay subcommands, each returning the process exit code (see docs/operations.md).
#pragma once

#include <memory>
#include <string>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "common/status.h"
#include "config/relay_settings.h"
#include "relay/running_relay.h"

namespace walrelay {

// Exit codes, one per failure class so supervisors and scripts can tell them apart.
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitConfig = 2,
  kExitConnection = 3,
  kExitSetup = 4,
  kExitKafka = 5,
  kExitTransform = 6,
  kExitDecode = 7,
  kExitKafkaAuthentication = 8,
  kExitKafkaTls = 9,
  kExitWalLevel = 10,
  kExitNoReplicationRole = 11,
  kExitTableMissing = 12,
  kExitSlotMissing = 13,
  kExitSlotInvalidated = 14,
  kExitSlotWrongPlugin = 15,
  kExitSlotGone = 16,
  kExitPublicationMissing = 17,
  kExitPublicationLacksTable = 18,
  kExitPublicationPrivilege = 19,
  kExitFenced = 20,
  kExitOffsetMismatch = 21,
  kExitSlotWalRemoved = 22,
};

int ExitCodeFor(const Status& status);

int RunRelayCommand(const std::string& config_path, bool log_level_given);
int ValidateCommand(const std::string& config_path);
struct DevKafkaOptions {
  std::string broker = "mock";  // mock: librdkafka's mock cluster; apache: a real broker
  int brokers = 1;
};
int DevKafkaCommand(const DevKafkaOptions& options);
// `real_broker`: a real Apache Kafka broker instead of the mock cluster.
// source.mode=polling relays the outbox table by polling it (docs/polling.md).
int DemoCommand(int events, bool real_broker, bool polling = false);

// The relay source.mode asks for: a replication slot's, or the polled outbox table's.
Result<std::unique_ptr<RunningRelay>> CreateRelay(RelaySettings settings,
                                                  boost::asio::io_context& io);

struct ConsumerGcOptions {
  std::string conninfo;  // libpq connection string; PG* environment variables apply too
  std::string table = "public.walrelay_consumer_keys";
  int batch_size = 1000;
  int pending_retention_hours = 24;
};
int ConsumerGcCommand(const ConsumerGcOptions& options);

}  // namespace walrelay
