// DeliveryGuarantee: what "delivered" means for the relay, the seam between its loop and the
// delivery mode (exactly.once.support). The relay produces every record through its one
// KafkaProducer and tracks acknowledgements in its ledger (delivery/delivery_tracker.h) either
// way; a guarantee adds what happens around that:
//
//   at least once (delivery/at_least_once.h): nothing; an acknowledged record is delivered, and
//     the ledger's confirmable position is confirmed to the slot.
//   exactly once (delivery/exactly_once.h): records go into Kafka transactions holding whole
//     source transactions; only a committed transaction's LSN is confirmable, and a stream
//     starts past what Kafka committed already.
//
// Both keep the source position outside the process, in offsets.storage.topic
// (delivery/offset_store.h): at least once writes what it confirmed to the slot
// (delivery/offset_writer.h), exactly once commits it with each Kafka transaction. So every
// process knows whether this connector streamed from the slot before, and up to where.
//
// Contract, in the order the relay calls it (all on the loop thread, except FinishLastStream,
// StoredPosition, SlotTaken and StreamStarts):
// - FinishLastStream(): on the connector's worker thread, first in every connect attempt,
//   before PostgreSQL is connected: what the last EndStream left waiting for Kafka is done
//   (exactly once: a commit due or running is committed, an abort completed). An error fails
//   the attempt; a kConnection one is retried. The default does nothing.
// - StoredPosition(server, slot_missing): on the connector's worker thread, once the server is
//   known and before the slot is created or streamed from: the position stored under this
//   connector's key, whatever server and slot it names (the start decision,
//   relay/start_decision.h, tells them apart), nullopt when none is (a first start) or when
//   the guarantee did not need to look (at least once with the slot present: its start does
//   not depend on it). An error fails the attempt; a kConnection one is retried.
// - SlotTaken(server): on the worker thread, once START_REPLICATION took the slot: what must
//   wait until the slot is this process's (exactly once initialises its transactions, which
//   fences every other producer of the connector), and the stored position read again when
//   it may have changed since StoredPosition (the connector then starts again if it did).
// - StreamStarts(server, start, own_position_stored): on the worker thread, after SlotTaken,
//   with the start the decision chose; `own_position_stored` says whether this slot's
//   position on this server is stored already. An error fails the attempt.
// - SlotHeldElsewhere(): a connect attempt found the slot held by another process (this one
//   waits as a standby). Exactly once replaces its producers: the holder fenced them.
// - BeforeRecord(bytes) before every record handed to the producer (dead letters included).
// - SourceBegan() / SourceCommitted(commit, all_sent) around each source transaction;
//   `all_sent` is false while records wait for room in librdkafka's queue.
// - ChangeHandled(position, all_sent) after each change of a source transaction (a row, or a
//   transactional logical decoding message) whose records, if any, went to the producer:
//   exactly once may commit its Kafka transaction there, inside the source transaction
//   (delivery/inside_transaction.h). The default does nothing.
// - Tick(all_sent) when TickDeadline() has passed.
// - Holding(): the guarantee waits for Kafka before the stream may go on (exactly once: a
//   commit that is due waits for the transaction's acknowledgements or the commit before it);
//   the pipeline reads as backpressured meanwhile, and Tick moves on once Kafka is done. The
//   loop never waits for it. The default holds nothing.
// - EndStream(all_sent) before the next stream starts and when the relay stops: what is open
//   is committed if it may be, else dropped; what waits for Kafka there is left to
//   FinishLastStream or FinishBeforeExit, as the loop never waits for Kafka.
// - FinishBeforeExit(): the relay stops (after the last EndStream, with no connect attempt
//   running): what was left waiting for Kafka (exactly once: a commit, an abort) is done now,
//   bounded.
// - Confirmable(acknowledged): caps the ledger's confirmable position.
// - ServerPosition(wal_end): a keepalive's position, as the ledger gets it.
// - Confirmed(position): the relay confirmed `position` to the slot.
// - ForgetPosition(): the relay dropped the slot on purpose (slot.drop.on.stop): the next
//   start is a first start.
// - RecordRefused(reason): Kafka refused a record after it was sent, or the producer refused
//   it for a fatal error of its own (fenced); `reason` says how. OK: the refusal is the
//   record's own, and errors.tolerance decides its fate; an error: the record's fate is tied
//   to others' (its Kafka transaction cannot commit), and the relay stops or replays.
// Errors: kConnection means "replay": the relay reconnects and streams again from what is
// confirmable; anything else stops the relay without confirming more.
//
// Records that never become visible: when the guarantee throws away what it handed to Kafka
// (an aborted transaction), it calls the handler given to OnRecordsDiscarded first; the
// pipeline then forgets its records in flight and rebases its ledger on Confirmable(), and
// delivery reports for them, served during or after the abort, are ignored.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/lsn.h"
#include "common/status.h"
#include "config/relay_settings.h"
#include "decode/change_event.h"
#include "delivery/inside_transaction.h"
#include "delivery/kafka_output.h"
#include "delivery/source_offsets.h"
#include "status/metrics.h"

namespace walrelay {

class DeliveryGuarantee {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~DeliveryGuarantee() = default;

  virtual Status FinishLastStream() { return Status::Ok(); }
  virtual Result<std::optional<SourceOffset>> StoredPosition(const SourceIdentity& server,
                                                             bool slot_missing) = 0;
  virtual Result<StoredReread> SlotTaken(const SourceIdentity& server) = 0;
  virtual Status StreamStarts(const SourceIdentity& server, Lsn start,
                              bool own_position_stored) = 0;
  virtual void SlotHeldElsewhere() {}
  virtual Status BeforeRecord(size_t bytes) = 0;
  virtual void SourceBegan() = 0;
  virtual Status SourceCommitted(const TxnCommit& commit, bool all_sent) = 0;
  virtual Status ChangeHandled(const InsideTransaction& /*position*/, bool /*all_sent*/) {
    return Status::Ok();
  }
  virtual Status Tick(bool all_sent) = 0;
  virtual std::optional<Clock::time_point> TickDeadline() const = 0;
  virtual bool Holding() const { return false; }
  virtual Status EndStream(bool all_sent) = 0;
  virtual Status FinishBeforeExit() { return Status::Ok(); }
  virtual Lsn Confirmable(Lsn acknowledged) const = 0;
  virtual void ServerPosition(Lsn wal_end) = 0;
  virtual void Confirmed(Lsn position) = 0;
  virtual void ForgetPosition() = 0;
  virtual Status RecordRefused(const std::string& reason) = 0;

  void OnRecordsDiscarded(std::function<void()> handler) { discard_handler_ = std::move(handler); }

 protected:
  // Called before the records handed to Kafka are thrown away (see the contract above).
  void DiscardRecords() {
    if (discard_handler_) discard_handler_();
  }

 private:
  std::function<void()> discard_handler_;
};

// The guarantee exactly.once.support asks for, over the relay's Kafka output; it counts its
// Kafka transactions and position writes in `counters` (both outlive it).
Result<std::unique_ptr<DeliveryGuarantee>> MakeDeliveryGuarantee(const RelaySettings& settings,
                                                                 KafkaOutput& output,
                                                                 RelayCounters& counters);

}  // namespace walrelay
