// TopicReader: reads Kafka topics back the way a downstream consumer would, so the demo and the
// integration tests can check exactly what walrelay produced (keys, values, headers, nulls).
//
// Contract: Assign() takes every partition of the named topics from the beginning, without
// joining a consumer group and without committing offsets, so readers never affect each other
// or any real group. Records come back in per-partition offset order; there is no order across
// partitions. Null keys, values and header values are std::nullopt, distinct from "".
// Poll() and ReadAtLeast() never fail on a timeout: they return what arrived and the caller
// asserts on it. Consumer errors other than partition EOF are recorded in last_error().
//
// Thread-safety: not thread-safe; use one TopicReader from one thread. Separate readers are
// independent.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/rdkafka_handles.h"
#include "common/status.h"
#include "transform/record.h"

namespace walrelay::devtools {

struct ConsumedRecord {
  std::string topic;
  int32_t partition = 0;
  int64_t offset = 0;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<walrelay::Header> headers;
  int64_t timestamp_ms = 0;  // -1 if the record has none
};

// What a reader sees of transactional producers' records (Kafka's isolation.level).
// kReadCommitted, librdkafka's default and the default here, reads only committed
// transactions and stops at the first open one; kReadUncommitted also reads the records of
// aborted and still open transactions, as the Java client does by default.
enum class IsolationLevel { kReadCommitted, kReadUncommitted };

class TopicReader {
 public:
  static Result<std::unique_ptr<TopicReader>> Create(
      const std::string& bootstrap_servers,
      IsolationLevel isolation = IsolationLevel::kReadCommitted);

  TopicReader(const TopicReader&) = delete;
  TopicReader& operator=(const TopicReader&) = delete;
  ~TopicReader();

  // Adds all partitions of `topics` (from offset 0) to the assignment. Waits up to ~10 s for
  // each topic to exist. Topics already assigned are left where they are, so calling it again
  // with more topics never re-delivers records.
  Status Assign(const std::vector<std::string>& topics);

  // Everything that arrives within `timeout`; always waits the full timeout.
  std::vector<ConsumedRecord> Poll(std::chrono::milliseconds timeout);

  // Assigns `topics` like Assign(), then polls until `expected` records have arrived (counting
  // only this call's records, across all topics) or `timeout` passes. Topics that do not exist
  // yet are looked up again until the timeout instead of failing after 10 s; if some never
  // appear, the records read so far are returned and last_error() names the missing topics.
  // Returns early once `expected` is reached, so more records may follow; errors only if the
  // assignment itself fails.
  Result<std::vector<ConsumedRecord>> ReadAtLeast(const std::vector<std::string>& topics,
                                                  size_t expected,
                                                  std::chrono::milliseconds timeout);

  // Topic names on the cluster, sorted, without internal ("__"-prefixed) topics.
  Result<std::vector<std::string>> ListTopics();

  // The most recent consumer error ("" if none).
  std::string last_error() const;

 private:
  TopicReader() = default;
  static void ErrorCallback(rd_kafka_t* rk, int err, const char* reason, void* opaque);
  void SetLastError(std::string error);
  // One metadata lookup: assigns the partitions of those `topics` that exist and are not yet
  // assigned. `missing` receives the topics still absent, `problem` the latest lookup error.
  Status AssignExisting(const std::vector<std::string>& topics, int metadata_timeout_ms,
                        std::set<std::string>& missing, std::string& problem);
  // Polls for at most `timeout`, appending records to `out`; stops early after `stop_after`
  // records in total have been appended to `out`.
  void PollInto(std::vector<ConsumedRecord>& out, std::chrono::milliseconds timeout,
                size_t stop_after);

  KafkaConsumerPtr consumer_;
  std::set<std::pair<std::string, int32_t>> assigned_;
  mutable std::mutex error_mu_;  // error_cb runs on librdkafka's threads
  std::string last_error_;
};

// Multi-line rendering for humans (the demo's output):
//   topic=t partition=0 offset=5
//     key: ...
//     headers: id=..., type=...
//     timestamp: 1700000000000 (2023-11-14T22:13:20.000Z)
//     value: ...
// Lines are joined by '\n' with no trailing newline. Null keys, values and header values
// print as (null); control bytes as \xNN; a record without timestamp as (none).
std::string FormatRecord(const ConsumedRecord& record);

}  // namespace walrelay::devtools
