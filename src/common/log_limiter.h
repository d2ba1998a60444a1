// LogLimiter: at most one log line per key and interval, for warnings a stream can repeat
// thousands of times a second (one per message of a misbehaving writer). A line let through
// says how many of its kind were held back since the previous one. Keys beyond `max_keys`
// share one bucket, so a writer inventing keys cannot grow the table without bound.
// Not thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace walrelay {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogLimiter(std::chrono::milliseconds interval, size_t max_keys = 1000)
      : interval_(interval), max_keys_(max_keys) {}

  // nullopt: hold this line back. Otherwise log it, with the count held back since the last.
  std::optional<uint64_t> Admit(const std::string& key, Clock::time_point now = Clock::now());

 private:
  struct Entry {
    Clock::time_point last;
    uint64_t held_back = 0;
  };
  std::chrono::milliseconds interval_;
  size_t max_keys_;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace walrelay
