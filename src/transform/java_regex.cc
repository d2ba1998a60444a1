#include "transform/java_regex.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <locale>
#include <map>
#include <utility>

#include "common/regex_limits.h"

namespace walrelay {
namespace {

// The pattern runs on UTF-32 code points so that `.`, classes and quantifiers see characters,
// as Java's do, rather than UTF-8 bytes.
static_assert(sizeof(wchar_t) == 4, "TopicRegex needs a 32-bit wchar_t");

// Java's `.` (without DOTALL) excludes its five line terminators; ECMAScript's `.` in
// libstdc++ excludes \n \r \u2028 \u2029 but matches \u0085, so it is spelled out.
constexpr const wchar_t* kJavaDot = L"[^\\n\\r\\u0085\\u2028\\u2029]";
// Java's `$` and `\Z` (without MULTILINE): end of input, or before one final line terminator.
constexpr const wchar_t* kJavaEnd = L"(?=(?:\\r\\n|[\\n\\r\\u0085\\u2028\\u2029])?$)";

struct Utf32Text {
  std::wstring text;
  std::vector<size_t> offsets;  // byte offset of each code point, plus the total size
  bool valid = true;
};

// Decodes UTF-8. An invalid byte becomes one U+FFFD code point, so byte offsets still map
// back onto the original bytes and Apply() can copy them out unchanged.
Utf32Text DecodeUtf8(std::string_view s) {
  static constexpr char32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  Utf32Text d;
  d.text.reserve(s.size());
  d.offsets.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    d.offsets.push_back(i);
    const auto lead = static_cast<unsigned char>(s[i]);
    char32_t cp = 0;
    size_t len = 0;
    if (lead < 0x80) {
      cp = lead, len = 1;
    } else if ((lead & 0xE0) == 0xC0) {
      cp = lead & 0x1F, len = 2;
    } else if ((lead & 0xF0) == 0xE0) {
      cp = lead & 0x0F, len = 3;
    } else if ((lead & 0xF8) == 0xF0) {
      cp = lead & 0x07, len = 4;
    }
    bool ok = len != 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cont = static_cast<unsigned char>(s[i + k]);
      ok = (cont & 0xC0) == 0x80;
      cp = (cp << 6) | (cont & 0x3F);
    }
    if (ok && (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) {
      ok = false;
    }
    if (!ok) {
      cp = 0xFFFD, len = 1;
      d.valid = false;
    }
    d.text.push_back(static_cast<wchar_t>(cp));
    i += len;
  }
  d.offsets.push_back(s.size());
  return d;
}

bool IsAsciiAlpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char32_t c) { return c >= '0' && c <= '9'; }
int HexValue(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<int>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<int>(c - 'A' + 10);
  return -1;
}

// Rewrites a java.util.regex pattern as an equivalent ECMAScript one, or says why it cannot.
class PatternTranslator {
 public:
  PatternTranslator(std::wstring pattern, const std::string& original, const std::string& key)
      : p_(std::move(pattern)), original_(original), key_(key) {}

  Status Run() {
    // A leading (?i) is Java's whole-pattern case-insensitive flag (ASCII only, like icase
    // with the classic locale). Inline flags anywhere else have no ECMAScript equivalent.
    if (p_.compare(0, 4, L"(?i)") == 0) {
      icase_ = true;
      pos_ = 4;
    }
    while (pos_ < p_.size()) {
      WALRELAY_RETURN_IF_ERROR(in_class_ ? ClassStep() : Step());
    }
    if (in_class_) return Error("unclosed character class");
    return Status::Ok();
  }

  const std::wstring& translated() const { return out_; }
  size_t group_count() const { return group_count_; }
  const std::map<std::string, int>& names() const { return names_; }
  bool icase() const { return icase_; }

 private:
  Status Error(const std::string& what) const {
    return Status::Config("'" + key_ + "': " + what + " at index " + std::to_string(pos_) +
                          " of pattern '" + original_ + "'");
  }

  char32_t Peek(size_t ahead = 0) const {
    return pos_ + ahead < p_.size() ? static_cast<char32_t>(p_[pos_ + ahead]) : 0;
  }
  bool Has(size_t ahead) const { return pos_ + ahead < p_.size(); }

  // Appends a code point that must match itself, escaping ECMAScript syntax characters.
  void EmitLiteral(char32_t cp) {
    if (cp == 0) {
      out_ += L"\\x00";
      return;
    }
    if (cp < 0x80 && std::strchr("\\^$.|?*+()[]{}/-", static_cast<int>(cp)) != nullptr) {
      out_ += L'\\';
    }
    out_ += static_cast<wchar_t>(cp);
  }

