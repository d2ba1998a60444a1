// `walrelay consumer-gc`: deletes expired keys from an idempotent consumer's PostgreSQL table
// in batches (see docs/consumer.md). Meant for cron or a Kubernetes CronJob; each batch is its
// own short transaction, so it never holds many locks and can be stopped at any point.
#include <cstdio>

#include "cli/commands.h"
#include "walrelay/consumer.h"

namespace walrelay {

int ConsumerGcCommand(const ConsumerGcOptions& options) {
  consumer::PostgresStoreOptions store_options;
  store_options.conninfo = options.conninfo;
  store_options.table = options.table;
  store_options.pending_retention = std::chrono::hours(options.pending_retention_hours);
  auto store = consumer::PostgresStore::Connect(store_options);
  if (!store.ok()) {
    std::fprintf(stderr, "consumer-gc: %s\n", store.status().ToString().c_str());
    return ExitCodeFor(store.status());
  }
  int64_t total = 0;
  int batches = 0;
  while (true) {
    auto n = (*store)->CleanupBatch(options.batch_size);
    if (!n.ok()) {
      std::fprintf(stderr, "consumer-gc: %s (after deleting %lld keys)\n",
                   n.status().ToString().c_str(), static_cast<long long>(total));
      return ExitCodeFor(n.status());
    }
    total += *n;
    ++batches;
    if (*n < options.batch_size) break;
  }
  std::printf("consumer-gc: deleted %lld expired keys from %s in %d batch(es) of up to %d\n",
              static_cast<long long>(total), options.table.c_str(), batches, options.batch_size);
  return kExitOk;
}

}  // namespace walrelay
