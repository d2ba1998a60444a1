// The start decision (relay/start_decision.h): every combination of delivery mode, slot,
// stored position, what this process streamed, slot.create and slot.recreate.when.missing has
// exactly one row in the table below, and the verdict is the row's.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "relay/start_decision.h"

using namespace walrelay;

namespace {

const SourceIdentity kServer{"7100000000000000001", 1};
const char* kOtherServerId = "7200000000000000002";
const std::string kSlot = "orders_outbox";
constexpr Lsn kSlotAt = Lsn(0x5000);

// What offsets.storage.topic holds under the connector's key.
enum Stored : unsigned {
  kNone = 1u << 0,
  kOwnBehind = 1u << 1,  // this server and slot, at or behind the slot
  kOwnAhead = 1u << 2,   // this server and slot, past the slot (Kafka committed, not confirmed)
  kOtherServer = 1u << 3,
  kOtherSlot = 1u << 4,
};
constexpr unsigned kAnyStored = kNone | kOwnBehind | kOwnAhead | kOtherServer | kOtherSlot;
constexpr unsigned kAnyPosition = kAnyStored & ~kNone;
constexpr unsigned kForeign = kOtherServer | kOtherSlot;
const std::vector<Stored> kStoredKinds = {kNone, kOwnBehind, kOwnAhead, kOtherServer, kOtherSlot};

enum Flag { kNo, kYes, kAny };
bool Matches(Flag flag, bool value) { return flag == kAny || (flag == kYes) == value; }

enum class Mode { kAtLeastOnce, kExactlyOnce, kAny };
bool Matches(Mode mode, DeliveryMode value) {
  return mode == Mode::kAny ||
         (mode == Mode::kExactlyOnce) == (value == DeliveryMode::kExactlyOnce);
}

// Where a streaming verdict starts.
enum class StartAt { kNone, kSlot, kStored };

struct Row {
  // The facts it covers.
  Mode mode;
  Flag slot_exists;
  unsigned stored;
  Flag streamed_here;
  Flag slot_create;
  Flag recreate;
  // The verdict.
  StartVerdict::Action action;
  ErrorCode stop_code;
  StartAt start;
  bool recreated;
  bool own_stored;
  bool warns;
};

using A = StartVerdict::Action;
constexpr ErrorCode kNoStop = ErrorCode::kOk;

// clang-format off
const std::vector<Row> kRules = {
  // A missing slot nobody streamed from: slot.create decides.
  {Mode::kAny, kNo, kNone, kNo, kNo, kAny,  A::kStop, ErrorCode::kSlotMissing, StartAt::kNone, false, false, false},
  {Mode::kAny, kNo, kNone, kNo, kYes, kAny, A::kCreateSlot, kNoStop, StartAt::kNone, false, false, false},
  // A missing slot this process streamed from: created again only when both keys allow it.
  {Mode::kAny, kNo, kNone, kYes, kYes, kYes, A::kCreateSlot, kNoStop, StartAt::kNone, true, false, false},
  {Mode::kAny, kNo, kNone, kYes, kNo, kAny, A::kStop, ErrorCode::kSlotGone, StartAt::kNone, false, false, false},
  {Mode::kAny, kNo, kNone, kYes, kYes, kNo, A::kStop, ErrorCode::kSlotGone, StartAt::kNone, false, false, false},
  // A missing slot with any stored position, of any server or slot: the connector streamed
  // before (a cutover to another server shows itself so).
  {Mode::kAny, kNo, kOwnBehind | kOwnAhead, kAny, kYes, kYes, A::kCreateSlot, kNoStop, StartAt::kNone, true, false, false},
  {Mode::kAny, kNo, kForeign, kAny, kYes, kYes, A::kCreateSlot, kNoStop, StartAt::kNone, true, false, true},
  {Mode::kAny, kNo, kAnyPosition, kAny, kNo, kAny, A::kStop, ErrorCode::kSlotGone, StartAt::kNone, false, false, false},
  {Mode::kAny, kNo, kAnyPosition, kAny, kYes, kNo, A::kStop, ErrorCode::kSlotGone, StartAt::kNone, false, false, false},
  // A present slot is streamed from.
  {Mode::kAny, kYes, kNone, kAny, kAny, kAny, A::kStream, kNoStop, StartAt::kSlot, false, false, false},
  {Mode::kAny, kYes, kOwnBehind, kAny, kAny, kAny, A::kStream, kNoStop, StartAt::kSlot, false, true, false},
  // Kafka committed past the slot: exactly once skips it, at least once repeats it.
  {Mode::kAtLeastOnce, kYes, kOwnAhead, kAny, kAny, kAny, A::kStream, kNoStop, StartAt::kSlot, false, true, false},
  {Mode::kExactlyOnce, kYes, kOwnAhead, kAny, kAny, kAny, A::kStream, kNoStop, StartAt::kStored, false, true, false},
  // Another server's or slot's position: at least once streams the slot and replaces it;
  // exactly once cannot place it and refuses.
  {Mode::kAtLeastOnce, kYes, kForeign, kAny, kAny, kAny, A::kStream, kNoStop, StartAt::kSlot, false, false, true},
  {Mode::kExactlyOnce, kYes, kForeign, kAny, kAny, kAny, A::kStop, ErrorCode::kOffsetMismatch, StartAt::kNone, false, false, false},
};
// clang-format on

SourceOffset StoredOf(Stored kind) {
  SourceOffset offset;
  offset.system_identifier = kServer.system_id;
  offset.timeline = 1;
  offset.slot = kSlot;
  offset.lsn = offset.lsn_commit = kind == kOwnAhead ? Lsn(0x9000) : Lsn(0x3000);
  if (kind == kOtherServer) offset.system_identifier = kOtherServerId;
  if (kind == kOtherSlot) offset.slot = "another_slot";
  return offset;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("start decision: every combination has one rule, and the verdict is the rule's") {
  int combinations = 0;
  for (DeliveryMode mode : {DeliveryMode::kAtLeastOnce, DeliveryMode::kExactlyOnce})
    for (bool slot_exists : {false, true})
      for (Stored stored : kStoredKinds)
        for (bool streamed_here : {false, true})
          for (bool slot_create : {false, true})
            for (bool recreate : {false, true}) {
              ++combinations;
              StartFacts facts;
              facts.mode = mode;
              facts.slot_name = kSlot;
              facts.offsets_topic = "connect-offsets";
              facts.server = kServer;
              facts.slot_exists = slot_exists;
              facts.slot_position = slot_exists ? kSlotAt : Lsn();
              facts.streamed_here = streamed_here;
              facts.last_confirmed = streamed_here ? Lsn(0x4000) : Lsn();
              if (stored != kNone) facts.stored = StoredOf(stored);
              facts.slot_create = slot_create;
              facts.recreate_when_missing = recreate;
              const std::string label =
                  std::string(mode == DeliveryMode::kExactlyOnce ? "exactly once"
                                                                 : "at least once") +
                  ", slot " + (slot_exists ? "present" : "missing") + ", stored kind " +
                  std::to_string(stored) + ", streamed here " + std::to_string(streamed_here) +
                  ", slot.create " + std::to_string(slot_create) + ", recreate " +
                  std::to_string(recreate);
              CAPTURE(label);

              std::vector<const Row*> matching;
              for (const Row& row : kRules) {
                if (Matches(row.mode, mode) && Matches(row.slot_exists, slot_exists) &&
                    (row.stored & stored) != 0 && Matches(row.streamed_here, streamed_here) &&
                    Matches(row.slot_create, slot_create) && Matches(row.recreate, recreate))
                  matching.push_back(&row);
              }
              REQUIRE(matching.size() == 1);
              const Row& rule = *matching.front();

              const StartVerdict verdict = DecideStart(facts);
              CHECK(verdict.action == rule.action);
              if (rule.action == A::kStop) {
                CHECK(verdict.stop.code() == rule.stop_code);
                // Every stop names the slot and this server; one about a stored position
                // names it and its server too.
                CHECK(Contains(verdict.stop.message(), "'" + kSlot + "'"));
                if (rule.stop_code != ErrorCode::kSlotMissing)
                  CHECK(Contains(verdict.stop.message(), kServer.system_id));
                if (facts.stored) {
                  CHECK(Contains(verdict.stop.message(), facts.stored->lsn_commit.ToString()));
                  CHECK(Contains(verdict.stop.message(), facts.stored->system_identifier));
                }
                continue;
              }
              CHECK(verdict.stop.ok());
              CHECK(verdict.slot_recreated == rule.recreated);
              CHECK(verdict.own_position_stored == rule.own_stored);
              CHECK(verdict.warning.empty() == !rule.warns);
              if (rule.warns) {
                CHECK(Contains(verdict.warning, facts.stored->system_identifier));
                CHECK(Contains(verdict.warning, kServer.system_id));
              }
              if (rule.start == StartAt::kSlot) CHECK(verdict.start == kSlotAt);
              if (rule.start == StartAt::kStored) CHECK(verdict.start == facts.stored->lsn_commit);
            }
  CHECK(combinations == 160);
}

TEST_CASE("start decision: a cutover to another server without the slot stops, naming both "
          "servers, the slot and the stored position") {
  // The reproduced loss: relay A streamed from server P1; the config's address now leads to
  // P2, where rows were committed before any relay connected. Creating the slot there at the
  // current WAL position would skip them.
  for (DeliveryMode mode : {DeliveryMode::kAtLeastOnce, DeliveryMode::kExactlyOnce}) {
    StartFacts facts;
    facts.mode = mode;
    facts.slot_name = kSlot;
    facts.offsets_topic = "connect-offsets";
    facts.server = kServer;
    facts.stored = StoredOf(kOtherServer);
    const StartVerdict verdict = DecideStart(facts);
    REQUIRE(verdict.action == A::kStop);
    CHECK(verdict.stop.code() == ErrorCode::kSlotGone);
    const std::string& message = verdict.stop.message();
    CHECK(Contains(message, "replication slot '" + kSlot + "' this connector streamed from"));
    CHECK(Contains(message, "server " + kServer.system_id));
    CHECK(Contains(message, "server " + std::string(kOtherServerId)));
    CHECK(Contains(message, "LSN 0/3000"));
    CHECK(Contains(message, "slot.recreate.when.missing"));
  }
}

TEST_CASE("start decision: positions are this slot's only on this server under this name") {
  SourceOffset stored = StoredOf(kOwnBehind);
  CHECK(IsOwnPosition(stored, kServer, kSlot));
  CHECK_FALSE(IsOwnPosition(stored, SourceIdentity{kOtherServerId, 1}, kSlot));
  CHECK_FALSE(IsOwnPosition(stored, kServer, "another_slot"));
  // Another timeline of the same server is the same server: its place is found by
  // delivery/timeline.h before the decision.
  CHECK(IsOwnPosition(stored, SourceIdentity{kServer.system_id, 3}, kSlot));
  stored.system_identifier.clear();  // written by a connector that did not record servers
  CHECK_FALSE(IsOwnPosition(stored, kServer, kSlot));
}
