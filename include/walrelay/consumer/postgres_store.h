// walrelay's idempotent consumer: the PostgreSQL store, whose handlers write in the same
// transaction that marks their key COMPLETED (docs/consumer.md, "PostgreSQL store").
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <string>

#include "walrelay/consumer/store.h"

namespace walrelay::consumer {

struct PostgresStoreOptions {
  // libpq connection string or URI. Its password never appears in errors or logs.
  std::string conninfo;
  // The processed-keys table: "name" or "schema.name" (letters, digits, '_').
  std::string table = "public.walrelay_consumer_keys";
  // PENDING rows whose lease ended this long ago are deleted by Cleanup too (a record that
  // was never redelivered); its attempts are forgotten, nothing else.
  std::chrono::milliseconds pending_retention = std::chrono::hours(24);
};

class PostgresStore final : public IdempotencyStore {
 public:
  // Connects. The table must exist (CreateSchema or docs/consumer.sql).
  static Result<std::unique_ptr<PostgresStore>> Connect(const PostgresStoreOptions& options);
  ~PostgresStore() override;

  // Creates the table and its expires_at index if missing (docs/consumer.sql, with `table`).
  Status CreateSchema();

  Result<Claim> Acquire(const std::string& consumer, const std::string& key,
                        const std::string& owner, std::chrono::milliseconds lease,
                        const Message& message) override;
  Result<RunOutcome> Run(const std::string& consumer, const std::string& key,
                         const std::string& owner, std::chrono::milliseconds completed_ttl,
                         const Message& message, int attempt, const Handler& handler) override;
  Status Release(const std::string& consumer, const std::string& key, const std::string& owner,
                 const std::string& error) override;
  Result<bool> MarkFailed(const std::string& consumer, const std::string& key,
                          const std::string& owner, int64_t fencing_token, const std::string& error,
                          std::chrono::milliseconds failed_ttl) override;
  Result<int64_t> CleanupBatch(int batch_size) override;
  // One pipelined transaction claims the whole batch; one transaction runs it, with a
  // savepoint per record so a failed handler undoes only its own writes.
  Result<std::vector<Claim>> AcquireBatch(const std::string& consumer,
                                          const std::vector<BatchRecord>& records,
                                          const std::string& owner,
                                          std::chrono::milliseconds lease) override;
  Result<std::vector<RunOutcome>> RunBatch(const std::string& consumer,
                                           const std::vector<BatchRecord>& records,
                                           const std::string& owner,
                                           std::chrono::milliseconds completed_ttl,
                                           const Handler& handler) override;
  Status Unclaim(const std::string& consumer, const std::string& key,
                 const std::string& owner) override;
  // One transaction claims and runs the batch: the new keys' rows are inserted COMPLETED
  // (their insertion locks them until the COMMIT), each handler runs under a savepoint, and
  // only the rows of records that did not complete are changed before the COMMIT. Batches
  // with keys another claim holds or left PENDING take the two-step default.
  Result<BatchRun> ClaimAndRunBatch(const std::string& consumer,
                                    const std::vector<BatchRecord>& records,
                                    const std::string& owner, std::chrono::milliseconds lease,
                                    std::chrono::milliseconds completed_ttl,
                                    const BatchAccept& accept, const Handler& handler) override;

 private:
  struct Impl;
  explicit PostgresStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace walrelay::consumer
