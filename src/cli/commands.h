// The walrelay subcommands, each returning the process exit code (see docs/operations.md).
#pragma once

#include <string>

#include "common/status.h"

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
  kExitWalLevel = 10,
  kExitNoReplicationRole = 11,
  kExitTableMissing = 12,
  kExitSlotMissing = 13,
  kExitSlotInvalidated = 14,
  kExitSlotWrongPlugin = 15,
};

int ExitCodeFor(const Status& status);

int RunRelayCommand(const std::string& config_path, bool log_level_given);
int ValidateCommand(const std::string& config_path);
int DevKafkaCommand(int brokers);
int DemoCommand(int events);

struct ConsumerGcOptions {
  std::string conninfo;  // libpq connection string; PG* environment variables apply too
  std::string table = "public.walrelay_consumer_keys";
  int batch_size = 1000;
  int pending_retention_hours = 24;
};
int ConsumerGcCommand(const ConsumerGcOptions& options);

}  // namespace walrelay
