// Timelines: where a source position stored on one PostgreSQL timeline is still the same WAL
// on the server's timeline.
//
// A promoted standby starts a new timeline at the point its recovery ended (the switch point).
// WAL below that point is shared with the old timeline; WAL at or past it was written by the
// new primary and holds other transactions than the old primary wrote at the same LSNs. A
// position stored while streaming the old timeline is therefore valid on the new one only up
// to the switch point: starting past it would skip the new primary's commits.
//
// Contract:
// - ParseTimelineHistory() reads the content of a timeline history file (TIMELINE_HISTORY's
//   second column): one "<timeline>\t<switch LSN>\t<reason>" line per ancestor, comments (#)
//   and blank lines ignored. Errors name the line.
// - PlaceOnTimeline() says how far a position stored on `stored_timeline` holds on the
//   server's `server_timeline` whose ancestors are `history`: everywhere on the same timeline;
//   up to the switch point where the stored timeline ended when it is an ancestor; and not at
//   all (kOffsetMismatch, naming both timelines) when it is neither, e.g. an old primary that
//   came back after its standby was promoted and streamed from.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "common/lsn.h"
#include "common/status.h"

namespace walrelay {

// `timeline` ended at `switch_point`, where its successor in the history began.
struct TimelineSwitch {
  uint32_t timeline = 0;
  Lsn switch_point;
  friend bool operator==(const TimelineSwitch&, const TimelineSwitch&) = default;
};

Result<std::vector<TimelineSwitch>> ParseTimelineHistory(std::string_view content);

struct TimelinePlacement {
  // The highest position that is the same WAL on both timelines; nullopt: no limit (the
  // stored timeline is the server's).
  std::optional<Lsn> valid_until;
  // The stored position capped at valid_until.
  Lsn position;
  // True when the stored position lay past valid_until: the range (valid_until, stored] was
  // streamed from a timeline the server abandoned.
  bool abandoned = false;
};

Result<TimelinePlacement> PlaceOnTimeline(Lsn stored, uint32_t stored_timeline,
                                          uint32_t server_timeline,
                                          const std::vector<TimelineSwitch>& history);

}  // namespace walrelay
