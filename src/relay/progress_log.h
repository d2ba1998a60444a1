// ProgressLog: the info line the relay writes every log.progress.interval.ms (records read and
// acknowledged per second since the last line, lag, confirmed LSN, records in flight, state),
// and a warning when the oldest record in flight has waited a whole interval: librdkafka
// retries an unreachable broker or a retriable refusal (NOT_ENOUGH_REPLICAS, no leader) until
// errors.retry.timeout, forever by default, and logs such retries only at debug level, so
// without the warning a relay held that way would look merely idle.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "delivery/record_pipeline.h"
#include "status/metrics.h"

namespace walrelay {

class ProgressLog {
 public:
  explicit ProgressLog(int64_t errors_retry_timeout_ms)
      : errors_retry_timeout_ms_(errors_retry_timeout_ms) {}

  // Starts the first interval.
  void Start() { last_time_ = std::chrono::steady_clock::now(); }
  void Report(const RelayCounters& counters, const RecordPipeline& pipeline, double lag_seconds,
              const char* state);

 private:
  void WarnIfStalled(const RecordPipeline& pipeline);

  int64_t errors_retry_timeout_ms_;
  uint64_t last_read_ = 0;
  uint64_t last_acked_ = 0;
  std::chrono::steady_clock::time_point last_time_;
  // The oldest record in flight at the previous line, and since when it was seen.
  std::optional<uint64_t> stall_ticket_;
  std::chrono::steady_clock::time_point stall_since_;
};

}  // namespace walrelay
