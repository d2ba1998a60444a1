#include "kafka/delivery_tracker.h"

namespace walrelay {

void DeliveryTracker::BeginTransaction() { transaction_open_ = true; }

uint64_t DeliveryTracker::AddRecord(Lsn lsn, size_t bytes, std::string table) {
  entries_.push_back(Entry{State::kPending, Source{lsn, std::move(table)}, bytes});
  ++inflight_records_;
  inflight_bytes_ += bytes;
  return first_ticket_ + entries_.size() - 1;
}

void DeliveryTracker::CommitTransaction(Lsn end_lsn) {
  transaction_open_ = false;
  entries_.push_back(Entry{State::kCommit, Source{end_lsn, {}}, 0});
  Advance();
}

const DeliveryTracker::Source* DeliveryTracker::SourceOf(uint64_t ticket) const {
  if (ticket < first_ticket_ || ticket - first_ticket_ >= entries_.size()) return nullptr;
  const Entry& e = entries_[ticket - first_ticket_];
  return e.state == State::kPending ? &e.source : nullptr;
}

DeliveryTracker::Entry* DeliveryTracker::Find(uint64_t ticket) {
  if (ticket < first_ticket_ || ticket - first_ticket_ >= entries_.size()) return nullptr;
  return &entries_[ticket - first_ticket_];
}

void DeliveryTracker::Acknowledge(uint64_t ticket) {
  Entry* e = Find(ticket);
  if (!e || e->state != State::kPending) return;
  e->state = State::kAcked;
  --inflight_records_;
  inflight_bytes_ -= e->bytes;
  Advance();
}

void DeliveryTracker::Fail(uint64_t ticket, std::string error) {
  Entry* e = Find(ticket);
  if (!e || e->state != State::kPending) return;
  e->state = State::kFailed;
  --inflight_records_;
  inflight_bytes_ -= e->bytes;
  if (!failure_) failure_ = FailedDelivery{e->source.lsn, std::move(error)};
}

std::optional<uint64_t> DeliveryTracker::OldestPending() const {
  // Advance() keeps settled records off the front, so this stops at once in practice.
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].state == State::kPending) return first_ticket_ + i;
  }
  return std::nullopt;
}

void DeliveryTracker::Rebase(Lsn position) {
  transaction_open_ = false;
  confirmable_ = position;
  for (Entry& e : entries_)
    if (e.state == State::kCommit) e.source.lsn = position;
}

void DeliveryTracker::ServerPosition(Lsn wal_end) {
  if (idle() && !failure_ && wal_end > confirmable_) confirmable_ = wal_end;
}

void DeliveryTracker::Advance() {
  while (!entries_.empty()) {
    Entry& front = entries_.front();
    if (front.state == State::kPending || front.state == State::kFailed) return;
    if (front.state == State::kCommit && front.source.lsn > confirmable_) {
      confirmable_ = front.source.lsn;
    }
    entries_.pop_front();
    ++first_ticket_;
  }
}

}  // namespace walrelay
