// StartDecision: where a connect attempt starts streaming, or why it must not, decided once
// from what the attempt found. It is the one place that decides whether a slot may be created
// and which position a stream starts at; the source connector (relay/source_connector.h) only
// gathers the facts and carries the verdict out.
//
// The rules, the same in both delivery modes (docs/architecture.md, "Where a stream starts"):
// 1. This connector streamed before when this process streamed from the slot, or when
//    offsets.storage.topic holds any position under this connector's key, whatever server
//    and slot it names. A position of another server is how a cutover shows itself: the
//    config's address now leads to another cluster.
// 2. A missing slot that this connector streamed before means the rows committed since its
//    last position may never reach Kafka: stop with kSlotGone, naming the slot, this server
//    and the stored position with its own server and slot, unless slot.recreate.when.missing
//    (and slot.create) allow creating it again. A missing slot before any stream is created
//    when slot.create allows, else kSlotMissing.
// 3. A present slot is streamed from. At least once starts at the slot's position whatever
//    is stored (a position of another server or slot is ignored with a warning, and replaced
//    by this slot's). Exactly once starts past what Kafka committed for this slot when that
//    is ahead of the slot (a crash between a commit and its confirmation), and refuses a
//    stored position of another server or slot with kOffsetMismatch: it cannot tell which of
//    this server's transactions that position covers.
// `own_position_stored` tells the delivery guarantee whether this slot's position is stored
// already (exactly once records it at the stream's start when not, so a later process knows
// that this connector streamed, rule 1).
// A pure function; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "common/lsn.h"
#include "common/status.h"
#include "delivery/source_offsets.h"

namespace walrelay {

enum class DeliveryMode { kAtLeastOnce, kExactlyOnce };

// What a connect attempt found before taking or creating the slot.
struct StartFacts {
  DeliveryMode mode = DeliveryMode::kAtLeastOnce;
  std::string slot_name;
  std::string offsets_topic;  // offsets.storage.topic, for messages
  SourceIdentity server;      // the server connected to
  bool slot_exists = false;
  Lsn slot_position;  // the slot's confirmed_flush_lsn when it exists
  // This process streamed from the slot before (a reconnect), and what it last confirmed.
  bool streamed_here = false;
  Lsn last_confirmed;
  // The position stored under this connector's key, placed on the server's timeline when it
  // is this server's. At least once reads it only when the slot is missing (nullopt
  // otherwise): with the slot present its verdict does not depend on it.
  std::optional<SourceOffset> stored;
  bool slot_create = true;             // slot.create
  bool recreate_when_missing = false;  // slot.recreate.when.missing
};

struct StartVerdict {
  enum class Action { kStop, kCreateSlot, kStream };
  Action action = Action::kStop;
  Status stop;                  // kStop: the error the relay stops with
  bool slot_recreated = false;  // kCreateSlot: the connector streamed from the slot before
  // kStream: the LSN START_REPLICATION names (kCreateSlot streams from the new slot's point).
  Lsn start;
  // The stored position is this slot's on this server (and is passed on to the pipeline).
  bool own_position_stored = false;
  std::string warning;  // to log once before streaming ("" for none)
};

// Whether `stored` names this server and slot.
bool IsOwnPosition(const SourceOffset& stored, const SourceIdentity& server,
                   const std::string& slot_name);

// The verdict for one connect attempt (the rules above).
StartVerdict DecideStart(const StartFacts& facts);

}  // namespace walrelay
