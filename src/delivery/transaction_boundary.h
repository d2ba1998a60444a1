// TransactionBoundary: when walrelay closes (commits) a Kafka transaction. Pure policy, no I/O.
//
// Contract:
// - A Kafka transaction holds whole source (PostgreSQL) transactions, closed at a source
//   commit, unless one source transaction outgrows it: once the Kafka transaction has been
//   open for `split_after` (transaction.boundary.split.ms, by default a third of Kafka's
//   transaction.timeout.ms) inside a source transaction, ShouldSplit says to commit what it
//   holds there, so the coordinator never aborts it for its age. Only time splits a source
//   transaction: the record and byte limits group whole ones.
// - transaction.boundary=source.commit (kEverySourceCommit): one Kafka transaction per source
//   transaction.
// - transaction.boundary=interval (kGrouped): source transactions are grouped until, at a
//   source commit, the transaction holds at least `max_records` records or `max_bytes` bytes
//   (0: no limit), or `interval` (transaction.boundary.interval.ms) has passed since its first
//   record. Between source transactions, an open Kafka transaction whose interval has passed
//   is closed too (ShouldCloseIdle), so an idle source does not hold records back.
// - A transaction without records is never due: there is nothing to commit.
// - Stretch(): at each commit the relay waits until Kafka acknowledged the transaction's
//   records (the next transaction's must not overtake them), and Kafka's pipeline runs empty;
//   after a transaction of at least kStretchMinRecords records the interval stretches to
//   kStretchFactor times that wait (at most kMaxStretch), so that waiting takes at most about a
//   twentieth of a saturated stream's time. After a smaller transaction the stream is
//   not saturated, the loop has time to spare for a slow commit, and the configured interval
//   alone applies: a stretch would only hold records back (a commit slowed by a busy machine
//   stretched the next transactions of a 2,000 rows/s stream to 60-100 ms).
// Value type; not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace walrelay {

enum class TransactionBoundaryMode { kEverySourceCommit, kGrouped };

struct TransactionBoundaryLimits {
  TransactionBoundaryMode mode = TransactionBoundaryMode::kGrouped;
  int64_t max_records = 0;  // 0: no record limit
  int64_t max_bytes = 0;    // 0: no byte limit
  std::chrono::milliseconds interval{25};
  // Inside a source transaction, the Kafka transaction is committed once open this long.
  std::chrono::milliseconds split_after{20000};
};

class TransactionBoundary {
 public:
  using Clock = std::chrono::steady_clock;

  explicit TransactionBoundary(TransactionBoundaryLimits limits) : limits_(limits) {}

  void OnSourceBegin() { inside_source_ = true; }
  // One record of the current source transaction went into the Kafka transaction.
  void OnRecord(int64_t bytes, Clock::time_point now);
  // The source transaction ended; true when the Kafka transaction is to be committed now.
  bool OnSourceCommit(Clock::time_point now);
  // Between source transactions: true when the open Kafka transaction's interval has passed.
  bool ShouldCloseIdle(Clock::time_point now) const;
  // Inside a source transaction: true when the open Kafka transaction must be committed
  // before the source transaction ends (open for split_after).
  bool ShouldSplit(Clock::time_point now) const;
  // When ShouldCloseIdle() becomes true if nothing else happens, for the caller's timer.
  std::optional<Clock::time_point> IdleDeadline() const;
  // The Kafka transaction was committed or aborted: start counting anew.
  void Reset();
  // The relay waited `commit_duration` at the last commit, of a transaction of `records` records.
  void Stretch(std::chrono::nanoseconds commit_duration, int64_t records);
  // The interval in force: `interval`, or longer after slow commits.
  std::chrono::nanoseconds interval() const;

  static constexpr int kStretchFactor = 19;
  static constexpr int64_t kStretchMinRecords = 1000;
  static constexpr std::chrono::milliseconds kMaxStretch{1000};

  int64_t records() const { return records_; }
  int64_t bytes() const { return bytes_; }

 private:
  bool LimitReached(Clock::time_point now) const;

  TransactionBoundaryLimits limits_;
  bool inside_source_ = false;
  int64_t records_ = 0;
  int64_t bytes_ = 0;
  std::optional<Clock::time_point> first_record_;
  std::chrono::nanoseconds stretched_{0};
};

}  // namespace walrelay
