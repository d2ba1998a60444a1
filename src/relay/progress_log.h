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
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "delivery/record_pipeline.h"
#include "relay/running_relay.h"
#include "status/metrics.h"

namespace walrelay {

class ProgressLog {
 public:
  // Reports on `relay` every log.progress.interval.ms (none when it is 0) on `io`'s loop thread,
  // from Start() until Stop().
  ProgressLog(boost::asio::io_context& io, const RunningRelay& relay);

  void Start();
  void Stop() { timer_.cancel(); }

 private:
  void Arm();
  void Report(const RelayCounters& counters, const RecordPipeline& pipeline, double lag_seconds,
              const char* state);
  void WarnIfStalled(const RecordPipeline& pipeline);

  const RunningRelay& relay_;
  boost::asio::steady_timer timer_;
  int64_t errors_retry_timeout_ms_ = -1;
  uint64_t last_read_ = 0;
  uint64_t last_acked_ = 0;
  std::chrono::steady_clock::time_point last_time_;
  // The oldest record in flight at the previous line, and since when it was seen.
  std::optional<uint64_t> stall_ticket_;
  std::chrono::steady_clock::time_point stall_since_;
};

}  // namespace walrelay
