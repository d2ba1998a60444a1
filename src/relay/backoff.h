// Backoff: how long the relay waits before its next connection attempt. Exponential from
// reconnect.backoff.ms to reconnect.backoff.max.ms, with "equal jitter" (half fixed, half
// random) so a fleet of relays that lost the same server does not reconnect in step.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace walrelay {

class Backoff {
 public:
  Backoff(int64_t initial_ms, int64_t max_ms) : initial_ms_(initial_ms), max_ms_(max_ms) {}

  // Counts a failed attempt and returns the delay before the next one.
  std::chrono::milliseconds Failed() {
    ++failures_;
    const int shift = std::clamp(failures_ - 1, 0, 20);
    const int64_t ceiling = std::min(max_ms_, initial_ms_ << shift);
    std::uniform_int_distribution<int64_t> half(0, ceiling / 2);
    return std::chrono::milliseconds(ceiling - ceiling / 2 + half(jitter_));
  }
  // Failed attempts since the last success.
  int failures() const { return failures_; }
  void Succeeded() { failures_ = 0; }

 private:
  int64_t initial_ms_;
  int64_t max_ms_;
  int failures_ = 0;
  std::minstd_rand jitter_{std::random_device{}()};
};

}  // namespace walrelay
