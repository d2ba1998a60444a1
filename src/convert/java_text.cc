#include "convert/java_text.h"

#include <rapidjson/document.h>
#include <rapidjson/reader.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace walrelay {
namespace {

constexpr char kUpperHex[] = "0123456789ABCDEF";

void AppendUnicodeEscape(std::string& out, uint32_t unit) {
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kUpperHex[(unit >> shift) & 0xF];
}

// Decodes the 4-byte UTF-8 sequence at `s[i]` (lead byte 0xF0..0xF4) into its surrogate pair.
void AppendSurrogates(std::string& out, std::string_view s, size_t i) {
  const auto b = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]));
  };
  const uint32_t cp =
      ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  AppendUnicodeEscape(out, 0xD800 + ((cp - 0x10000) >> 10));
  AppendUnicodeEscape(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
}

bool IsFourByteLead(unsigned char c) { return c >= 0xF0 && c <= 0xF4; }

// Java's rendering of the shortest digits that identify the value: "d.ddd" for 1e-3 <= |v| <
// 1e7, "d.dddE[-]n" otherwise, always at least one digit after the point.
template <typename Float>
std::optional<std::string> JavaFloatingText(std::string_view text) {
  if (text == "NaN") return std::string("NaN");
  if (text == "Infinity") return std::string("Infinity");
  if (text == "-Infinity") return std::string("-Infinity");
  const std::string copy(text);
  char* end = nullptr;
  const double parsed = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size()) return std::nullopt;
  const Float v = static_cast<Float>(parsed);
  if (std::isinf(v)) return std::string(v < 0 ? "-Infinity" : "Infinity");
  if (v == 0) return std::string(std::signbit(v) ? "-0.0" : "0.0");
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  if (ec != std::errc()) return std::nullopt;
  const std::string sci(buf, p);  // e.g. "-1.2345e+07"
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  const double magnitude = std::fabs(static_cast<double>(v));
  if (magnitude >= 1e-3 && magnitude < 1e7) {
    std::string out;
    if (exponent >= 0) {
      const size_t int_digits = static_cast<size_t>(exponent) + 1;
      while (digits.size() < int_digits) digits += '0';
      out = digits.substr(0, int_digits) + "." +
            (digits.size() > int_digits ? digits.substr(int_digits) : "0");
    } else {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    return sign + out;
  }
  return sign + digits.substr(0, 1) + "." + (digits.size() > 1 ? digits.substr(1) : "0") + "E" +
         std::to_string(exponent);
}

// SAX handler writing a JSON value as Kafka Connect's Values.convertToString or Java's
// toString of Struct/List/Map would.
class JavaTextWriter {
 public:
  enum class Style { kValues, kToString };
  JavaTextWriter(Style style, bool top_map) : style_(style), top_map_(top_map) {}

  std::string& out() { return out_; }