  Status Step() {
    const char32_t c = Peek();
    switch (c) {
      case '\\': return Escape();
      case '[':
        out_ += L'[';
        ++pos_;
        if (Peek() == '^') {
          out_ += L'^';
          ++pos_;
        }
        in_class_ = true;
        class_first_ = true;
        return Status::Ok();
      case '(': return Group();
      case '.':
        out_ += kJavaDot;
        ++pos_;
        return Status::Ok();
      case '$':
        out_ += kJavaEnd;
        ++pos_;
        return Status::Ok();
      case '*':
      case '+':
      case '?':
        out_ += static_cast<wchar_t>(c);
        ++pos_;
        return AfterQuantifier();
      case '{': return Braces();
      default:
        // `]` and `}` outside a class are literals in Java; everything else maps one to one.
        if (c == ']' || c == '}') {
          EmitLiteral(c);
        } else {
          out_ += static_cast<wchar_t>(c);
        }
        ++pos_;
        return Status::Ok();
    }
  }

  Status ClassStep() {
    const char32_t c = Peek();
    const bool first = class_first_;
    class_first_ = false;
    if (c == '\\') return Escape();
    if (c == '[') return Error("nested character classes (Java class unions) are not supported");
    if (c == '&' && Peek(1) == '&') {
      return Error("character class intersection (&&) is not supported");
    }
    if (c == ']') {
      // Java reads a `]` right after `[` or `[^` as a literal, ECMAScript as an empty class.
      if (first) {
        out_ += L"\\]";
      } else {
        out_ += L']';
        in_class_ = false;
      }
    } else {
      out_ += static_cast<wchar_t>(c);
    }
    ++pos_;
    return Status::Ok();
  }

  // After `*`, `+`, `?` or `{..}`: a lazy `?` maps directly; a possessive `+` would be read by
  // std::regex as a second, nested quantifier, so it is refused.
  Status AfterQuantifier() {
    if (Peek() == '?') {
      out_ += L'?';
      ++pos_;
    } else if (Peek() == '+') {
      return Error("possessive quantifiers (*+, ++, ?+, {n}+) are not supported");
    }
    return Status::Ok();
  }

  Status Braces() {
    size_t i = pos_ + 1;
    bool too_large = false;
    auto digits = [&] {
      const size_t start = i;
      long value = 0;
      while (i < p_.size() && IsAsciiDigit(static_cast<char32_t>(p_[i]))) {
        if (value <= kMaxRegexNumber) value = value * 10 + (p_[i] - L'0');
        ++i;
      }
      too_large = too_large || value > kMaxRegexNumber;
      return i > start;
    };
    bool ok = digits();
    if (ok && i < p_.size() && p_[i] == L',') {
      ++i;
      digits();
    }
    ok = ok && i < p_.size() && p_[i] == L'}';
    if (!ok)
      return Error("'{' does not start a {n}, {n,} or {n,m} quantifier (write \\{ for a brace)");
    if (too_large)
      return Error("a repetition count is larger than " + std::to_string(kMaxRegexNumber));
    out_.append(p_, pos_, i + 1 - pos_);
    pos_ = i + 1;
    return AfterQuantifier();
  }

  Status Group() {
    if (Peek(1) != '?') {
      ++group_count_;
      out_ += L'(';
      ++pos_;
      return Status::Ok();
    }
    const char32_t kind = Peek(2);
    if (kind == ':' || kind == '=' || kind == '!') {
      out_.append(p_, pos_, 3);
      pos_ += 3;
      return Status::Ok();
    }
    if (kind == '<') {
      const char32_t next = Peek(3);
      if (next == '=' || next == '!') {
        return Error("lookbehind ((?<= or (?<!) is not supported by std::regex (ECMAScript)");
      }
      if (!IsAsciiAlpha(next)) return Error("a group name must start with an ASCII letter");
      size_t i = pos_ + 3;
      std::string name;
      while (i < p_.size() && (IsAsciiAlpha(static_cast<char32_t>(p_[i])) ||
                               IsAsciiDigit(static_cast<char32_t>(p_[i])))) {
        name += static_cast<char>(p_[i++]);
      }
      if (i >= p_.size() || p_[i] != L'>') {
        return Error("named group '" + name + "' is missing its closing '>'");
      }
      if (names_.count(name) != 0) return Error("named group '" + name + "' is defined twice");
      names_[name] = static_cast<int>(++group_count_);
      out_ += L'(';
      pos_ = i + 1;
      return Status::Ok();
    }
    if (kind == '>') return Error("atomic groups ((?>...)) are not supported");
    return Error("inline flags and group constructs other than (?: (?= (?! (?<name> and a "
                 "leading (?i) are not supported");
  }

