#include <doctest/doctest.h>

#include "common/log_limiter.h"

using namespace walrelay;
using namespace std::chrono_literals;

TEST_CASE("log limiter: one line per key and interval, saying how many were held back") {
  LogLimiter limiter(60s, 2);
  const auto t0 = LogLimiter::Clock::time_point{} + 1h;
  CHECK(limiter.Admit("a", t0) == 0u);
  for (int i = 0; i < 5; ++i) CHECK_FALSE(limiter.Admit("a", t0 + 1s).has_value());
  CHECK(limiter.Admit("b", t0 + 2s) == 0u);  // another key has its own interval
  CHECK(limiter.Admit("a", t0 + 61s) == 5u);
  CHECK_FALSE(limiter.Admit("a", t0 + 62s).has_value());
  // Past max_keys new keys share one bucket: the table stays bounded.
  CHECK(limiter.Admit("c", t0 + 3s) == 0u);
  CHECK_FALSE(limiter.Admit("d", t0 + 4s).has_value());
  CHECK(limiter.Admit("e", t0 + 64s) == 1u);
}
