#include "common/lsn.h"

#include <charconv>
#include <cstdio>

namespace walrelay {

Result<Lsn> Lsn::Parse(std::string_view text) {
  const auto slash = text.find('/');
  auto bad = [&] {
    return Status::Decode("invalid LSN '" + std::string(text) + "', expected X/X in hex");
  };
  if (slash == std::string_view::npos || slash == 0 || slash + 1 >= text.size() || slash > 8 ||
      text.size() - slash - 1 > 8) {
    return bad();
  }
  uint32_t hi = 0, lo = 0;
  auto parse_part = [](std::string_view part, uint32_t& out) {
    auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), out, 16);
    return ec == std::errc() && ptr == part.data() + part.size();
  };
  if (!parse_part(text.substr(0, slash), hi) || !parse_part(text.substr(slash + 1), lo))
    return bad();
  return Lsn((static_cast<uint64_t>(hi) << 32) | lo);
}

std::string Lsn::ToString() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%X/%X", static_cast<unsigned>(value_ >> 32),
                static_cast<unsigned>(value_ & 0xffffffffu));
  return buf;
}

}  // namespace walrelay
