#include "common/pg_time.h"

#include <chrono>
#include <string>

namespace walrelay {
namespace {

// Days since 1970-01-01 for a proleptic Gregorian date (H. Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool ReadDigits(std::string_view s, size_t& pos, size_t count, int64_t& out) {
  if (pos + count > s.size()) return false;
  out = 0;
  for (size_t i = 0; i < count; ++i) {
    const char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += count;
  return true;
}

}  // namespace

Result<int64_t> ParsePgTimestampMicros(std::string_view s) {
  auto bad = [&] {
    return Status::Decode("invalid timestamp '" + std::string(s) +
                          "', expected YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM]]");
  };
  size_t pos = 0;
  int64_t year, month, day, hour, minute, second;
  if (!ReadDigits(s, pos, 4, year) || pos >= s.size() || s[pos++] != '-' ||
      !ReadDigits(s, pos, 2, month) || pos >= s.size() || s[pos++] != '-' ||
      !ReadDigits(s, pos, 2, day) || pos >= s.size() || (s[pos] != ' ' && s[pos] != 'T')) {
    return bad();
  }
  ++pos;
  if (!ReadDigits(s, pos, 2, hour) || pos >= s.size() || s[pos++] != ':' ||
      !ReadDigits(s, pos, 2, minute) || pos >= s.size() || s[pos++] != ':' ||
      !ReadDigits(s, pos, 2, second)) {
    return bad();
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 24 || minute > 59 || second > 60)
    return bad();
  int64_t micros = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (digits < 6) micros = micros * 10 + (s[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return bad();
    for (int i = digits; i < 6; ++i) micros *= 10;
  }
  int64_t offset_seconds = 0;
  if (pos < s.size()) {
    const char sign = s[pos++];
    if (sign != '+' && sign != '-') return bad();
    int64_t oh = 0, om = 0, os = 0;
    if (!ReadDigits(s, pos, 2, oh)) return bad();
    if (pos < s.size() && s[pos] == ':') {
      ++pos;
      if (!ReadDigits(s, pos, 2, om)) return bad();
      if (pos < s.size() && s[pos] == ':') {
        ++pos;
        if (!ReadDigits(s, pos, 2, os)) return bad();
      }
    }
    if (pos != s.size()) return bad();
    offset_seconds = (oh * 3600 + om * 60 + os) * (sign == '-' ? -1 : 1);
  }
  const int64_t days =
      DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  const int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset_seconds;
  return seconds * 1000000 + micros;
}

Result<int64_t> ParsePgTimestampMillis(std::string_view s) {
  auto micros = ParsePgTimestampMicros(s);
  if (!micros.ok()) return micros.status();
  // Floor: the fraction counts forward from the whole second, also before 1970.
  return *micros / 1000 - (*micros % 1000 < 0 ? 1 : 0);
}

int64_t PgEpochMicrosNow() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::microseconds>(now).count() - kPgEpochOffsetMicros;
}

}  // namespace walrelay