  Status Escape() {
    if (!Has(1)) return Error("the pattern ends with a lone backslash");
    const char32_t c = Peek(1);
    pos_ += 2;
    if (c >= '1' && c <= '9') return Backreference(static_cast<int>(c - '0'));
    switch (c) {
      case 't': EmitLiteral(0x09); return Status::Ok();
      case 'n': EmitLiteral(0x0A); return Status::Ok();
      case 'r': EmitLiteral(0x0D); return Status::Ok();
      case 'f': EmitLiteral(0x0C); return Status::Ok();
      case 'a': EmitLiteral(0x07); return Status::Ok();
      case 'e': EmitLiteral(0x1B); return Status::Ok();
      case '0': return Octal();
      case 'x': return HexEscape();
      case 'u': return UnicodeEscape();
      case 'c':
        if (!Has(0)) return Error("\\c must be followed by a character");
        EmitLiteral(Peek() ^ 64);
        ++pos_;
        return Status::Ok();
      // With the classic locale these classes are ASCII-only in std::regex, as in Java.
      case 'd':
      case 'D':
      case 's':
      case 'S':
      case 'w':
      case 'W':
        out_ += L'\\';
        out_ += static_cast<wchar_t>(c);
        return Status::Ok();
      case 'Q': return Quote();
      default: break;
    }
    if (in_class_) {
      if (IsAsciiAlpha(c)) return UnsupportedEscape(c);
      EmitLiteral(c);
      return Status::Ok();
    }
    switch (c) {
      case 'b':
      case 'B':
        out_ += L'\\';
        out_ += static_cast<wchar_t>(c);
        return Status::Ok();
      case 'A': out_ += L'^'; return Status::Ok();
      case 'z': out_ += L'$'; return Status::Ok();
      case 'Z': out_ += kJavaEnd; return Status::Ok();
      case 'k': return NamedBackreference();
      default: break;
    }
    // Java reads a backslash before any non-letter as "this character literally".
    if (IsAsciiAlpha(c)) return UnsupportedEscape(c);
    EmitLiteral(c);
    return Status::Ok();
  }

  Status UnsupportedEscape(char32_t c) {
    pos_ -= 2;
    return Error(std::string("escape \\") + static_cast<char>(c) +
                 (in_class_ ? " is not supported inside a character class"
                            : " is not supported (std::regex has no equivalent)"));
  }

  // Java's rule: take further digits while they still name an existing group.
  Status Backreference(int ref) {
    if (in_class_) return Error("backreferences are not allowed inside a character class");
    while (IsAsciiDigit(Peek())) {
      const int next = ref * 10 + static_cast<int>(Peek() - '0');
      if (next > static_cast<int>(group_count_)) break;
      ref = next;
      ++pos_;
    }
    if (ref > static_cast<int>(group_count_)) {
      return Error("backreference \\" + std::to_string(ref) +
                   " names a group not defined before it");
    }
    EmitBackreference(ref);
    return Status::Ok();
  }

  // Wrapped so that a literal digit after it cannot extend the group number.
  void EmitBackreference(int ref) { out_ += L"(?:\\" + std::to_wstring(ref) + L")"; }

  Status NamedBackreference() {
    if (Peek() != '<') return Error("\\k must be followed by <name>");
    size_t i = pos_ + 1;
    std::string name;
    while (i < p_.size() && (IsAsciiAlpha(static_cast<char32_t>(p_[i])) ||
                             IsAsciiDigit(static_cast<char32_t>(p_[i])))) {
      name += static_cast<char>(p_[i++]);
    }
    if (i >= p_.size() || p_[i] != L'>')
      return Error("\\k<" + name + " is missing its closing '>'");
    auto it = names_.find(name);
    if (it == names_.end()) return Error("\\k<" + name + "> names no group defined before it");
    pos_ = i + 1;
    EmitBackreference(it->second);
    return Status::Ok();
  }

  // \0n, \0nn, \0mnn (m <= 3).
  Status Octal() {
    auto octal = [&](size_t ahead) {
      const char32_t d = Peek(ahead);
      return Has(ahead) && d >= '0' && d <= '7' ? static_cast<int>(d - '0') : -1;
    };
    const int d1 = octal(0);
    if (d1 < 0) return Error("\\0 must be followed by an octal digit");
    int value = d1;
    size_t used = 1;
    const int d2 = octal(1);
    if (d2 >= 0) {
      value = value * 8 + d2;
      used = 2;
      const int d3 = octal(2);
      if (d3 >= 0 && d1 <= 3) {
        value = value * 8 + d3;
        used = 3;
      }
    }
    pos_ += used;
    EmitLiteral(static_cast<char32_t>(value));
    return Status::Ok();
  }