  bool Null() { return Scalar("null", true); }
  bool Bool(bool b) { return Scalar(b ? "true" : "false", false); }
  bool Int(int i) { return Scalar(std::to_string(i), false); }
  bool Uint(unsigned u) { return Scalar(std::to_string(u), false); }
  bool Int64(int64_t i) { return Scalar(std::to_string(i), false); }
  bool Uint64(uint64_t u) { return Scalar(std::to_string(u), false); }
  bool Double(double d) { return Scalar(std::to_string(d), false); }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) {
    return Scalar(std::string(s, n), false);
  }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    const std::string_view v(s, n);
    return Scalar(style_ == Style::kValues ? Quoted(v) : std::string(v), false);
  }
  bool StartObject() {
    BeginValue();
    const bool map = stack_.empty() && top_map_;
    stack_.push_back(Frame{map ? Frame::kMap : Frame::kStruct, true, "", false});
    out_ += style_ == Style::kValues ? "{" : (map ? "{" : "Struct{");
    return true;
  }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    Frame& f = stack_.back();
    f.pending_key = std::string(s, n);
    f.has_key = true;
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    stack_.pop_back();
    out_ += "}";
    return true;
  }
  bool StartArray() {
    BeginValue();
    stack_.push_back(Frame{Frame::kList, true, "", false});
    out_ += "[";
    return true;
  }
  bool EndArray(rapidjson::SizeType) {
    stack_.pop_back();
    out_ += "]";
    return true;
  }

 private:
  struct Frame {
    enum Kind { kStruct, kMap, kList } kind;
    bool first;
    std::string pending_key;
    bool has_key;
  };

  static std::string Quoted(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '\\' || c == '"') out += '\\';
      out += c;
    }
    return out + "\"";
  }

  std::string Separator(const Frame& f) const {
    if (f.first) return "";
    // List.toString and AbstractMap.toString separate with ", "; Struct.toString and
    // Values with ",".
    return style_ == Style::kToString && f.kind != Frame::kStruct ? ", " : ",";
  }

  // Writes the separator and member name before a value inside an object or a list.
  void BeginValue() {
    if (stack_.empty()) return;
    Frame& f = stack_.back();
    out_ += Separator(f);
    f.first = false;
    if (f.has_key) {
      out_ += style_ == Style::kValues ? Quoted(f.pending_key) + ":" : f.pending_key + "=";
      f.has_key = false;
    }
  }

  bool Scalar(const std::string& text, bool is_null) {
    // Struct.toString leaves out fields whose value is null.
    if (is_null && style_ == Style::kToString && !stack_.empty() &&
        stack_.back().kind == Frame::kStruct) {
      stack_.back().has_key = false;
      return true;
    }
    BeginValue();
    out_ += text;
    return true;
  }

  Style style_;
  bool top_map_;
  std::vector<Frame> stack_;
  std::string out_;
};

Result<std::string> Rewrite(std::string_view json, JavaTextWriter::Style style, bool map) {
  JavaTextWriter writer(style, map);
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(json.data(), json.size());
  constexpr unsigned kFlags =
      rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseIterativeFlag;
  const rapidjson::ParseResult ok = reader.Parse<kFlags>(stream, writer);
  if (!ok) return Status::Internal("a structured value is not valid JSON");
  return std::move(writer.out());
}

}  // namespace

