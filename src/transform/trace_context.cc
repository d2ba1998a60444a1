#include "transform/trace_context.h"

#include <algorithm>

namespace walrelay {
namespace {

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool AllZero(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '0'; });
}

// Java's Properties white space.
bool IsPropertiesBlank(char c) { return c == ' ' || c == '\t' || c == '\f'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Properties' logical lines: comments and blank lines dropped, leading white space removed,
// a line ending in an odd number of backslashes continued on the next (whose leading white
// space is dropped too).
std::vector<std::string> LogicalLines(std::string_view text) {
  std::vector<std::string> lines;
  std::string current;
  bool continuing = false;
  size_t i = 0;
  while (i <= text.size()) {
    size_t end = text.find_first_of("\r\n", i);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(i, end - i);
    i = end + 1;
    if (end < text.size() && text[end] == '\r' && i < text.size() && text[i] == '\n') ++i;
    size_t start = 0;
    while (start < line.size() && (IsPropertiesBlank(line[start]))) ++start;
    line.remove_prefix(start);
    if (!continuing && (line.empty() || line[0] == '#' || line[0] == '!')) {
      if (end >= text.size()) break;
      continue;
    }
    size_t backslashes = 0;
    while (backslashes < line.size() && line[line.size() - 1 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 1) {
      current.append(line.substr(0, line.size() - 1));
      continuing = true;
    } else {
      current.append(line);
      lines.push_back(std::move(current));
      current.clear();
      continuing = false;
    }
    if (end >= text.size()) break;
  }
  if (continuing) lines.push_back(std::move(current));
  return lines;
}

// Reads one key or value from `s` at `i` up to `stop` (for keys: an unescaped separator),
// resolving escapes.
std::string Unescape(std::string_view s, size_t& i, bool key) {
  std::string out;
  while (i < s.size()) {
    const char c = s[i];
    if (key && (c == '=' || c == ':' || IsPropertiesBlank(c))) break;
    ++i;
    if (c != '\\' || i >= s.size()) {
      if (c != '\\') out += c;
      continue;
    }
    const char e = s[i++];
    switch (e) {
      case 't': out += '\t'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 'f': out += '\f'; break;
      case 'u': {
        uint32_t cp = 0;
        int digits = 0;
        while (digits < 4 && i < s.size() && HexValue(s[i]) >= 0) {
          cp = cp << 4 | static_cast<uint32_t>(HexValue(s[i++]));
          ++digits;
        }
        AppendUtf8(out, cp);
        break;
      }
      default: out += e; break;
    }
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ParseJavaProperties(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& line : LogicalLines(text)) {
    size_t i = 0;
    std::string key = Unescape(line, i, true);
    // The separator: white space, then at most one '=' or ':', then white space.
    while (i < line.size() && IsPropertiesBlank(line[i])) ++i;
    if (i < line.size() && (line[i] == '=' || line[i] == ':')) ++i;
    while (i < line.size() && IsPropertiesBlank(line[i])) ++i;
    std::string value = Unescape(line, i, false);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == key; });
    if (it != out.end()) {
      it->second = std::move(value);
    } else {
      out.emplace_back(std::move(key), std::move(value));
    }
  }
  return out;
}

TraceContinuer::TraceContinuer() : random_(std::random_device{}()) {}

std::string TraceContinuer::RandomHex(size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  do {
    out.clear();
    for (size_t i = 0; i < bytes; i += 8) {
      uint64_t v = random_();
      for (size_t k = 0; k < 8 && i + k < bytes; ++k, v >>= 8) {
        out += kHex[(v >> 4) & 0xF];
        out += kHex[v & 0xF];
      }
    }
  } while (AllZero(out));  // an all-zero id is invalid
  return out;
}

namespace {

// OpenTelemetry Java's W3CTraceContextPropagator reading of `traceparent`: the trace id and
// the flags byte; nullopt when invalid.
std::optional<std::pair<std::string, int>> ParseTraceparent(std::string_view v) {
  constexpr size_t kLength = 55;
  if (v.size() < kLength) return std::nullopt;
  const std::string_view version = v.substr(0, 2);
  if (!IsLowerHex(version) || version == "ff") return std::nullopt;
  if (version == "00" && v.size() != kLength) return std::nullopt;
  if (v.size() > kLength && v[kLength] != '-') return std::nullopt;
  if (v[2] != '-' || v[35] != '-' || v[52] != '-') return std::nullopt;
  const std::string_view trace = v.substr(3, 32), span = v.substr(36, 16), flags = v.substr(53, 2);
  if (!IsLowerHex(trace) || AllZero(trace) || !IsLowerHex(span) || AllZero(span)) {
    return std::nullopt;
  }
  if (HexValue(flags[0]) < 0 || HexValue(flags[1]) < 0) return std::nullopt;
  return std::make_pair(std::string(trace), HexValue(flags[0]) * 16 + HexValue(flags[1]));
}

// W3C tracestate as OpenTelemetry reads it: up to 32 comma-separated key=value members with
// valid keys and values, blank members skipped; any invalid member makes the whole header
// ignored. Written back joined by ",".
std::optional<std::string> ParseTracestate(std::string_view v) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  auto valid_key = [](std::string_view k) {
    if (k.empty() || k.size() > 256) return false;
    const size_t at = k.find('@');
    if (at != std::string_view::npos && (at == 0 || at + 1 == k.size() || at > 241)) return false;
    if (!(k[0] >= 'a' && k[0] <= 'z') && !(k[0] >= '0' && k[0] <= '9')) return false;
    for (char c : k) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                      c == '*' || c == '/' || c == '@';
      if (!ok) return false;
    }
    return true;
  };
  auto valid_value = [](std::string_view val) {
    if (val.empty() || val.size() > 256 || val.back() == ' ') return false;
    for (char c : val)
      if (c < 0x20 || c > 0x7e || c == ',' || c == '=') return false;
    return true;
  };
  std::vector<std::string> members;
  size_t start = 0;
  while (start <= v.size()) {
    size_t end = v.find(',', start);
    if (end == std::string_view::npos) end = v.size();
    const std::string_view member = trim(v.substr(start, end - start));
    start = end + 1;
    if (!member.empty()) {
      const size_t eq = member.find('=');
      if (eq == std::string_view::npos) return std::nullopt;
      if (!valid_key(member.substr(0, eq)) || !valid_value(member.substr(eq + 1))) {
        return std::nullopt;
      }
      members.emplace_back(member);
    }
    if (end == v.size()) break;
  }
  if (members.empty() || members.size() > 32) return std::nullopt;
  std::string out;
  for (const auto& m : members) out += (out.empty() ? "" : ",") + m;
  return out;
}

}  // namespace

TraceHeaders TraceContinuer::Continue(const std::optional<std::string>& properties) {
  std::optional<std::pair<std::string, int>> parent;
  std::optional<std::string> state;
  if (properties) {
    const auto props = ParseJavaProperties(*properties);
    for (const auto& [k, v] : props)
      if (k == "traceparent") parent = ParseTraceparent(v);
    if (parent) {
      for (const auto& [k, v] : props)
        if (k == "tracestate") state = ParseTracestate(v);
    }
  }
  TraceHeaders out;
  // A child keeps the parent's trace, its sampled flag (0x01) and its W3C "random trace id"
  // flag (0x02); OpenTelemetry Java drops the other bits (a parent's ff gives 03). A new trace
  // is sampled and random: 03, as OpenTelemetry Java sets for the ids it generates.
  static constexpr const char* kFlags[] = {"-00", "-01", "-02", "-03"};
  const std::string flags = parent ? kFlags[parent->second & 0x03] : "-03";
  const std::string trace = parent ? parent->first : RandomHex(16);
  out.traceparent = "00-" + trace + "-" + RandomHex(8) + flags;
  out.tracestate = std::move(state);
  return out;
}

}  // namespace walrelay