  Status HexEscape() {
    char32_t value = 0;
    if (Peek() == '{') {
      size_t i = pos_ + 1;
      size_t count = 0;
      while (i < p_.size() && HexValue(static_cast<char32_t>(p_[i])) >= 0 && value <= 0x10FFFF) {
        value = value * 16 + static_cast<char32_t>(HexValue(static_cast<char32_t>(p_[i++])));
        ++count;
      }
      if (count == 0 || i >= p_.size() || p_[i] != L'}' || value > 0x10FFFF) {
        return Error("\\x{...} must hold a hexadecimal code point up to 10FFFF");
      }
      pos_ = i + 1;
    } else {
      const int h1 = Has(0) ? HexValue(Peek()) : -1;
      const int h2 = Has(1) ? HexValue(Peek(1)) : -1;
      if (h1 < 0 || h2 < 0) return Error("\\x must be followed by two hexadecimal digits");
      value = static_cast<char32_t>(h1 * 16 + h2);
      pos_ += 2;
    }
    EmitLiteral(value);
    return Status::Ok();
  }

  Status UnicodeEscape() {
    auto read4 = [&](size_t at, char32_t& out) {
      out = 0;
      for (size_t k = 0; k < 4; ++k) {
        const int h = at + k < p_.size() ? HexValue(static_cast<char32_t>(p_[at + k])) : -1;
        if (h < 0) return false;
        out = out * 16 + static_cast<char32_t>(h);
      }
      return true;
    };
    char32_t unit = 0;
    if (!read4(pos_, unit)) return Error("\\u must be followed by four hexadecimal digits");
    pos_ += 4;
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      // A UTF-16 surrogate pair written as two escapes is one code point.
      char32_t low = 0;
      if (Peek() == '\\' && Peek(1) == 'u' && read4(pos_ + 2, low) && low >= 0xDC00 &&
          low <= 0xDFFF) {
        pos_ += 6;
        EmitLiteral(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
        return Status::Ok();
      }
    }
    if (unit >= 0xD800 && unit <= 0xDFFF) return Error("\\u escape is a lone UTF-16 surrogate");
    EmitLiteral(unit);
    return Status::Ok();
  }

  // \Q...\E: everything in between is literal; a missing \E quotes to the end.
  Status Quote() {
    while (pos_ < p_.size()) {
      if (Peek() == '\\' && Peek(1) == 'E') {
        pos_ += 2;
        return Status::Ok();
      }
      EmitLiteral(Peek());
      ++pos_;
      class_first_ = false;
    }
    return Status::Ok();
  }

  const std::wstring p_;
  const std::string& original_;
  const std::string& key_;
  std::wstring out_;
  size_t pos_ = 0;
  bool in_class_ = false;
  bool class_first_ = false;
  bool icase_ = false;
  size_t group_count_ = 0;
  std::map<std::string, int> names_;
};

}  // namespace

// Parses a replacement the way java.util.regex.Matcher.appendReplacement reads it: `\x` is a
// literal x, `${name}` a named group, `$n` a numbered group where further digits are taken
// while the number still names a group. Java reports a bad group reference only when a match
// is replaced; the groups are known here, so walrelay reports it at configuration time.
Result<std::vector<TopicRegex::Part>> TopicRegex::ParseReplacement(
    const std::string& r, size_t group_count, const std::map<std::string, int>& names,
    const std::string& key) {
  auto error = [&](const std::string& what) {
    return Status::Config("'" + key + "': " + what + " in replacement '" + r + "'");
  };
  std::vector<Part> parts;
  std::string literal;
  auto push_group = [&](int group) {
    if (!literal.empty()) parts.push_back({std::move(literal), -1});
    literal.clear();
    parts.push_back({"", group});
  };
  size_t i = 0;
  while (i < r.size()) {
    const char c = r[i++];
    if (c == '\\') {
      if (i >= r.size()) return error("a trailing '\\' has no character to escape");
      literal += r[i++];
      continue;
    }
    if (c != '$') {
      literal += c;
      continue;
    }
    if (i >= r.size()) return error("'$' at the end is missing a group number or ${name}");
    if (r[i] == '{') {
      ++i;
      std::string name;
      while (i < r.size() && (IsAsciiAlpha(static_cast<unsigned char>(r[i])) ||
                              IsAsciiDigit(static_cast<unsigned char>(r[i])))) {
        name += r[i++];
      }
      if (name.empty()) return error("'${}' has an empty group name");
      if (i >= r.size() || r[i] != '}') return error("'${" + name + "' is missing its '}'");
      ++i;
      if (IsAsciiDigit(static_cast<unsigned char>(name[0]))) {
        return error("group name '" + name + "' starts with a digit");
      }
      auto it = names.find(name);
      if (it == names.end()) {
        std::string known;
        for (const auto& [n, _] : names) known += (known.empty() ? "" : ", ") + n;
        return error("no group named '" + name +
                     "' (the pattern's named groups: " + (known.empty() ? "none" : known) + ")");
      }
      push_group(it->second);
      continue;
    }
    if (!IsAsciiDigit(static_cast<unsigned char>(r[i]))) {
      return error("'$' must be followed by a group number or {name} (write \\$ for a dollar)");
    }
    size_t ref = static_cast<size_t>(r[i++] - '0');
    if (ref > group_count) {
      return error("group $" + std::to_string(ref) + " does not exist (the pattern has " +
                   std::to_string(group_count) + " groups)");
    }
    while (i < r.size() && IsAsciiDigit(static_cast<unsigned char>(r[i]))) {
      const size_t next = ref * 10 + static_cast<size_t>(r[i] - '0');
      if (next > group_count) break;
      ref = next;
      ++i;
    }
    push_group(static_cast<int>(ref));
  }
  if (!literal.empty()) parts.push_back({std::move(literal), -1});
  return parts;
}