std::string JacksonStringLiteral(std::string_view utf8) {
  std::string out = "\"";
  out.reserve(utf8.size() + 2);
  for (size_t i = 0; i < utf8.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(utf8[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\t': out += "\\t"; continue;
      case '\n': out += "\\n"; continue;
      case '\f': out += "\\f"; continue;
      case '\r': out += "\\r"; continue;
      default: break;
    }
    if (c < 0x20) {
      AppendUnicodeEscape(out, c);
    } else if (IsFourByteLead(c) && i + 3 < utf8.size()) {
      AppendSurrogates(out, utf8, i);
      i += 3;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string EscapeOutsideBmp(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    if (IsFourByteLead(static_cast<unsigned char>(json[i])) && i + 3 < json.size()) {
      AppendSurrogates(out, json, i);
      i += 3;
    } else {
      out += json[i];
    }
  }
  return out;
}

std::optional<std::string> JavaDoubleText(std::string_view text) {
  return JavaFloatingText<double>(text);
}
std::optional<std::string> JavaFloatText(std::string_view text) {
  return JavaFloatingText<float>(text);
}

std::optional<std::string> JacksonDoubleJson(std::string_view text, bool single_precision) {
  auto java = single_precision ? JavaFloatText(text) : JavaDoubleText(text);
  if (!java) return std::nullopt;
  // Jackson quotes the non-numeric values (JsonWriteFeature.WRITE_NAN_AS_STRINGS).
  if (*java == "NaN" || *java == "Infinity" || *java == "-Infinity") return "\"" + *java + "\"";
  return java;
}

std::string JavaDecimalText(std::string_view unscaled, int32_t scale) {
  // Two's complement to sign and magnitude, then the magnitude to decimal digits by repeated
  // division (the values are small: a numeric column's bytes).
  std::vector<uint8_t> magnitude(unscaled.begin(), unscaled.end());
  const bool negative = !magnitude.empty() && (magnitude[0] & 0x80);
  if (negative) {
    for (auto& b : magnitude) b = static_cast<uint8_t>(~b);
    for (size_t i = magnitude.size(); i-- > 0;)
      if (++magnitude[i] != 0) break;
  }
  std::string digits;
  while (true) {
    bool zero = true;
    uint32_t rest = 0;
    for (auto& b : magnitude) {
      const uint32_t cur = (rest << 8) | b;
      b = static_cast<uint8_t>(cur / 10);
      rest = cur % 10;
      if (b != 0) zero = false;
    }
    digits.insert(digits.begin(), static_cast<char>('0' + rest));
    if (zero) break;
  }
  const std::string sign = negative ? "-" : "";
  const int64_t adjusted = -static_cast<int64_t>(scale) + static_cast<int64_t>(digits.size()) - 1;
  if (scale >= 0 && adjusted >= -6) {
    if (scale == 0) return sign + digits;
    const size_t s = static_cast<size_t>(scale);
    if (digits.size() > s)
      return sign + digits.substr(0, digits.size() - s) + "." + digits.substr(digits.size() - s);
    return sign + "0." + std::string(s - digits.size(), '0') + digits;
  }
  std::string out = sign + digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += "E";
  if (adjusted >= 0) out += "+";
  return out + std::to_string(adjusted);
}

std::optional<std::string> JavaDateText(std::string_view logical_name, std::string_view text,
                                        bool to_string) {
  int64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  constexpr int64_t kDayMs = 86'400'000;
  int64_t ms = n;
  if (logical_name == "org.apache.kafka.connect.data.Date") ms = n * kDayMs;
  int64_t days = ms / kDayMs;
  int64_t in_day = ms % kDayMs;
  if (in_day < 0) {
    in_day += kDayMs;
    --days;
  }
  // Civil date from days since 1970-01-01 (proleptic Gregorian).
  const int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t day = doy - (153 * mp + 2) / 5 + 1;
  const int64_t month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2 ? 1 : 0);
  const int hh = static_cast<int>(in_day / 3'600'000), mi = static_cast<int>(in_day / 60'000 % 60),
            ss = static_cast<int>(in_day / 1000 % 60), mss = static_cast<int>(in_day % 1000);
  char buf[80];
  if (to_string) {
    static constexpr const char* kDays[] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
    static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                              "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const int64_t weekday = ((days % 7) + 7) % 7;  // 1970-01-01 was a Thursday
    std::snprintf(buf, sizeof buf, "%s %s %02d %02d:%02d:%02d UTC %lld", kDays[weekday],
                  kMonths[month - 1], static_cast<int>(day), hh, mi, ss,
                  static_cast<long long>(year));
    return std::string(buf);
  }
  if (ms >= 0 && ms < kDayMs) {
    std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03dZ", hh, mi, ss, mss);
  } else if (in_day == 0) {
    std::snprintf(buf, sizeof buf, "%04lld-%02d-%02d", static_cast<long long>(year),
                  static_cast<int>(month), static_cast<int>(day));
  } else {
    std::snprintf(buf, sizeof buf, "%04lld-%02d-%02dT%02d:%02d:%02d.%03dZ",
                  static_cast<long long>(year), static_cast<int>(month), static_cast<int>(day), hh,
                  mi, ss, mss);
  }
  return std::string(buf);
}

std::optional<int32_t> DecimalScale(std::string_view schema_json) {
  rapidjson::Document d;
  d.Parse(schema_json.data(), schema_json.size());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("parameters") ||
      !d["parameters"].IsObject())
    return std::nullopt;
  const auto& params = d["parameters"];
  if (!params.HasMember("scale") || !params["scale"].IsString()) return std::nullopt;
  int32_t scale = 0;
  const std::string_view s(params["scale"].GetString(), params["scale"].GetStringLength());
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), scale);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return scale;
}

std::string SchemaName(std::string_view schema_json) {
  if (schema_json.empty()) return "";
  rapidjson::Document d;
  d.Parse(schema_json.data(), schema_json.size());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("name") || !d["name"].IsString())
    return "";
  return std::string(d["name"].GetString(), d["name"].GetStringLength());
}

Result<std::string> ConnectValuesText(std::string_view json) {
  return Rewrite(json, JavaTextWriter::Style::kValues, false);
}

Result<std::string> JavaObjectText(std::string_view json, bool map) {
  return Rewrite(json, JavaTextWriter::Style::kToString, map);
}

}  // namespace walrelay
