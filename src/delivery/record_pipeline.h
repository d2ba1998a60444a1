// RecordPipeline: everything between a decoded replication message and Kafka, and the rules
// that decide which LSN may be confirmed to the slot.
//
// A record's walk, in the order of the files:
//   1. Handle(decoded) (record_pipeline.cc): a row of an included table, or a transactional
//      logical decoding message whose prefix is included, becomes a Record
//      (transform/change_event_source.h, transform/message_event.h); a delete is followed by
//      its tombstone when tombstones.on.delete.
//   2. The transform chain (transform/chain.h), then the converters (convert/converters.h).
//   3. The delivery guarantee is told before the record goes out (delivery_guarantee.h), then
//      the dispatcher (dispatcher.h) registers it in the ack ledger (delivery_tracker.h) and
//      hands it to the sink (record_sink.h: the Kafka producer).
//   4. OnDelivery(report): an acknowledgement settles its ledger entry; a refusal goes to the
//      error policy below.
// A record that fails on its own (a transform or converter error, or a refusal of that record
// alone) follows errors.tolerance: stop without confirming it, send a dead letter in its place
// (errors.deadletterqueue.topic.name), or skip it. Anything wider stops the relay.
//
// The LSN rules, all here so they can be tested without servers (tests/unit/pipeline_test.cc):
// - Confirmable(): the ledger's position (the end of the newest source transaction whose
//   records, and all before them, Kafka acknowledged; a keepalive's walEnd while idle) as the
//   guarantee caps it (exactly once: only what a committed Kafka transaction holds).
// - FlushPosition(): what the relay sends the server: Confirmable(), never below the slot's
//   position read at the last connect.
// - StreamStarted(stream): a new replication stream. The first one starts the ledger at the
//   slot's position (or past it, when the guarantee skips what Kafka holds already); a
//   stream from another server or timeline, from a slot created again, or from a slot moved
//   past this process's position rebases the ledger on the slot's position, so no position
//   learnt before is confirmed; otherwise records in flight stay tracked and a source
//   transaction left open is replayed from its start.
// - A stored position inside a source transaction (exactly once split it over several Kafka
//   transactions; delivery/inside_transaction.h) of this server, timeline and slot: when the
//   stream replays that transaction, its changes up to that position produce nothing, as Kafka
//   holds their records already. On another timeline they are sent again (another transaction
//   may reuse the xid there).
//   Every change of a source transaction is reported to the guarantee (ChangeHandled), which
//   may commit there.
//
// Backpressure: Backpressured() while max.queue.size records (or max.queue.size.in.bytes) are
// in flight, while records wait for room in the sink (SendHeld() sends them), or while the
// guarantee holds the stream for Kafka (DeliveryGuarantee::Holding: Tick() moves it on).
//
// Single-threaded: the relay's loop thread (debug builds abort when an entry point of the
// stream, Kafka or positions sections runs on another: common/thread_owner.h). Errors:
// kConnection asks the relay to replay (reconnect and stream again from what is confirmable);
// anything else stops it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/log_limiter.h"
#include "common/lsn.h"
#include "common/status.h"
#include "common/thread_owner.h"
#include "config/relay_settings.h"
#include "convert/converters.h"
#include "decode/decoder.h"
#include "delivery/dead_letter.h"
#include "delivery/delivery_guarantee.h"
#include "delivery/dispatcher.h"
#include "delivery/record_sink.h"
#include "delivery/source_offsets.h"
#include "status/metrics.h"
#include "transform/chain.h"
#include "transform/change_event_source.h"

namespace walrelay {

// A replication stream as the connector opened it (relay/source_connector.h).
struct StreamStart {
  SourceIdentity server;
  Lsn slot_position;   // the slot's confirmed position, or where a new slot starts
  Lsn start_position;  // what START_REPLICATION named (Lsn(): the slot's position)
  bool slot_recreated = false;
  std::optional<SourceOffset> stored;  // what offsets.storage.topic held, placed on the timeline
};

class RecordPipeline {
 public:
  // A delivery report stopped the stream: kConnection to replay, anything else to stop.
  using FailureHandler = std::function<void(Status)>;

  // Builds the converters and the transform chain from `settings` (errors name the key).
  static Result<std::unique_ptr<RecordPipeline>> Create(
      const RelaySettings& settings, RecordSink& sink, std::unique_ptr<DeliveryGuarantee> guarantee,
      RelayCounters& counters, FailureHandler on_failure);
  RecordPipeline(const RecordPipeline&) = delete;
  RecordPipeline& operator=(const RecordPipeline&) = delete;

  DeliveryGuarantee& guarantee() { return *guarantee_; }

  // --- The stream --------------------------------------------------------------------------
  // Whether rows of a table are relayed (table.include.list), for the decoder's filter.
  bool IncludesTable(std::string_view schema, std::string_view table);
  void StreamStarted(const StreamStart& stream);
  Status Handle(const DecodedMessage& decoded);
  // A keepalive's walEnd: everything committed before it has been streamed.
  void ServerPosition(Lsn wal_end);
  // Commits an idle Kafka transaction whose interval passed (exactly once).
  Status Tick();
  std::optional<std::chrono::steady_clock::time_point> TickDeadline() const;
  // Before the next stream starts, and when the relay stops.
  Status EndStream();

