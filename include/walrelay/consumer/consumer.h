// walrelay's idempotent consumer: the consumer-group member that polls, claims each record's
// key in an IdempotencyStore, runs the handler and commits offsets once outcomes are recorded.
// walrelay/consumer.h has the overview.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "walrelay/consumer/handler.h"
#include "walrelay/consumer/store.h"

namespace walrelay::consumer {

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

  // How long a claim holds a key before another consumer may take it over, counted from when
  // the claiming request was sent. A handler starts only on a claim younger than half of it;
  // RedisStore and DynamoStore renew it every third of it while the handler runs (the first
  // renewal a third of the lease after the claim); PostgresStore's row lock holds the key for
  // the whole run, and a claimant waits at most one lease per store call for a locked row.
  // Keep it under half of max.poll.interval.ms. HandlerContext::claim_held() tells a handler
  // whether it still holds the key.
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
