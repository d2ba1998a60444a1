// walrelay's idempotent consumer: the Redis store (a single node or Redis Cluster), leases and
// fencing tokens on the Redis server's clock (docs/consumer.md, "Redis store").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "walrelay/consumer/store.h"

namespace walrelay::consumer {

struct RedisStoreOptions {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;                           // AUTH when not empty; never in errors or logs
  std::string username;                           // ACL user for AUTH (Redis 6+); "" = default user
  std::string key_prefix = "walrelay:consumer:";  // keys are <prefix><consumer>:<key>
  std::chrono::milliseconds timeout = std::chrono::seconds(5);  // connect and command timeout
  // A PENDING key (attempts, last error) outlives its lease by this much, then Redis drops it.
  std::chrono::milliseconds pending_retention = std::chrono::hours(24);
  // Redis Cluster: seed nodes as "host:port". Not empty = cluster mode (host and port are then
  // unused): each key goes to the master of its slot, MOVED and ASK are followed, and a lost
  // master is waited for (its replica's promotion) within `timeout`. username/password apply
  // to every node.
  std::vector<std::string> cluster_nodes;
  // After each COMPLETED mark, WAIT until this many replicas acknowledged it, at most
  // wait_timeout (0 = do not wait: a failover may then lose the latest marks; docs/consumer.md).
  // A shortfall is logged, and the record counts as completed all the same.
  int wait_replicas = 0;
  std::chrono::milliseconds wait_timeout{1000};
  // While a handler runs, renew its claim's lease every third of the lease (from a thread of
  // the store, on a connection of its own), so a slow but live handler is never overtaken;
  // a process that stops stops renewing, and its lease runs out as before.
  bool renew_leases = true;
  // Cluster events (MOVED, ASK, REFRESH, CONNECTION), WAIT shortfalls (WAIT), marks sent
  // again after a lost connection (CONNECTION) and refused lease renewals (RENEW), one line
  // each, starting with the event's name; nullptr = none.
  std::function<void(const std::string&)> log;
};

class RedisStore final : public IdempotencyStore {
 public:
  // Connects, authenticates and loads the scripts. Sets SIGPIPE to be ignored when it has its
  // default action (which would end the process when a server closes a connection).
  static Result<std::unique_ptr<RedisStore>> Connect(const RedisStoreOptions& options);
  ~RedisStore() override;

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
  // Redis expires keys itself (every key carries a TTL): always 0.
  Result<int64_t> CleanupBatch(int batch_size) override;
  // Single node: the batch's claims in one pipeline; each COMPLETED mark is sent as soon as
  // its handler returns and the replies are read once per batch. Cluster: record by record.
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
  // The batch's claims are sent in several script calls at once, and each record's handler
  // runs as soon as the reply holding its claim is read, while Redis works on the later keys.
  // Marks leave one by one, each right after its handler, as in RunBatch.
  Result<BatchRun> ClaimAndRunBatch(const std::string& consumer,
                                    const std::vector<BatchRecord>& records,
                                    const std::string& owner, std::chrono::milliseconds lease,
                                    std::chrono::milliseconds completed_ttl,
                                    const BatchAccept& accept, const Handler& handler) override;

 private:
  struct Impl;
  explicit RedisStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace walrelay::consumer
