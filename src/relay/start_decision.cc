#include "relay/start_decision.h"

namespace walrelay {
namespace {

std::string ServerText(const std::string& system_identifier) {
  return system_identifier.empty() ? std::string("an unrecorded server")
                                   : "server " + system_identifier;
}

// "LSN 0/16B3748 (timeline 1) of server 7301..., slot 'orders'".
std::string StoredText(const SourceOffset& stored) {
  return "LSN " + stored.lsn_commit.ToString() + " (timeline " + std::to_string(stored.timeline) +
         ") of " + ServerText(stored.system_identifier) + ", slot '" + stored.slot + "'";
}

Status SlotGone(const StartFacts& facts) {
  std::string last;
  if (facts.streamed_here)
    last = "the last LSN confirmed to it was " + facts.last_confirmed.ToString();
  if (facts.stored) {
    last += std::string(last.empty() ? "" : "; ") + "offsets topic '" + facts.offsets_topic +
            "' holds this connector's position " + StoredText(*facts.stored);
    if (facts.stored->system_identifier != facts.server.system_id)
      last += ", another server than this one: the database may have moved here (a "
              "switchover, a dump and restore, a migration) with rows this connector never read";
  }
  return Status(ErrorCode::kSlotGone,
                "replication slot '" + facts.slot_name + "' this connector streamed from no " +
                    "longer exists on " + ServerText(facts.server.system_id) +
                    " (dropped, or a failover or move to a server without it); " + last +
                    ". Rows committed after that may not be in Kafka: republish them from the "
                    "outbox table or the source of truth, then set slot.recreate.when.missing="
                    "true once (or create the slot by hand) to stream from now on");
}

Status SlotMissing(const StartFacts& facts) {
  return Status(ErrorCode::kSlotMissing,
                "replication slot '" + facts.slot_name +
                    "' does not exist and slot.create=false; create it with SELECT "
                    "pg_create_logical_replication_slot('" +
                    facts.slot_name + "', '<plugin.name>') or set slot.create=true");
}

std::string ForeignText(const StartFacts& facts) {
  return "offsets topic '" + facts.offsets_topic + "' holds this connector's position " +
         StoredText(*facts.stored) + ", but this relay streams from slot '" + facts.slot_name +
         "' of " + ServerText(facts.server.system_id);
}

StartVerdict Stop(Status why) {
  StartVerdict verdict;
  verdict.action = StartVerdict::Action::kStop;
  verdict.stop = std::move(why);
  return verdict;
}

}  // namespace

bool IsOwnPosition(const SourceOffset& stored, const SourceIdentity& server,
                   const std::string& slot_name) {
  return stored.system_identifier == server.system_id && stored.slot == slot_name;
}

StartVerdict DecideStart(const StartFacts& facts) {
  const bool own = facts.stored && IsOwnPosition(*facts.stored, facts.server, facts.slot_name);
  const bool streamed_before = facts.streamed_here || facts.stored.has_value();

  if (!facts.slot_exists) {
    if (streamed_before && !(facts.recreate_when_missing && facts.slot_create))
      return Stop(SlotGone(facts));
    if (!facts.slot_create) return Stop(SlotMissing(facts));
    StartVerdict create;
    create.action = StartVerdict::Action::kCreateSlot;
    create.slot_recreated = streamed_before;
    // The new slot starts now: nothing stored describes what it streams.
    create.own_position_stored = false;
    if (facts.stored && !own)
      create.warning = ForeignText(facts) + "; slot.recreate.when.missing=true creates the slot "
                                            "here, and this slot's position replaces it";
    return create;
  }

  StartVerdict stream;
  stream.action = StartVerdict::Action::kStream;
  stream.start = facts.slot_position;
  stream.own_position_stored = own;
  if (facts.stored && !own) {
    if (facts.mode == DeliveryMode::kExactlyOnce)
      return Stop(Status(ErrorCode::kOffsetMismatch,
                         ForeignText(facts) +
                             ": exactly once cannot tell which of this server's transactions "
                             "that position covers. Write a tombstone for this connector's key "
                             "to the offsets topic (or use another offsets.storage.topic) once "
                             "the rows in between are accounted for"));
    stream.warning = ForeignText(facts) + "; the slot's position (LSN " +
                     facts.slot_position.ToString() +
                     ") is streamed from, and this slot's position replaces the stored one";
    return stream;
  }
  if (own && facts.mode == DeliveryMode::kExactlyOnce &&
      facts.stored->lsn_commit > facts.slot_position)
    stream.start = facts.stored->lsn_commit;
  return stream;
}

}  // namespace walrelay
