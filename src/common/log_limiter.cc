#include "common/log_limiter.h"

namespace walrelay {

std::optional<uint64_t> LogLimiter::Admit(const std::string& key, Clock::time_point now) {
  // The shared bucket for keys past the bound: "" is no key a caller passes for itself.
  static const std::string kShared;
  const std::string& bucket =
      entries_.size() >= max_keys_ && !entries_.contains(key) ? kShared : key;
  auto [it, inserted] = entries_.try_emplace(bucket);
  Entry& entry = it->second;
  if (!inserted && now - entry.last < interval_) {
    ++entry.held_back;
    return std::nullopt;
  }
  entry.last = now;
  const uint64_t held_back = entry.held_back;
  entry.held_back = 0;
  return held_back;
}

}  // namespace walrelay
