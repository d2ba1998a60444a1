#include "common/regex_limits.h"

namespace walrelay {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The value of the digits starting at `pos`, stopping (with kMaxRegexNumber + 1) as soon as
// it is too large so that the scan itself cannot overflow; `pos` ends after the digits.
long ReadNumber(std::string_view s, size_t& pos) {
  long value = 0;
  while (pos < s.size() && IsDigit(s[pos])) {
    if (value <= kMaxRegexNumber) value = value * 10 + (s[pos] - '0');
    ++pos;
  }
  return value;
}

}  // namespace

Status CheckRegexNumbers(std::string_view pattern, const std::string& key) {
  auto too_large = [&](const char* what) {
    return Status::Config("'" + key + "' entry '" + std::string(pattern) + "': " + what +
                          " is larger than " + std::to_string(kMaxRegexNumber));
  };
  bool in_class = false;
  size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\') {
      // Inside a class `\5` is not a backreference; outside, `\0` is NUL, not one.
      if (!in_class && i + 1 < pattern.size() && IsDigit(pattern[i + 1]) && pattern[i + 1] != '0') {
        ++i;
        if (ReadNumber(pattern, i) > kMaxRegexNumber) return too_large("a backreference number");
        continue;
      }
      // `\cX` is the control character X, whatever X is.
      i += (i + 1 < pattern.size() && pattern[i + 1] == 'c') ? 3 : 2;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      ++i;
      continue;
    }
    if (c == '{') {
      ++i;
      if (ReadNumber(pattern, i) > kMaxRegexNumber) return too_large("a repetition count");
      if (i < pattern.size() && pattern[i] == ',') {
        ++i;
        if (ReadNumber(pattern, i) > kMaxRegexNumber) return too_large("a repetition count");
      }
      continue;
    }
    ++i;
  }
  return Status::Ok();
}

}  // namespace walrelay
