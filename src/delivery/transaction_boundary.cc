#include "delivery/transaction_boundary.h"

#include <algorithm>

namespace walrelay {

void TransactionBoundary::OnRecord(int64_t bytes, Clock::time_point now) {
  if (!first_record_) first_record_ = now;
  ++records_;
  bytes_ += bytes;
}

bool TransactionBoundary::LimitReached(Clock::time_point now) const {
  if (records_ == 0) return false;
  if (limits_.mode == TransactionBoundaryMode::kEverySourceCommit) return true;
  if (limits_.max_records > 0 && records_ >= limits_.max_records) return true;
  if (limits_.max_bytes > 0 && bytes_ >= limits_.max_bytes) return true;
  return first_record_ && now - *first_record_ >= interval();
}

bool TransactionBoundary::OnSourceCommit(Clock::time_point now) {
  inside_source_ = false;
  return LimitReached(now);
}

bool TransactionBoundary::ShouldCloseIdle(Clock::time_point now) const {
  if (inside_source_ || records_ == 0) return false;
  return LimitReached(now);
}

bool TransactionBoundary::ShouldSplit(Clock::time_point now) const {
  return inside_source_ && first_record_ && now - *first_record_ >= limits_.split_after;
}

std::optional<TransactionBoundary::Clock::time_point> TransactionBoundary::IdleDeadline() const {
  if (inside_source_ || !first_record_) return std::nullopt;
  return *first_record_ + std::chrono::duration_cast<Clock::duration>(interval());
}

void TransactionBoundary::Stretch(std::chrono::nanoseconds commit_duration, int64_t records) {
  stretched_ = records < kStretchMinRecords ? std::chrono::nanoseconds(0)
                                            : std::min<std::chrono::nanoseconds>(
                                                  commit_duration * kStretchFactor, kMaxStretch);
}

std::chrono::nanoseconds TransactionBoundary::interval() const {
  return std::max<std::chrono::nanoseconds>(limits_.interval, stretched_);
}

void TransactionBoundary::Reset() {
  records_ = 0;
  bytes_ = 0;
  first_record_.reset();
}

}  // namespace walrelay
