#include "relay/progress_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

namespace walrelay {

ProgressLog::ProgressLog(boost::asio::io_context& io, const RunningRelay& relay)
    : relay_(relay), timer_(io) {}

void ProgressLog::Start() {
  errors_retry_timeout_ms_ = relay_.settings().errors_retry_timeout_ms;
  last_time_ = std::chrono::steady_clock::now();
  Arm();
}

void ProgressLog::Arm() {
  const int64_t interval_ms = relay_.settings().progress_interval_ms;
  if (interval_ms <= 0) return;
  timer_.expires_after(std::chrono::milliseconds(interval_ms));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || relay_.state() == RelayState::kStopped) return;
    Report(relay_.counters(), relay_.pipeline(), relay_.ReplicationLagSeconds(),
           relay_.paused() ? "PAUSED" : RelayStateName(relay_.state()));
    Arm();
  });
}

void ProgressLog::Report(const RelayCounters& counters, const RecordPipeline& pipeline,
                         double lag_seconds, const char* state) {
  uint64_t read = 0;
  uint64_t acked = 0;
  for (const auto& entry : counters.source_records) read += entry.second;
  for (const auto& entry : counters.acked) acked += entry.second;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::max(0.001, std::chrono::duration<double>(now - last_time_).count());
  spdlog::info("progress: {:.1f} records/s read, {:.1f} records/s acked, lag {:.1f} s, confirmed "
               "LSN {}, {} in flight, {}",
               static_cast<double>(read - last_read_) / seconds,
               static_cast<double>(acked - last_acked_) / seconds, lag_seconds,
               pipeline.Confirmable().ToString(), pipeline.inflight_records(), state);
  last_read_ = read;
  last_acked_ = acked;
  last_time_ = now;
  WarnIfStalled(pipeline);
}

void ProgressLog::WarnIfStalled(const RecordPipeline& pipeline) {
  const auto now = std::chrono::steady_clock::now();
  const std::optional<Dispatcher::Waiting> oldest = pipeline.OldestWaiting();
  const std::optional<uint64_t> ticket =
      oldest ? std::optional<uint64_t>(oldest->ticket) : std::nullopt;
  if (!oldest || ticket != stall_ticket_) {
    stall_ticket_ = ticket;
    stall_since_ = now;
    return;
  }
  spdlog::warn("a record for topic '{}' ({} at LSN {}) has waited over {} s for Kafka's "
               "acknowledgement; librdkafka retries it until errors.retry.timeout ({}), and the "
               "slot stays confirmed at {} meanwhile. Usual causes: a broker down, or the topic "
               "has fewer in-sync replicas than its min.insync.replicas (NOT_ENOUGH_REPLICAS); "
               "see the broker's log",
               oldest->topic, DescribeOrigin(oldest->source.table), oldest->source.lsn.ToString(),
               std::chrono::duration_cast<std::chrono::seconds>(now - stall_since_).count(),
               errors_retry_timeout_ms_ > 0 ? std::to_string(errors_retry_timeout_ms_) + " ms"
                                            : std::string("-1: forever"),
               pipeline.Confirmable().ToString());
}

}  // namespace walrelay
