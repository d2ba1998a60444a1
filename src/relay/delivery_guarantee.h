// DeliveryGuarantee: what "delivered" means for the relay, the seam between its loop and the
// delivery mode (exactly.once.support). The relay produces every record through its one
// KafkaProducer and tracks acknowledgements in its ledger (kafka/delivery_tracker.h) either
// way; a guarantee adds what happens around that:
//
//   at least once (relay/at_least_once.h): nothing; an acknowledged record is delivered, and
//     the ledger's confirmable position is confirmed to the slot.
//   exactly once (relay/exactly_once.h): records go into Kafka transactions holding whole
//     source transactions; only a committed transaction's LSN is confirmable, and a stream
//     starts past what Kafka committed already.
//
// Contract, in the order the relay calls it (all on the loop thread, except StartPosition):
// - StartPosition(server, slot_position): on the connector's worker thread, before
//   START_REPLICATION; the LSN to stream from (Lsn(): the slot's). An error fails the attempt.
// - BeforeRecord(bytes) before every record handed to the producer (dead letters included).
// - SourceBegan() / SourceCommitted(commit, all_sent) around each source transaction;
//   `all_sent` is false while records wait for room in librdkafka's queue.
// - Tick(all_sent) when TickDeadline() has passed.
// - EndStream(all_sent) before the next stream starts and when the relay stops: what is open
//   is committed if it may be, else dropped.
// - Confirmable(acknowledged): caps the ledger's confirmable position.
// - ServerPosition(wal_end): a keepalive's position, as the ledger gets it.
// Errors: kConnection means "replay": the relay reconnects and streams again from what is
// confirmable; anything else stops the relay without confirming more.
//
// Records dropped: while Discarding() is true (an abort is under way) every delivery report
// served belongs to a record that never becomes visible, and TakeDropped() afterwards says the
// relay must forget what it has in flight and rebase its ledger on Confirmable().
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>

#include "common/lsn.h"
#include "common/status.h"
#include "config/relay_settings.h"
#include "decode/change_event.h"
#include "kafka/producer.h"
#include "relay/source_connector.h"
#include "status/metrics.h"

namespace walrelay {

class DeliveryGuarantee {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~DeliveryGuarantee() = default;

  virtual Result<Lsn> StartPosition(const SourceIdentity& server, Lsn slot_position) = 0;
  virtual Status BeforeRecord(size_t bytes) = 0;
  virtual void SourceBegan() = 0;
  virtual Status SourceCommitted(const TxnCommit& commit, bool all_sent) = 0;
  virtual Status Tick(bool all_sent) = 0;
  virtual std::optional<Clock::time_point> TickDeadline() const = 0;
  virtual Status EndStream(bool all_sent) = 0;
  virtual Lsn Confirmable(Lsn acknowledged) const = 0;
  virtual void ServerPosition(Lsn wal_end) = 0;
  // Whether a record Kafka refused after it was sent may follow errors.tolerance (skip or
  // dead letter) on its own; when false the refusal is a kConnection replay.
  virtual bool RefusalsFollowErrorPolicy() const = 0;
  virtual bool Discarding() const = 0;
  virtual bool TakeDropped() = 0;
};

// The guarantee exactly.once.support asks for, over the relay's producer; it counts its Kafka
// transactions in `counters` (both outlive it).
std::unique_ptr<DeliveryGuarantee> MakeDeliveryGuarantee(const RelaySettings& settings,
                                                         KafkaProducer& producer,
                                                         RelayCounters& counters);

}  // namespace walrelay
