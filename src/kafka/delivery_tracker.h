// DeliveryTracker: the ack ledger that decides which LSN may be confirmed to PostgreSQL.
//
// The relay tells it, in stream order, when a transaction begins, each record it hands to
// Kafka, and when the transaction commits (with the end LSN of its commit record). Kafka's
// delivery reports then mark records acknowledged or failed, in any order.
//
// confirmable() is the end LSN of the newest committed transaction whose records, and every
// earlier transaction's records, are all acknowledged. It never moves backwards and never
// passes a failed or unacknowledged record. While nothing is in flight and no transaction is
// open, the server's reported position (keepalive walEnd) is confirmable too, so an idle
// outbox never pins WAL that other tables generate.
//
// Single-threaded: all calls come from the relay's event-loop thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "common/lsn.h"

namespace walrelay {

struct FailedDelivery {
  Lsn lsn;                  // LSN of the row change the record came from
  std::string error;  // which record (event id, topic, key) and why Kafka refused it
};

class DeliveryTracker {
 public:
  explicit DeliveryTracker(Lsn start = Lsn()) : confirmable_(start) {}

  void BeginTransaction();
  // Registers one record handed to the producer; returns the ticket to pass back on delivery.
  uint64_t AddRecord(Lsn lsn, size_t bytes, std::string table = {});
  // Where a pending record came from (for dead-letter headers); nullptr once settled.
  struct Source {
    Lsn lsn;
    std::string table;
  };
  const Source* SourceOf(uint64_t ticket) const;
  // The replication stream restarted: a transaction that was open is replayed from its start.
  void StreamRestarted() { transaction_open_ = false; }
  // The stream now continues from `position` (the slot's, on another server or timeline, or
  // moved by someone else): it becomes the confirmable position, even below the current one.
  // Records in flight stay tracked for their acknowledgements, but the commit positions learnt
  // before are never confirmed: the server replays everything after `position`.
  void Rebase(Lsn position);
  // The transaction ends; its end LSN becomes confirmable once its records are acknowledged.
  void CommitTransaction(Lsn end_lsn);

  void Acknowledge(uint64_t ticket);
  void Fail(uint64_t ticket, std::string error);
  // A keepalive reported the server's position; counts only while idle.
  void ServerPosition(Lsn wal_end);

  Lsn confirmable() const { return confirmable_; }
  size_t inflight_records() const { return inflight_records_; }
  size_t inflight_bytes() const { return inflight_bytes_; }
  bool transaction_open() const { return transaction_open_; }
  bool idle() const { return !transaction_open_ && entries_.empty(); }
  // The ticket of the oldest record still waiting for Kafka, if any: what holds confirmable().
  std::optional<uint64_t> OldestPending() const;
  // The first record Kafka refused, if any; nothing at or after it is ever confirmed.
  const std::optional<FailedDelivery>& failure() const { return failure_; }

 private:
  enum class State : uint8_t { kPending, kAcked, kFailed, kCommit };
  struct Entry {
    State state;
    Source source;  // record: row LSN and table; commit marker: end LSN of the commit record
    size_t bytes = 0;
  };
  Entry* Find(uint64_t ticket);
  void Advance();

  std::deque<Entry> entries_;
  uint64_t first_ticket_ = 0;  // ticket of entries_.front()
  Lsn confirmable_;
  size_t inflight_records_ = 0;
  size_t inflight_bytes_ = 0;
  bool transaction_open_ = false;
  std::optional<FailedDelivery> failure_;
};

}  // namespace walrelay
