#include <doctest/doctest.h>

#include "delivery/timeline.h"

using namespace walrelay;

namespace {

Lsn L(const char* text) { return *Lsn::Parse(text); }

}  // namespace

TEST_CASE("timeline history: PostgreSQL's history file format, comments and reasons ignored") {
  auto history = ParseTimelineHistory("1\t0/3000060\tno recovery target specified\n"
                                      "\n"
                                      "# a comment\n"
                                      "2\t0/5000A28\tat restore point \"before\"\n");
  REQUIRE_MESSAGE(history.ok(), history.status().ToString());
  REQUIRE(history->size() == 2);
  CHECK((*history)[0] == TimelineSwitch{1, L("0/3000060")});
  CHECK((*history)[1] == TimelineSwitch{2, L("0/5000A28")});
  CHECK(ParseTimelineHistory("")->empty());

  for (const char* bad : {"1", "x\t0/1\treason", "0\t0/1\tr", "1\tnot-an-lsn\tr"}) {
    auto refused = ParseTimelineHistory(bad);
    REQUIRE_FALSE(refused.ok());
    CHECK_MESSAGE(refused.status().message().find("line 1") != std::string::npos,
                  refused.status().message());
  }
}

TEST_CASE("timeline placement: a stored position never reaches past its timeline's end") {
  const std::vector<TimelineSwitch> history = {{1, L("0/3000000")}, {2, L("0/5000000")}};

  // Same timeline: the position holds as it is.
  auto same = PlaceOnTimeline(L("0/9000000"), 3, 3, history);
  REQUIRE(same.ok());
  CHECK(same->position == L("0/9000000"));
  CHECK_FALSE(same->abandoned);
  CHECK_FALSE(same->valid_until.has_value());

  // Stored on timeline 2 before it ended: the same WAL on timeline 3.
  auto before = PlaceOnTimeline(L("0/4000000"), 2, 3, history);
  REQUIRE(before.ok());
  CHECK(before->position == L("0/4000000"));
  CHECK_FALSE(before->abandoned);
  CHECK(before->valid_until == L("0/5000000"));

  // Stored on timeline 1 past its end (the standby was promoted behind the old primary): the
  // new timeline's commits after 0/3000000 must be streamed, not skipped.
  auto past = PlaceOnTimeline(L("0/3500000"), 1, 3, history);
  REQUIRE(past.ok());
  CHECK(past->position == L("0/3000000"));
  CHECK(past->abandoned);
  CHECK(past->valid_until == L("0/3000000"));

  // Exactly at the switch point: the same WAL.
  auto at = PlaceOnTimeline(L("0/3000000"), 1, 2, history);
  REQUIRE(at.ok());
  CHECK_FALSE(at->abandoned);

  // A timeline the server does not descend from: an old primary back after a promotion.
  auto foreign = PlaceOnTimeline(L("0/6000000"), 4, 3, history);
  REQUIRE_FALSE(foreign.ok());
  CHECK(foreign.status().code() == ErrorCode::kOffsetMismatch);
  CHECK(foreign.status().message().find("timeline 4") != std::string::npos);
  auto older = PlaceOnTimeline(L("0/6000000"), 2, 1, {});
  REQUIRE_FALSE(older.ok());
}