Result<TopicRegex> TopicRegex::Compile(const std::string& pattern, const std::string& replacement,
                                       const std::string& pattern_key,
                                       const std::string& replacement_key) {
  const std::string& rkey = replacement_key.empty() ? pattern_key : replacement_key;
  Utf32Text decoded = DecodeUtf8(pattern);
  if (!decoded.valid) {
    return Status::Config("'" + pattern_key + "': the pattern is not valid UTF-8");
  }
  PatternTranslator translator(std::move(decoded.text), pattern, pattern_key);
  WALRELAY_RETURN_IF_ERROR(translator.Run());

  std::wregex regex;
  // Imbued before assign() (imbue resets the pattern): the classic locale keeps \w \d \s and
  // case folding ASCII-only, as in Java, whatever global locale the process sets.
  regex.imbue(std::locale::classic());
  auto flags = std::regex::ECMAScript;
  if (translator.icase()) flags |= std::regex::icase;
  try {
    regex.assign(translator.translated(), flags);
  } catch (const std::regex_error& e) {
    return Status::Config("'" + pattern_key + "': invalid regular expression '" + pattern +
                          "': " + e.what());
  }
  if (regex.mark_count() != translator.group_count()) {
    return Status::Internal("'" + pattern_key + "': group count mismatch translating '" + pattern +
                            "'");
  }

  auto parts = ParseReplacement(replacement, translator.group_count(), translator.names(), rkey);
  if (!parts.ok()) return parts.status();
  return TopicRegex(std::move(regex), std::move(parts).value(), translator.group_count());
}

std::optional<std::string> TopicRegex::Apply(std::string_view input) const {
  const Utf32Text decoded = DecodeUtf8(input);
  try {
    if (!std::regex_match(decoded.text, regex_)) return std::nullopt;
    // RegexRouter calls matches() and then replaceFirst(), which searches again from the
    // start; the first find is what gets replaced (for ordinary patterns: the whole input).
    std::wsmatch m;
    if (!std::regex_search(decoded.text, m, regex_)) return std::nullopt;
    auto bytes = [&](size_t from_cp, size_t to_cp) {
      return input.substr(decoded.offsets[from_cp],
                          decoded.offsets[to_cp] - decoded.offsets[from_cp]);
    };
    const auto begin = static_cast<size_t>(m.position(0));
    const auto end = begin + static_cast<size_t>(m.length(0));
    std::string out(bytes(0, begin));
    for (const Part& part : replacement_) {
      if (part.group < 0) {
        out += part.literal;
        continue;
      }
      const auto& g = m[static_cast<size_t>(part.group)];
      if (!g.matched) continue;  // Java appends nothing for a group that did not take part
      const auto gb = static_cast<size_t>(g.first - decoded.text.begin());
      const auto ge = static_cast<size_t>(g.second - decoded.text.begin());
      out.append(bytes(gb, ge));
    }
    out.append(bytes(end, decoded.text.size()));
    return out;
  } catch (const std::regex_error& e) {
    spdlog::warn("topic regex could not be evaluated on '{}': {}", input, e.what());
    return std::nullopt;
  }
}

}  // namespace walrelay
