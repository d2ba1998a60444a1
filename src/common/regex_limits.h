// Limits on the numbers inside a regular expression taken from configuration.
//
// libstdc++'s std::regex reads the number of a `{n}`, `{n,}`, `{n,m}` quantifier or of a `\N`
// backreference into a `long` without checking for overflow (undefined behaviour from 19
// digits on), and copies the automaton once per repetition (regex_error past 100,000 states).
// Patterns from a config file are therefore checked before they are compiled, so that an
// oversized number is a config error naming the key instead.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace walrelay {

// The largest repetition count or backreference number accepted; larger ones could not
// compile within std::regex's state limit anyway.
inline constexpr long kMaxRegexNumber = 9999;

// Scans an ECMAScript pattern (as std::regex reads it: `\` escapes the next character,
// `[...]` is a class whose braces and digits are literal) and refuses any quantifier bound or
// backreference above kMaxRegexNumber, naming `key` and the pattern.
Status CheckRegexNumbers(std::string_view pattern, const std::string& key);

}  // namespace walrelay