  // --- Kafka ------------------------------------------------------------------------------
  Status OnDelivery(const DeliveryReport& report);
  Status SendHeld() { return dispatcher_.SendHeld(); }
  bool Backpressured() const;
  // From now on, records purged from the producer count as failed, not as Kafka's refusals.
  void Stopping() { stopping_ = true; }

  // --- Positions ---------------------------------------------------------------------------
  bool started() const { return started_; }
  Lsn Confirmable() const;
  Lsn FlushPosition() const;
  // The relay told the server `position`.
  void Confirmed(Lsn position);
  // The newest position known delivered by this process: what it confirmed, or the slot's.
  Lsn last_confirmed() const { return std::max(last_confirmed_, slot_floor_); }
  // The slot was dropped on purpose: the next start is a first start.
  void ForgetPosition() { guarantee_->ForgetPosition(); }

  // --- Observers ---------------------------------------------------------------------------
  size_t inflight_records() const { return ledger().inflight_records(); }
  size_t inflight_bytes() const { return ledger().inflight_bytes(); }
  size_t ledger_entries() const { return ledger().entries(); }
  size_t ledger_bytes() const { return ledger().memory_bytes(); }
  size_t held_records() const { return dispatcher_.held_records(); }
  bool holding() const { return dispatcher_.holding(); }
  bool idle() const { return ledger().idle(); }
  int64_t last_acked_commit_ms() const { return dispatcher_.last_acked_commit_ms(); }
  std::optional<Dispatcher::Waiting> OldestWaiting() const { return dispatcher_.OldestWaiting(); }

 private:
  RecordPipeline(const RelaySettings& settings, RecordSink& sink,
                 std::unique_ptr<DeliveryGuarantee> guarantee, RelayCounters& counters,
                 FailureHandler on_failure, Converters converters);
  const DeliveryTracker& ledger() const { return dispatcher_.ledger(); }

  // What Handle needs to know of a source table, looked up once per table rather than per
  // row (the include list is a set of regexes).
  struct SourceTable {
    std::string qualified;  // "schema.table"
    bool included = false;
    uint64_t* read_counter = nullptr;  // in counters_.source_records, when included
  };
  const SourceTable& LookupTable(std::string_view schema, std::string_view table);
  Status HandleChange(const RowChange& change);
  // Relayed when transactional and its prefix is included; refused with a warning otherwise.
  Status HandleLogicalMessage(const LogicalMessage& message);
  // Runs `record` through the chain and the converters and produces what comes out;
  // `original` rebuilds the untransformed record for the error policy when the chain fails.
  Status Relay(Record record, const std::function<Record()>& original);
  // A change event's Connect shapes (its value and primary-key key), for the converters.
  void SetChangeEventShapes(Record& record) const;
  Status Produce(Record& record);
  // errors.tolerance for a record that failed on its own, before (no ticket) or after it
  // was registered in the ledger.
  Status ApplyErrorPolicy(const Record& record, const FailureContext& failure, Status error,
                          std::optional<uint64_t> ticket);
  Status OnRefused(Dispatcher::Refusal& refusal);
  // The records of a Kafka transaction the guarantee throws away never become visible.
  void ForgetInFlight();
  std::string StaysConfirmed(Lsn row_lsn) const;

  const RelaySettings& settings_;
  RelayCounters& counters_;
  std::unique_ptr<DeliveryGuarantee> guarantee_;
  FailureHandler on_failure_;
  SourceContext source_context_;
  Converters converters_;
  std::optional<TransformChain> chain_;
  // kLeaveUnset when the chain's first transform replaces a row's topic and key (the event
  // router): the dead letter of a failed row still gets them, from `original`.
  SourceTopicAndKey source_topic_and_key_ = SourceTopicAndKey::kBuild;
  Dispatcher dispatcher_;
  std::vector<SourceTable> tables_;
  size_t last_table_ = 0;
  TxnBegin current_txn_;   // the transaction being streamed: its messages carry its xid and time
  ChangeCounter changes_;  // the position of each change of current_txn_
  // Kafka holds the changes of a split source transaction up to here (from the stream's
  // stored position): skipped when the stream replays them.
  std::optional<InsideTransaction> held_inside_;
  // Whether `at`, the current transaction's next change, is one Kafka holds already.
  bool HeldAlready(const InsideTransaction& at);
  // One refusal line per prefix and minute: a writer can emit thousands a second.
  LogLimiter non_transactional_warnings_{std::chrono::minutes(1)};
  bool started_ = false;
  std::optional<SourceIdentity> server_;  // streamed from last
  Lsn slot_floor_;  // the slot's position at the last connect: no flush below it
  Lsn last_confirmed_;
  bool stopping_ = false;
  // The loop thread, the first to call an entry point of the stream, Kafka or positions
  // sections; debug builds abort when one is called on another.
  ThreadOwner owner_;
};

}  // namespace walrelay
