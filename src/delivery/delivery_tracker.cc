#include "delivery/delivery_tracker.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace walrelay {
namespace {

// Entries a ledger may hold before it collapses, beyond 4 per unsettled record: collapsing
// costs a pass over the ledger, so it runs only once the ledger has at least doubled past its
// collapsed size (at most 2 entries per unsettled record, plus one); each entry is collapsed
// away at most once, so the cost per entry stays constant.
constexpr size_t kCollapseSlack = 64;

}  // namespace

void DeliveryTracker::BeginTransaction() {
  WALRELAY_ASSERT_OWNER(owner_, "DeliveryTracker::BeginTransaction");
  transaction_open_ = true;
}

uint32_t DeliveryTracker::InternTable(const std::string& table) {
  // Records of one table come in runs: compare with the last one before hashing.
  if (last_table_ < tables_.size() && tables_[last_table_] == table) return last_table_;
  auto [it, added] = table_ids_.try_emplace(table, static_cast<uint32_t>(tables_.size()));
  if (added) tables_.push_back(table);
  last_table_ = it->second;
  return it->second;
}

void DeliveryTracker::CollapseIfLarge() {
  if (entries_.size() >= 4 * unsettled_ + kCollapseSlack) Collapse();
}

void DeliveryTracker::Append(Entry entry) {
  CollapseIfLarge();
  entries_.push_back(entry);
}

uint64_t DeliveryTracker::AddRecord(Lsn lsn, size_t bytes, const std::string& table) {
  WALRELAY_ASSERT_OWNER(owner_, "DeliveryTracker::AddRecord");
  const uint64_t ticket = next_sequence_++;
  const auto stored_bytes =
      static_cast<uint32_t>(std::min<size_t>(bytes, std::numeric_limits<uint32_t>::max()));
  Append(Entry{ticket, lsn, stored_bytes, InternTable(table), State::kPending});
  ++unsettled_;
  ++inflight_records_;
  inflight_bytes_ += stored_bytes;
  return ticket;
}

void DeliveryTracker::CommitTransaction(Lsn end_lsn) {
  WALRELAY_ASSERT_OWNER(owner_, "DeliveryTracker::CommitTransaction");
  transaction_open_ = false;
  Append(Entry{next_sequence_++, end_lsn, 0, 0, State::kCommit});
  Advance();
}

const DeliveryTracker::Entry* DeliveryTracker::Find(uint64_t ticket) const {
  if (entries_.empty() || ticket < entries_.front().sequence) return nullptr;
  // Sequences increase by one along entries_ until a collapse removes some, so the ticket's
  // entry is at its distance from the front's sequence, or before it. Acknowledgements come
  // mostly in order: the first guess finds it without a search.
  const uint64_t distance = ticket - entries_.front().sequence;
  const Entry* found = nullptr;
  if (distance < entries_.size() && entries_[distance].sequence == ticket) {
    found = &entries_[distance];
  } else {
    const auto end = entries_.begin() +
                     static_cast<std::ptrdiff_t>(std::min<uint64_t>(distance, entries_.size()));
    auto it = std::lower_bound(entries_.begin(), end, ticket,
                               [](const Entry& e, uint64_t t) { return e.sequence < t; });
    if (it != end && it->sequence == ticket) found = &*it;
  }
  if (found == nullptr || found->state == State::kCommit) return nullptr;
  return found;
}

DeliveryTracker::Entry* DeliveryTracker::Find(uint64_t ticket) {
  return const_cast<Entry*>(std::as_const(*this).Find(ticket));
}

std::optional<DeliveryTracker::Source> DeliveryTracker::SourceOf(uint64_t ticket) const {
  const Entry* e = Find(ticket);
  if (!e || e->state != State::kPending) return std::nullopt;
  return Source{e->lsn, tables_[e->table]};
}

void DeliveryTracker::Acknowledge(uint64_t ticket) {
  WALRELAY_ASSERT_OWNER(owner_, "DeliveryTracker::Acknowledge");
  Entry* e = Find(ticket);
  if (!e || e->state != State::kPending) return;
  e->state = State::kAcked;
  --unsettled_;
  --inflight_records_;
  inflight_bytes_ -= e->bytes;
  Advance();
  // Also here, so that the bound holds when acknowledgements, not new entries, shrink it.
  CollapseIfLarge();
}

void DeliveryTracker::Fail(uint64_t ticket, std::string error) {
  WALRELAY_ASSERT_OWNER(owner_, "DeliveryTracker::Fail");
  Entry* e = Find(ticket);
  if (!e || e->state != State::kPending) return;
  e->state = State::kFailed;
  --inflight_records_;
  inflight_bytes_ -= e->bytes;
  if (!failure_) failure_ = FailedDelivery{e->lsn, std::move(error)};
}

std::optional<uint64_t> DeliveryTracker::OldestPending() const {
  // Advance() keeps settled entries off the front and Collapse() keeps at most one between two
  // unsettled records, so this stops at once in practice.
  for (const Entry& e : entries_) {
    if (e.state == State::kPending) return e.sequence;
  }
  return std::nullopt;
}

void DeliveryTracker::Rebase(Lsn position) {
  WALRELAY_ASSERT_OWNER(owner_, "DeliveryTracker::Rebase");
  transaction_open_ = false;
  confirmable_ = position;
  for (Entry& e : entries_)
    if (e.state == State::kCommit) e.lsn = position;
}

void DeliveryTracker::ServerPosition(Lsn wal_end) {
  WALRELAY_ASSERT_OWNER(owner_, "DeliveryTracker::ServerPosition");
  if (idle() && !failure_ && wal_end > confirmable_) confirmable_ = wal_end;
}

void DeliveryTracker::Advance() {
  while (!entries_.empty()) {
    const Entry& front = entries_.front();
    if (!Settled(front.state)) return;
    if (front.state == State::kCommit && front.lsn > confirmable_) confirmable_ = front.lsn;
    entries_.pop_front();
  }
}

void DeliveryTracker::Collapse() {
  // Compacts in place: `out` is where the next kept entry goes; `run` is the commit marker that
  // stands for the settled run being read, if the run has a commit.
  auto out = entries_.begin();
  std::optional<Entry> run;
  for (auto in = entries_.begin(); in != entries_.end(); ++in) {
    if (Settled(in->state)) {
      // The marker takes the run's last sequence, which keeps it in order between the records
      // around it, and its highest commit LSN (a transaction replayed after a reconnect may
      // commit below one already in the run).
      if (in->state == State::kCommit) {
        const Lsn newest = run ? std::max(run->lsn, in->lsn) : in->lsn;
        run = *in;
        run->lsn = newest;
      }
      continue;
    }
    if (run) {
      *out++ = *run;
      run.reset();
    }
    *out++ = *in;
  }
  if (run) *out++ = *run;
  entries_.erase(out, entries_.end());
  entries_.shrink_to_fit();
}

}  // namespace walrelay
