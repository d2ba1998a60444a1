#include "delivery/timeline.h"

#include <charconv>
#include <string>

namespace walrelay {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::vector<TimelineSwitch>> ParseTimelineHistory(std::string_view content) {
  std::vector<TimelineSwitch> history;
  int line_number = 0;
  while (!content.empty()) {
    const size_t end = content.find('\n');
    std::string_view line = TrimSpaces(content.substr(0, end));
    content = end == std::string_view::npos ? std::string_view() : content.substr(end + 1);
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    const auto bad = [&](const std::string& why) {
      return Status::Protocol("timeline history line " + std::to_string(line_number) + " ('" +
                              std::string(line) + "'): " + why);
    };
    const size_t tab = line.find_first_of(" \t");
    if (tab == std::string_view::npos) return bad("expected a timeline and a switch point");
    TimelineSwitch entry;
    const std::string_view tli = line.substr(0, tab);
    auto [next, ec] = std::from_chars(tli.data(), tli.data() + tli.size(), entry.timeline);
    if (ec != std::errc() || next != tli.data() + tli.size() || entry.timeline == 0)
      return bad("the timeline is not a positive number");
    std::string_view rest = TrimSpaces(line.substr(tab));
    const size_t lsn_end = rest.find_first_of(" \t");
    auto lsn = Lsn::Parse(rest.substr(0, lsn_end));
    if (!lsn.ok()) return bad("the switch point is not an LSN");
    entry.switch_point = *lsn;
    history.push_back(entry);
  }
  return history;
}

Result<TimelinePlacement> PlaceOnTimeline(Lsn stored, uint32_t stored_timeline,
                                          uint32_t server_timeline,
                                          const std::vector<TimelineSwitch>& history) {
  TimelinePlacement placement;
  placement.position = stored;
  if (stored_timeline == server_timeline) return placement;
  for (const TimelineSwitch& ancestor : history) {
    if (ancestor.timeline != stored_timeline) continue;
    placement.valid_until = ancestor.switch_point;
    if (stored > ancestor.switch_point) {
      placement.position = ancestor.switch_point;
      placement.abandoned = true;
    }
    return placement;
  }
  return Status(ErrorCode::kOffsetMismatch,
                "the stored position " + stored.ToString() + " is on timeline " +
                    std::to_string(stored_timeline) +
                    ", which is not in the history of the "
                    "server's timeline " +
                    std::to_string(server_timeline) +
                    " (a server that did not descend from the one streamed from, such as an old "
                    "primary back after its standby was promoted)");
}

}  // namespace walrelay
