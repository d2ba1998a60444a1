// TransactionBoundary: Kafka transactions close only at source commits, by count, bytes or
// interval, and between source transactions once the interval has passed.
#include <doctest/doctest.h>

#include "delivery/transaction_boundary.h"

using namespace std::chrono_literals;
using walrelay::TransactionBoundary;
using walrelay::TransactionBoundaryLimits;
using walrelay::TransactionBoundaryMode;

namespace {
const TransactionBoundary::Clock::time_point t0{};

// One source transaction of `records` records of `bytes` each at `now`; returns the decision.
bool SourceTransaction(TransactionBoundary& b, int records, int64_t bytes,
                       TransactionBoundary::Clock::time_point now) {
  b.OnSourceBegin();
  for (int i = 0; i < records; ++i) b.OnRecord(bytes, now);
  return b.OnSourceCommit(now);
}
}  // namespace

TEST_CASE("source.commit: every source transaction with records closes its Kafka transaction") {
  TransactionBoundary b({TransactionBoundaryMode::kEverySourceCommit, 0, 0, 10s});
  CHECK(SourceTransaction(b, 1, 10, t0));
  b.Reset();
  CHECK_FALSE(SourceTransaction(b, 0, 0, t0));  // nothing to commit
}

TEST_CASE("grouped: closes at the source commit that reaches the record limit, never inside") {
  TransactionBoundary b({TransactionBoundaryMode::kGrouped, 5, 0, 10s});
  CHECK_FALSE(SourceTransaction(b, 3, 10, t0));
  b.OnSourceBegin();
  for (int i = 0; i < 4; ++i) b.OnRecord(10, t0);
  // 7 records, over the limit, but the source transaction is still open.
  CHECK(b.records() == 7);
  CHECK_FALSE(b.ShouldCloseIdle(t0 + 1h));
  CHECK_FALSE(b.IdleDeadline().has_value());
  CHECK(b.OnSourceCommit(t0));
  b.Reset();
  CHECK(b.records() == 0);
  CHECK_FALSE(SourceTransaction(b, 4, 10, t0));
}

TEST_CASE("grouped: closes at the source commit that reaches the byte limit") {
  TransactionBoundary b({TransactionBoundaryMode::kGrouped, 0, 1000, 10s});
  CHECK_FALSE(SourceTransaction(b, 9, 100, t0));
  CHECK(SourceTransaction(b, 1, 100, t0));
  CHECK(b.bytes() == 1000);
}

TEST_CASE("grouped: the interval counts from the first record; an idle source closes on time") {
  TransactionBoundary b({TransactionBoundaryMode::kGrouped, 0, 0, 100ms});
  CHECK_FALSE(b.IdleDeadline().has_value());  // empty: no deadline
  CHECK_FALSE(SourceTransaction(b, 1, 10, t0 + 50ms));
  REQUIRE(b.IdleDeadline().has_value());
  CHECK(*b.IdleDeadline() == t0 + 150ms);
  CHECK_FALSE(b.ShouldCloseIdle(t0 + 149ms));
  CHECK(b.ShouldCloseIdle(t0 + 150ms));
  // A source commit after the interval closes it as well.
  CHECK(SourceTransaction(b, 1, 10, t0 + 160ms));
  b.Reset();
  CHECK_FALSE(b.ShouldCloseIdle(t0 + 1h));
}

TEST_CASE(
    "grouped: slow commits of large transactions stretch the interval to nineteen times their "
    "duration, at most 1 s") {
  TransactionBoundary b({TransactionBoundaryMode::kGrouped, 0, 0, 50ms});
  CHECK(b.interval() == 50ms);
  b.Stretch(2ms, 5000);  // a quick commit: the configured interval stays
  CHECK(b.interval() == 50ms);
  b.Stretch(30ms, 999);  // a slow commit of a small transaction: the stream is not saturated
  CHECK(b.interval() == 50ms);
  b.Stretch(30ms, 1000);  // a loaded broker under a saturated stream
  CHECK(b.interval() == 570ms);
  CHECK_FALSE(SourceTransaction(b, 1, 10, t0));
  CHECK_FALSE(SourceTransaction(b, 1, 10, t0 + 569ms));
  CHECK(SourceTransaction(b, 1, 10, t0 + 570ms));
  REQUIRE(b.IdleDeadline().has_value());
  CHECK(*b.IdleDeadline() == t0 + 570ms);
  b.Stretch(10s, 5000);
  CHECK(b.interval() == 1000ms);
  b.Stretch(1ms, 5000);  // commits are quick again
  CHECK(b.interval() == 50ms);
  b.Stretch(10s, 5000);
  b.Stretch(10s, 10);  // the stream slowed down: no stretch
  CHECK(b.interval() == 50ms);
}
