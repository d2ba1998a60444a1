#include "relay/running_relay.h"

#include <algorithm>
#include <chrono>

namespace walrelay {

double RunningRelay::ReplicationLagSeconds() const {
  if (state() == RelayState::kStreaming && !paused() && pipeline().idle()) return 0;
  const int64_t last_acked = pipeline().last_acked_commit_ms();
  if (last_acked == 0) return 0;
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return static_cast<double>(std::max<int64_t>(0, now - last_acked)) / 1000.0;
}

}  // namespace walrelay
