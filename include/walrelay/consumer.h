// walrelay's idempotent consumer: a librdkafka consumer-group member that calls a handler at
// most once to completion per idempotency key, however often Kafka delivers the record.
//
// walrelay delivers at least once, so a record may arrive twice (rebalances, poll timeouts,
// restarts, a relay restart that repeats a transaction). Each record's idempotency key (by
// default its `id` header, the outbox event id) is claimed in an IdempotencyStore, scoped by
// ConsumerOptions::name, before the handler runs:
//
//  - PostgresStore (the default choice): the handler receives the open database transaction
//    that also marks the key COMPLETED, so the handler's writes, any outbox rows it adds and
//    the key commit together or not at all. Exactly-once effects for everything in that
//    database.
//  - RedisStore: for handlers whose effects live elsewhere. One atomic Lua script claims the
//    key with a lease on the Redis server's clock. A crash after the effect and before the key
//    is marked COMPLETED repeats the effect; see docs/consumer.md.
//  - DynamoStore: the same guarantees as RedisStore on a DynamoDB table (conditional writes),
//    for services on AWS without a Redis to run.
//
// Records are handled a poll batch at a time (max_batch), in partition order, with the same
// guarantees record by record. The Kafka offset is committed only after the store recorded
// the outcome: per batch by default, or every commit_interval and before partitions are given up in
// a rebalance (cooperative-sticky by default, so a rebalance moves only the partitions that change
// owner while the others keep flowing). A failing handler is retried with exponential backoff up to
// max_attempts (counted in the store, so restarts and crashes count too); then, or at once for a
// non-retriable error, the record goes to the dead-letter topic with reason headers, its key is
// marked FAILED and the partition moves on.
//
// Threading: Run() blocks the calling thread and uses the store from it only; Stop() and
// stats() may be called from any thread. Separate Consumer objects are independent.
#pragma once

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace walrelay::consumer {

struct MessageHeader {
  std::string key;
  std::optional<std::string> value;  // nullopt = null header value
};

// One Kafka record as delivered. Null key/value are nullopt, distinct from "".
struct Message {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<MessageHeader> headers;
  int64_t timestamp_ms = -1;  // -1 when the record has none

  // The first header named `name`, or nullptr.
  const MessageHeader* FindHeader(std::string_view name) const;
};

// What a handler reports. Done's `result` is stored with the COMPLETED key (text, may be
// empty) and handed to observers of later duplicates.
struct HandlerResult {
  enum class Kind { kDone, kRetry, kReject };
  Kind kind = Kind::kDone;
  std::string result;       // kDone
  std::string error_class;  // kRetry/kReject: e.g. "ValidationError", "sqlstate:40001"
  std::string message;      // kRetry/kReject: why, for logs, the key row and the dead letter

  static HandlerResult Done(std::string result = {});
  // Worth another try (unless error_class is listed in non_retriable_errors).
  static HandlerResult Retry(std::string error_class, std::string message);
  // Will never succeed: dead-lettered at once.
  static HandlerResult Reject(std::string error_class, std::string message);
};

// Rows of a query run through HandlerContext::Exec. Values are text; SQL NULL is nullopt.
struct SqlRows {
  std::vector<std::vector<std::optional<std::string>>> rows;
};

// For stores: statements a store has queued to go before the handler's first SQL statement
// (PostgresStore's batches send a record's savepoint with that statement, in one round trip).
class SqlPrelude {
 public:
  virtual ~SqlPrelude() = default;
  // Sends what is queued, then `sql`, and returns the result of `sql`.
  virtual Result<SqlRows> Exec(const std::string& sql,
                               const std::vector<std::optional<std::string>>& params) = 0;
  // Sends what is queued, before the handler uses the connection itself.
  virtual void Flush() = 0;
};

// What the handler receives with the record.
class HandlerContext {
 public:
  HandlerContext(const Message& message, std::string idempotency_key, int attempt, PGconn* conn,
                 int64_t fencing_token = 0)
      : message_(message),
        key_(std::move(idempotency_key)),
        attempt_(attempt),
        conn_(conn),
        fencing_token_(fencing_token) {}

  const Message& message() const { return message_; }
  const std::string& idempotency_key() const { return key_; }
  // 1 for the first run; includes runs that crashed the process.
  int attempt() const { return attempt_; }
  // RedisStore, DynamoStore: the claim's fencing token, larger for every claim of this key.
  // Pass it to downstream writes that can refuse a token lower than one they have seen: a
  // claimant whose lease was taken over (a process paused past its lease) then cannot
  // overwrite the newer claimant's effect. 0 for PostgresStore, whose row lock already excludes a
  // second runner.
  int64_t fencing_token() const { return fencing_token_; }

  // PostgresStore: the connection, inside the transaction that will mark the key COMPLETED.
  // Do not COMMIT or ROLLBACK on it; return a HandlerResult instead. nullptr for RedisStore.
  PGconn* connection() const {
    if (prelude_ != nullptr) prelude_->Flush();
    return conn_;
  }
  // Whether the store gives handlers a connection (PostgresStore), without touching it.
  bool has_connection() const { return conn_ != nullptr; }
  // For stores: statements to send before the handler's first one.
  void set_prelude(SqlPrelude* prelude) { prelude_ = prelude; }

  // Runs one SQL statement with text parameters ($1, $2, ...) in that transaction. A failure
  // becomes a Status whose message starts with "sqlstate:<code>: "; SqlFailure() turns it into
  // the HandlerResult to return. Error without a connection (RedisStore).
  Result<SqlRows> Exec(const std::string& sql,
                       const std::vector<std::optional<std::string>>& params = {}) const;
  // Retry (or Reject, via non_retriable_errors) with error_class "sqlstate:<code>".
  static HandlerResult SqlFailure(const Status& status);

 private:
  const Message& message_;
  std::string key_;
  int attempt_;
  PGconn* conn_;
  int64_t fencing_token_;
  SqlPrelude* prelude_ = nullptr;
};

using Handler = std::function<HandlerResult(HandlerContext&)>;

// The idempotency key of a record, or an error (the record is then dead-lettered at once with
// error class "InvalidIdempotencyKey").
using KeyExtractor = std::function<Result<std::string>(const Message&)>;

// --- Stores ------------------------------------------------------------------------------

// The answer to a claim on a key.
struct Claim {
  enum class State {
    kAcquired,   // free or new: this owner may run the handler
    kTakenOver,  // another owner's lease had expired: this owner took it
    kDuplicate,  // COMPLETED before: skip; `result` holds the stored result
    kFailed,     // dead-lettered before: skip
    kConflict,   // another owner holds a live lease: try again after `retry_after`
  };
  State state = State::kAcquired;
  int attempts = 0;                          // runs started so far, this one included
  std::string result;                        // kDuplicate
  std::string last_error;                    // the latest recorded failure, if any
  std::string previous_owner;                // kTakenOver, kConflict
  std::chrono::milliseconds retry_after{0};  // kConflict: until the holder's lease ends
  int64_t fencing_token = 0;  // kAcquired, kTakenOver: this claim's token (Redis, DynamoDB)
  // The hash of the payload the key was first claimed with (PayloadHash); "" when the key is
  // new or was stored before hashes were kept.
  std::string payload_hash;
};

// SHA-256 of the record's value, in hex, with a null value distinct from an empty one: what the
// stores keep with a key to recognise the same key coming back with another payload.
std::string PayloadHash(const Message& message);

const char* ClaimStateName(Claim::State state);

// How a claimed run ended.
struct RunOutcome {
  enum class Kind {
    kCompleted,  // handler done and key COMPLETED (with the handler's writes, for Postgres)
    kFailed,     // handler failed; nothing of it was kept (Postgres) / key still claimed
    kLost,       // the claim was no longer ours when completing: re-claim to see who won
  };
  Kind kind = Kind::kCompleted;
  HandlerResult handler;  // what the handler returned
};

// One record of a batch handed to AcquireBatch / RunBatch, in poll order.
struct BatchRecord {
  const Message* message = nullptr;
  std::string key;
  Claim claim;  // RunBatch: the record's granted claim (attempts, fencing token)
};

// What ClaimAndRunBatch did with a batch.
struct BatchRun {
  // One claim per record, up to and including the first one `accept` refused (every record's
  // when none was refused).
  std::vector<Claim> claims;
  // The outcomes of the accepted, granted records before the refused one, in order, as
  // RunBatch returns them (a prefix; the last may be kFailed).
  std::vector<RunOutcome> outcomes;
  // Nothing was kept: the caller processes the accepted records one by one (Acquire, Run).
  bool one_by_one = false;
};

// Whether a batch may go on with this record's claim (false: the record goes alone).
using BatchAccept = std::function<bool(const BatchRecord&, const Claim&)>;

// Keeps, per (consumer name, key), whether a handler ran to completion. Implementations must
// make Acquire atomic against concurrent Acquire calls for the same key from any process.
//
// The consumer works a poll batch at a time through AcquireBatch and RunBatch; their default
// implementations call the per-record methods one after the other, so a store only has to
// override them to save round trips. Both keep the per-record guarantees exactly.
class IdempotencyStore {
 public:
  virtual ~IdempotencyStore() = default;
  // Claims `key` for `owner` for `lease`, counting an attempt when it is granted.
  virtual Result<Claim> Acquire(const std::string& consumer, const std::string& key,
                                const std::string& owner, std::chrono::milliseconds lease,
                                const Message& message) = 0;
  // Runs `handler` under the claim and, if it succeeds, marks the key COMPLETED with a
  // retention of `completed_ttl`.
  virtual Result<RunOutcome> Run(const std::string& consumer, const std::string& key,
                                 const std::string& owner, std::chrono::milliseconds completed_ttl,
                                 const Message& message, int attempt, const Handler& handler) = 0;
  // Gives up the claim after a failed run (the key stays PENDING, attempts kept).
  virtual Status Release(const std::string& consumer, const std::string& key,
                         const std::string& owner, const std::string& error) = 0;
  // Marks the key FAILED (dead-lettered) with a retention of `failed_ttl`, if it is still
  // `owner`'s claim with `fencing_token` (0: the owner alone is checked) or no longer exists.
  // False when the key was left alone: another claim holds it, or it is COMPLETED; the failure
  // of a claim that was taken over is dropped like the claim.
  virtual Result<bool> MarkFailed(const std::string& consumer, const std::string& key,
                                  const std::string& owner, int64_t fencing_token,
                                  const std::string& error,
                                  std::chrono::milliseconds failed_ttl) = 0;
  // Deletes up to `batch_size` expired keys; returns how many. Stores whose keys expire on
  // their own return 0.
  virtual Result<int64_t> CleanupBatch(int batch_size) = 0;

  // Claims every record's key (distinct keys, in order): one Claim per record, each the answer
  // Acquire would have given. An error means no claim is known; the caller claims again.
  virtual Result<std::vector<Claim>> AcquireBatch(const std::string& consumer,
                                                  const std::vector<BatchRecord>& records,
                                                  const std::string& owner,
                                                  std::chrono::milliseconds lease);
  // Runs the handler for the records (all claimed by `owner`) in order and records each
  // outcome. Returns the outcomes of a prefix: every entry but the last is kCompleted or kLost,
  // the last may be kFailed, and the run stops there. Records past the prefix were not run
  // (or were undone): their claims are given back with the attempt uncounted. An empty result
  // asks the caller to process the records one by one (Acquire and Run), which it must do.
  // An error means the outcome of every record is unknown; the caller claims them again.
  virtual Result<std::vector<RunOutcome>> RunBatch(const std::string& consumer,
                                                   const std::vector<BatchRecord>& records,
                                                   const std::string& owner,
                                                   std::chrono::milliseconds completed_ttl,
                                                   const Handler& handler);
  // Gives back a claim that no handler used, uncounting its attempt. The default keeps the
  // claim: this owner's next Acquire takes it again, counting one attempt more.
  virtual Status Unclaim(const std::string& consumer, const std::string& key,
                         const std::string& owner);

  // Claims and runs a batch in one step: the records' keys are claimed, `accept` is asked
  // about each claim in order, and the handlers of the accepted, granted records before the
  // first refused one are run and their outcomes recorded, with RunBatch's guarantees. The
  // claims of records after the refused one are given back uncounted. The default is
  // AcquireBatch then RunBatch, whose claims are durable before any handler runs (a crash
  // inside a handler leaves its attempt counted); a store may override it to claim and run
  // in one transaction.
  virtual Result<BatchRun> ClaimAndRunBatch(const std::string& consumer,
                                            const std::vector<BatchRecord>& records,
                                            const std::string& owner,
                                            std::chrono::milliseconds lease,
                                            std::chrono::milliseconds completed_ttl,
                                            const BatchAccept& accept, const Handler& handler);
};

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

struct DynamoStoreOptions {
  // "http://host:port" or "https://host[:port]"; "" = $AWS_ENDPOINT_URL_DYNAMODB, then
  // $AWS_ENDPOINT_URL, then https://dynamodb.<region>.amazonaws.com (.com.cn for cn-*).
  std::string endpoint;
  // "" = $AWS_REGION, then $AWS_DEFAULT_REGION, then the region in the endpoint's host
  // (dynamodb.<region>.amazonaws.com), then the profile's `region` in the AWS config file,
  // then "us-east-1".
  std::string region;
  // "" = AWS's default credential chain, first configured source wins: $AWS_ACCESS_KEY_ID /
  // $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN; web identity ($AWS_WEB_IDENTITY_TOKEN_FILE and
  // $AWS_ROLE_ARN, at STS); profile $AWS_PROFILE's keys in the shared credentials and config
  // files; container credentials ($AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI);
  // the instance metadata service (IMDSv2) unless $AWS_EC2_METADATA_DISABLED=true
  // (docs/consumer.md, "Credentials, region and endpoint"). Temporary credentials are fetched
  // again before they expire, and when DynamoDB refuses them as expired or unknown. The secret
  // and the session token never appear in errors or logs.
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  // The keys table: hash key `consumer`, range key `idempotency_key` (both strings), with
  // DynamoDB's TTL on the number attribute `expires_at` (CreateSchema makes it so).
  std::string table = "walrelay_consumer_keys";
  // Connect and each call; also each HTTP call fetching credentials (the instance metadata
  // service's at most 1 s).
  std::chrono::milliseconds timeout = std::chrono::seconds(5);
  // A PENDING key (attempts, last error) is kept this long after its lease ends.
  std::chrono::milliseconds pending_retention = std::chrono::hours(24);
  // As RedisStoreOptions::renew_leases: the running handler's lease is renewed every third of
  // the lease, on a connection of its own.
  bool renew_leases = true;
  // Refused lease renewals (RENEW), throttled calls sent again (THROTTLED), credentials
  // refused or a refresh outlived (CREDENTIALS), a clock correction (CLOCK), one line each.
  std::function<void(const std::string&)> log;
};

// DynamoStore: one item per key in a DynamoDB table; every change is one conditional write
// (ConditionExpression), so each is atomic on the server. DynamoDB has no server clock in
// expressions: a lease is an attribute holding its end in milliseconds, compared in the
// condition with the time the request carries, so members' clocks must agree to well within a
// lease (the fencing token, larger for every claim, guards the completion whatever the clocks
// say). Expired keys are removed by DynamoDB's TTL and treated as absent before that. Like
// RedisStore, handlers get no transaction: a crash after the effect and before the COMPLETED
// mark repeats the effect.
class DynamoStore final : public IdempotencyStore {
 public:
  // Checks the options and the credentials, and opens the connection.
  static Result<std::unique_ptr<DynamoStore>> Connect(const DynamoStoreOptions& options);
  ~DynamoStore() override;

  // Creates the table (on-demand capacity) if missing, waits until it is ACTIVE and enables
  // TTL on `expires_at` where the server supports it.
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
  // DynamoDB's TTL deletes expired items: always 0.
  Result<int64_t> CleanupBatch(int batch_size) override;
  // The batch's claims on up to eight connections at once (one conditional write per key).
  Result<std::vector<Claim>> AcquireBatch(const std::string& consumer,
                                          const std::vector<BatchRecord>& records,
                                          const std::string& owner,
                                          std::chrono::milliseconds lease) override;
  Status Unclaim(const std::string& consumer, const std::string& key,
                 const std::string& owner) override;

 private:
  struct Impl;
  explicit DynamoStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Deletes expired keys in batches of `batch_size` until none is left; returns the total.
Result<int64_t> Cleanup(IdempotencyStore& store, int batch_size);

// --- The consumer ------------------------------------------------------------------------

enum class LogLevel { kDebug, kInfo, kWarn, kError };
using LogFunction = std::function<void(LogLevel, const std::string&)>;

// What happened to one record, for ConsumerOptions::on_processed.
struct RecordOutcome {
  enum class Kind {
    kCompleted,      // the handler ran to completion now
    kDuplicate,      // the key was COMPLETED before; handler not called
    kDeadLettered,   // published to the dead-letter topic now, key FAILED
    kAlreadyFailed,  // the key was dead-lettered before; skipped
  };
  Kind kind = Kind::kCompleted;
  std::string idempotency_key;
  int attempts = 0;
  std::string result;  // kCompleted, kDuplicate: the handler's result
  std::string error;   // kDeadLettered: "class: message"
};

const char* RecordOutcomeName(RecordOutcome::Kind kind);

// What the consumer does with a record whose key was first seen with another payload.
enum class PayloadMismatch {
  kDeadLetter,  // dead-lettered with error class "payload-mismatch"; the key is left as it is
  kSkip,        // skipped like a duplicate of the key's first payload
};

struct ConsumerOptions {
  // Scopes the idempotency keys: consumers with the same name share one set of keys (run
  // several instances of one service under one name), different names are independent.
  std::string name;
  std::string bootstrap_servers;
  std::string group_id;  // "" = name
  std::vector<std::string> topics;
  // Any other librdkafka consumer property (security.protocol, sasl.*, session.timeout.ms...).
  // enable.auto.commit and enable.auto.offset.store are always false.
  std::map<std::string, std::string> kafka_properties;

  // The header holding the idempotency key, and the key extractor that replaces it when set.
  std::string key_header = "id";
  KeyExtractor key_extractor;

  // Handler runs per key before the record is dead-lettered (>= 1).
  int max_attempts = 5;
  // Wait before run n+1: backoff_initial * 2^(n-1), at most backoff_max.
  std::chrono::milliseconds backoff_initial{200};
  std::chrono::milliseconds backoff_max{10000};
  // Dead-letter topic; "" = "<name>.dlq".
  std::string dead_letter_topic;
  // Error classes that skip the retries: exact names, or a prefix ending in '*'.
  std::vector<std::string> non_retriable_errors = {"sqlstate:22*", "sqlstate:23*"};
  // A key that comes back with another payload (a hash of the value is stored with the key)
  // is never taken for a plain duplicate: it is counted, logged as an error naming the key,
  // and dead-lettered (or skipped).
  PayloadMismatch payload_mismatch = PayloadMismatch::kDeadLetter;

  // How long a claim holds a key before another consumer may take it over. Must exceed the
  // handler's longest run for RedisStore (PostgresStore also holds the row lock while running).
  std::chrono::milliseconds lease{30000};
  // How long COMPLETED and FAILED keys are kept: the window in which duplicates are caught.
  std::chrono::milliseconds completed_ttl = std::chrono::hours(24 * 7);
  std::chrono::milliseconds failed_ttl = std::chrono::hours(24 * 7);
  // Wait between retries when the store is unreachable.
  std::chrono::milliseconds store_retry_backoff{1000};
  // 0 (the default): each record's offset is committed synchronously before the next poll,
  // so nothing finished is ever redelivered, at one broker round trip per record. Above 0:
  // offsets are committed asynchronously this often, and synchronously when partitions are
  // revoked and when Run() returns: faster, but a crash, or partitions *lost* in a rebalance
  // (the member was thrown out of the group), redelivers up to this much finished work, which
  // the store then skips (docs/consumer.md has measurements).
  std::chrono::milliseconds commit_interval{0};
  // Records handled as one batch: what one poll returns, up to this many. Their keys are
  // claimed together and their outcomes recorded together (one transaction for PostgresStore,
  // a savepoint per record); with commit_interval 0 their offsets are committed once the
  // store has recorded every outcome. 1 = one record at a time.
  size_t max_batch = 500;

  // Called after the store recorded a record's outcome and before its offset is committed.
  std::function<void(const Message&, const RecordOutcome&)> on_processed;
  // Log lines; nullptr = stderr for warnings and errors.
  LogFunction log;
  // Receives Consumer::MetricsText() every metrics_interval, from Run()'s thread, for an
  // application that pushes its metrics or caches them for its /metrics endpoint; nullptr =
  // none (MetricsText() can be called from any thread instead).
  std::function<void(const std::string& prometheus_text)> metrics_hook;
  std::chrono::milliseconds metrics_interval{10000};
};

struct ConsumerStats {
  int64_t completed = 0;
  int64_t duplicates = 0;
  int64_t dead_lettered = 0;
  int64_t retries = 0;             // failed runs that were tried again
  int64_t conflicts = 0;           // claims refused because another owner held the key
  int64_t takeovers = 0;           // expired claims taken over
  int64_t payload_mismatches = 0;  // keys that came back with another payload
  int64_t claims = 0;              // claims granted (a handler run may follow)
  // Claimed records whose handler the consumer did not start, and claimed again: the claim had
  // waited half its lease behind the records before it, or the group was due a poll.
  int64_t handlers_not_started = 0;
  int64_t handler_runs = 0;  // handler calls, and their total duration
  double handler_seconds = 0;
};

class Consumer {
 public:
  // Checks the options and creates the Kafka consumer and the dead-letter producer. The
  // store must outlive the consumer. Errors name the option that is wrong.
  static Result<std::unique_ptr<Consumer>> Create(ConsumerOptions options, IdempotencyStore& store,
                                                  Handler handler);
  ~Consumer();
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // Subscribes and processes records until Stop(). Returns an error only for what it cannot
  // get past: a dead-letter record Kafka refused, or a fatal Kafka client error. A record
  // interrupted by Stop() is not committed and is redelivered later.
  Status Run();
  // Makes Run() return soon, also from a backoff wait. Thread-safe.
  void Stop();

  ConsumerStats stats() const;
  // The counters of stats() and a histogram of handler durations in Prometheus' text format
  // (version 0.0.4), labelled consumer="<name>". Thread-safe.
  std::string MetricsText() const;
  // This instance's owner token (host:pid:random), as stored in locked_by.
  const std::string& owner() const;

 private:
  struct Impl;
  explicit Consumer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace walrelay::consumer
