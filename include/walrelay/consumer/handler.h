// walrelay's idempotent consumer: what a handler receives and returns (the record, its
// idempotency key, the claim it runs under, and for PostgresStore the transaction it writes
// in). Needs no store's client headers: libpq's connection type is only declared.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

// libpq's connection handle, declared as libpq-fe.h declares it, so that a handler that
// never touches PostgreSQL needs no libpq headers.
typedef struct pg_conn PGconn;

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

// How long the claim of a running handler is known to be held, for the stores whose claims
// are leases (RedisStore, DynamoStore). The consumer sets it from when the claiming call was
// sent; the store's renewal thread extends it from when each accepted renewal was sent, and
// marks it lost when a renewal is refused (another consumer took the key over). Both clocks
// are this process's steady clock, and every time is counted from a request's sending, so
// `until()` is never later than the store's own lease end. Thread-safe.
class ClaimLease {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ClaimLease(Clock::time_point until) : until_(until.time_since_epoch().count()) {}

  // The claim (or its latest renewal) left at `sent_at` for `lease`.
  void HeldFrom(Clock::time_point sent_at, std::chrono::milliseconds lease) {
    until_ = (sent_at + lease).time_since_epoch().count();
  }
  // Another owner holds the key now; nothing extends the claim again.
  void Lost() { lost_ = true; }
  // Whether the claim is still this consumer's: not lost, and its lease not yet over.
  bool held() const { return !lost_ && Clock::now() < until(); }
  // When the lease ends unless renewed; the epoch once the claim is lost.
  Clock::time_point until() const {
    return lost_ ? Clock::time_point{} : Clock::time_point(Clock::duration(until_.load()));
  }

 private:
  std::atomic<Clock::rep> until_;
  std::atomic<bool> lost_{false};
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
  // overwrite the newer claimant's effect. Tokens are per key and restart at 1 when the key's
  // record is created again after it expired: compare them per key only. 0 for PostgresStore,
  // whose row lock already excludes a second runner.
  int64_t fencing_token() const { return fencing_token_; }

  // PostgresStore: the connection, inside the transaction that will mark the key COMPLETED.
  // Do not COMMIT or ROLLBACK on it; return a HandlerResult instead. nullptr for RedisStore.
  PGconn* connection() const {
    if (prelude_ != nullptr) prelude_->Flush();
    return conn_;
  }
  // Whether the store gives handlers a connection (PostgresStore), without touching it.
  bool has_connection() const { return conn_ != nullptr; }

  // Whether this run's claim on the key is still this consumer's. A handler that takes long,
  // or makes several downstream calls, asks before each one and returns Retry once it is
  // false: another consumer may run (or have run) the key meanwhile, and only a fencing
  // token can still keep the late effect out. Always true for PostgresStore, whose row lock
  // holds the key until the handler's transaction ends.
  bool claim_held() const { return lease_ == nullptr || lease_->held(); }
  // When the claim ends unless the store renews it (RedisStore and DynamoStore renew it every
  // third of the lease while the handler runs); the steady clock's maximum for PostgresStore.
  std::chrono::steady_clock::time_point claim_held_until() const {
    return lease_ == nullptr ? std::chrono::steady_clock::time_point::max() : lease_->until();
  }
  // For stores whose claims are leases: the run's lease state (not owned; it outlives the
  // handler call).
  void set_claim_lease(ClaimLease* lease) { lease_ = lease; }
  ClaimLease* claim_lease() const { return lease_; }
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
  ClaimLease* lease_ = nullptr;
};

using Handler = std::function<HandlerResult(HandlerContext&)>;

// The idempotency key of a record, or an error (the record is then dead-lettered at once with
// error class "InvalidIdempotencyKey").
using KeyExtractor = std::function<Result<std::string>(const Message&)>;

}  // namespace walrelay::consumer
