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
// Size: behind the oldest unsettled record only the unsettled (pending or failed) records
// matter one by one; a run of settled entries between two of them (acknowledged records and
// commit markers, such as the empty transactions of tables that are not relayed) is worth no
// more than the newest commit end LSN in it. Such runs are collapsed into one commit marker, so
// the ledger holds O(records in flight) entries however many transactions stream in behind a
// record Kafka has not acknowledged yet: entries() is at most 4 x unsettled records + 65.
// Tickets stay valid across collapsing: delivery reports may arrive in any order.
//
// Single-threaded: all calls come from the relay's event-loop thread; debug builds abort when
// a ledger update comes from another (common/thread_owner.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/lsn.h"
#include "common/thread_owner.h"

namespace walrelay {

struct FailedDelivery {
  Lsn lsn;            // LSN of the row change the record came from
  std::string error;  // which record (event id, topic, key) and why Kafka refused it
};

class DeliveryTracker {
 public:
  explicit DeliveryTracker(Lsn start = Lsn()) : confirmable_(start) {}

  void BeginTransaction();
  // Registers one record handed to the producer; returns the ticket to pass back on delivery.
  uint64_t AddRecord(Lsn lsn, size_t bytes, const std::string& table = {});
  // Where a pending record came from (for dead-letter headers); nullopt once settled.
  struct Source {
    Lsn lsn;
    std::string table;
  };
  std::optional<Source> SourceOf(uint64_t ticket) const;
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
  // Entries the ledger holds (records not settled, commit markers behind them), and their
  // memory in bytes, for /metrics.
  size_t entries() const { return entries_.size(); }
  size_t memory_bytes() const { return entries_.size() * sizeof(Entry); }
  // The ticket of the oldest record still waiting for Kafka, if any: what holds confirmable().
  std::optional<uint64_t> OldestPending() const;
  // The first record Kafka refused, if any; nothing at or after it is ever confirmed.
  const std::optional<FailedDelivery>& failure() const { return failure_; }

 private:
  enum class State : uint8_t { kPending, kAcked, kFailed, kCommit };
  // 32 bytes: the source table is an index into tables_, not a string per record.
  struct Entry {
    uint64_t sequence;  // a record's ticket; increasing along entries_ (commit markers too)
    Lsn lsn;            // record: row LSN; commit marker: end LSN of the commit record
    uint32_t bytes;
    uint32_t table;
    State state;
  };
  static bool Settled(State s) { return s == State::kAcked || s == State::kCommit; }
  Entry* Find(uint64_t ticket);
  const Entry* Find(uint64_t ticket) const;
  void Append(Entry entry);
  void Advance();
  // Replaces each run of settled entries by one commit marker with the run's newest commit LSN.
  void Collapse();
  void CollapseIfLarge();
  uint32_t InternTable(const std::string& table);

  std::deque<Entry> entries_;
  uint64_t next_sequence_ = 0;
  size_t unsettled_ = 0;  // pending and failed records in entries_
  std::vector<std::string> tables_;
  std::unordered_map<std::string, uint32_t> table_ids_;
  uint32_t last_table_ = UINT32_MAX;  // the table of the previous record
  Lsn confirmable_;
  size_t inflight_records_ = 0;
  size_t inflight_bytes_ = 0;
  bool transaction_open_ = false;
  std::optional<FailedDelivery> failure_;
  ThreadOwner owner_;  // the loop thread: the first that updates the ledger
};

}  // namespace walrelay
