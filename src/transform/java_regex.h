// TopicRegex: Kafka Connect's RegexRouter (java.util.regex syntax and Matcher replacement rules)
// on top of std::regex.
//
// Compile() translates a Java pattern to ECMAScript and pre-parses the replacement; every
// problem, including Java constructs std::regex cannot express (lookbehind, possessive
// quantifiers, \p{..}, inline flags other than a leading (?i)), is a config error naming the
// key. Apply() returns the rewritten value when the pattern matches the *whole* input and
// std::nullopt otherwise, like RegexRouter's `matches()` + `replaceFirst()`.
//
// Matching runs on code points (the input is decoded from UTF-8; invalid bytes are kept
// verbatim in the output), character classes are ASCII-only as in Java's defaults, and `.`
// excludes Java's line terminators (\n \r \u0085 \u2028 \u2029). Nothing is cached.
// Immutable after Compile(); const methods are safe to call from several threads.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace walrelay {

class TopicRegex {
 public:
  // `pattern_key` names the pattern in error messages; `replacement_key` names the
  // replacement (defaults to `pattern_key`).
  static Result<TopicRegex> Compile(const std::string& pattern, const std::string& replacement,
                                    const std::string& pattern_key,
                                    const std::string& replacement_key = "");

  // The replacement expanded against `input` if the pattern matches all of it, else nullopt.
  std::optional<std::string> Apply(std::string_view input) const;

  // Number of capturing groups in the pattern (named ones included).
  size_t group_count() const { return group_count_; }

 private:
  // One piece of the pre-parsed replacement: literal bytes, or a group reference.
  struct Part {
    std::string literal;
    int group = -1;  // >= 0: append that group's text (nothing if it did not participate)
  };

  static Result<std::vector<Part>> ParseReplacement(const std::string& replacement,
                                                    size_t group_count,
                                                    const std::map<std::string, int>& names,
                                                    const std::string& key);

  TopicRegex(std::wregex regex, std::vector<Part> replacement, size_t group_count)
      : regex_(std::move(regex)), replacement_(std::move(replacement)), group_count_(group_count) {}

  std::wregex regex_;
  std::vector<Part> replacement_;
  size_t group_count_ = 0;
};

}  // namespace walrelay
