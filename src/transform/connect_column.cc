#include "transform/connect_column.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace walrelay {
namespace {

// The column types Debezium's PostgresValueConverter maps, as format_type names them.
enum class PgKind {
  kString,
  kUuid,
  kJson,
  kInt16,
  kInt32,
  kInt64,
  kFloat32,
  kFloat64,
  kBoolean,
  kNumeric,
  kBytea,
  kDate,
  kTime,
  kTimestamp,
  kTimestampTz,
  kTimeTz,
  kInterval,
};

struct PgType {
  PgKind kind = PgKind::kString;
  int precision = -1;  // numeric(p, s)'s p; a temporal type's fractional digits; -1 = none given
  int scale = -1;      // numeric(p, s)'s s; -1 = unconstrained numeric
  bool array = false;  // a one-dimensional array of the kind
};

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// "(3)" right after `name` in "timestamp(3) without time zone"; -1 without one.
int ParenNumber(std::string_view type, size_t at) {
  if (at >= type.size() || type[at] != '(') return -1;
  return std::atoi(std::string(type.substr(at + 1)).c_str());
}

PgType ParseType(std::string_view type) {
  PgType t;
  if (type.size() > 2 && type.substr(type.size() - 2) == "[]") {
    t.array = true;
    type.remove_suffix(2);
  }
  if (type == "smallint") {
    t.kind = PgKind::kInt16;
  } else if (type == "integer") {
    t.kind = PgKind::kInt32;
  } else if (type == "bigint" || type == "oid") {
    t.kind = PgKind::kInt64;
  } else if (type == "real") {
    t.kind = PgKind::kFloat32;
  } else if (type == "double precision") {
    t.kind = PgKind::kFloat64;
  } else if (type == "boolean") {
    t.kind = PgKind::kBoolean;
  } else if (type == "uuid") {
    t.kind = PgKind::kUuid;
  } else if (type == "json" || type == "jsonb") {
    t.kind = PgKind::kJson;
  } else if (type == "bytea") {
    t.kind = PgKind::kBytea;
  } else if (type == "date") {
    t.kind = PgKind::kDate;
  } else if (StartsWith(type, "numeric")) {
    t.kind = PgKind::kNumeric;
    if (type.size() > 7 && type[7] == '(') {
      t.precision = ParenNumber(type, 7);
      const size_t comma = type.find(',');
      t.scale = comma == std::string_view::npos
                    ? 0
                    : std::atoi(std::string(type.substr(comma + 1)).c_str());
    }
  } else if (StartsWith(type, "timestamp")) {
    t.precision = ParenNumber(type, 9);
    t.kind = type.find("with time zone") != std::string_view::npos &&
                     type.find("without") == std::string_view::npos
                 ? PgKind::kTimestampTz
                 : PgKind::kTimestamp;
  } else if (StartsWith(type, "time")) {
    t.precision = ParenNumber(type, 4);
    t.kind = type.find("with time zone") != std::string_view::npos &&
                     type.find("without") == std::string_view::npos
                 ? PgKind::kTimeTz
                 : PgKind::kTime;
  } else if (StartsWith(type, "interval")) {
    t.kind = PgKind::kInterval;
  }
  return t;
}

bool Native(const ColumnModes& m) {
  return m.decimal == DecimalMode::kNative && m.time == TimeMode::kNative &&
         m.binary == BinaryMode::kNative;
}

// Whether a column of `kind` renders as walrelay always has under `modes`: each kind follows
// the mode that governs it in Debezium (real/double follow decimal.handling.mode, the numbers
// key); kinds no mode governs (text, integers, boolean, uuid, json) render the same either way.
bool KindNative(PgKind kind, const ColumnModes& m) {
  switch (kind) {
    case PgKind::kNumeric:
    case PgKind::kFloat32:
    case PgKind::kFloat64: return m.decimal == DecimalMode::kNative;
    case PgKind::kBytea: return m.binary == BinaryMode::kNative;
    case PgKind::kDate:
    case PgKind::kTime:
    case PgKind::kTimestamp:
    case PgKind::kTimestampTz:
    case PgKind::kTimeTz:
    case PgKind::kInterval: return m.time == TimeMode::kNative;
    default: return true;
  }
}

// ---- Connect schemas ---------------------------------------------------------------------

struct SchemaParts {
  SchemaParts(const char* type_, const char* name_ = nullptr, std::string parameters_ = {},
              std::string fields_ = {}, const char* doc_ = nullptr)
      : type(type_),
        name(name_),
        parameters(std::move(parameters_)),
        fields(std::move(fields_)),
        doc(doc_) {}
  const char* type;
  const char* name;
  std::string parameters;  // the members of "parameters", already JSON
  std::string fields;      // a struct's "fields" array, already JSON
  const char* doc;
};

constexpr int kDefaultTimePrecision = 6;

int TimePrecision(const PgType& t) { return t.precision < 0 ? kDefaultTimePrecision : t.precision; }

SchemaParts ScalarSchema(const PgType& t, const ColumnModes& m) {
  const bool native = KindNative(t.kind, m);
  switch (t.kind) {
    case PgKind::kString: return {"string"};
    case PgKind::kUuid: return {"string", "io.debezium.data.Uuid"};
    case PgKind::kJson: return {"string", "io.debezium.data.Json"};
    case PgKind::kInt16: return {"int16"};
    case PgKind::kInt32: return {"int32"};
    case PgKind::kInt64: return {"int64"};
    case PgKind::kFloat32: return {"float"};
    case PgKind::kFloat64: return {"double"};
    case PgKind::kBoolean: return {"boolean"};
    case PgKind::kNumeric:
      switch (m.decimal) {
        case DecimalMode::kNative:
        case DecimalMode::kDouble: return {"double"};
        case DecimalMode::kString: return {"string"};
        case DecimalMode::kPrecise:
          if (t.scale < 0) {
            return {"struct", "io.debezium.data.VariableScaleDecimal", "",
                    R"([{"type":"int32","optional":false,"field":"scale"},)"
                    R"({"type":"bytes","optional":false,"field":"value"}])",
                    "Variable scaled decimal"};
          }
          return {"bytes", "org.apache.kafka.connect.data.Decimal",
                  "\"scale\":\"" + std::to_string(t.scale) + "\",\"connect.decimal.precision\":\"" +
                      std::to_string(t.precision) + "\""};
      }
      break;
    case PgKind::kBytea:
      return {m.binary == BinaryMode::kNative || m.binary == BinaryMode::kBytes ? "bytes"
                                                                                : "string"};
    case PgKind::kDate:
      if (native) return {"string"};
      if (m.time == TimeMode::kConnect) return {"int32", "org.apache.kafka.connect.data.Date"};
      if (m.time == TimeMode::kIsoString) return {"string", "io.debezium.time.IsoDate"};
      return {"int32", "io.debezium.time.Date"};
    case PgKind::kTime: {
      if (native) return {"string"};
      const int p = TimePrecision(t);
      if (m.time == TimeMode::kConnect) return {"int32", "org.apache.kafka.connect.data.Time"};
      if (m.time == TimeMode::kIsoString) return {"string", "io.debezium.time.IsoTime"};
      if (m.time == TimeMode::kAdaptiveTimeMicroseconds || (p > 3 && p <= 6))
        return {"int64", "io.debezium.time.MicroTime"};
      if (p <= 3) return {"int32", "io.debezium.time.Time"};
      return {"int64", "io.debezium.time.NanoTime"};
    }
    case PgKind::kTimestamp: {
      if (native) return {"string"};
      const int p = TimePrecision(t);
      if (m.time == TimeMode::kConnect) return {"int64", "org.apache.kafka.connect.data.Timestamp"};
      if (m.time == TimeMode::kIsoString) return {"string", "io.debezium.time.IsoTimestamp"};
      if (p <= 3) return {"int64", "io.debezium.time.Timestamp"};
      if (p <= 6) return {"int64", "io.debezium.time.MicroTimestamp"};
      return {"int64", "io.debezium.time.NanoTimestamp"};
    }
    case PgKind::kTimestampTz:
      if (native) return {"string"};
      return {"string", "io.debezium.time.ZonedTimestamp"};
    case PgKind::kTimeTz:
      if (native) return {"string"};
      return {"string", "io.debezium.time.ZonedTime"};
    case PgKind::kInterval:
      if (native) return {"string"};
      return {"int64", "io.debezium.time.MicroDuration"};
  }
  return {"string"};
}

// JsonConverter's member order: type, fields/items, optional, name, version, doc, parameters.
std::string SchemaJson(const SchemaParts& p, bool optional) {
  std::string out = std::string("{\"type\":\"") + p.type + "\"";
  if (!p.fields.empty()) out += ",\"fields\":" + p.fields;
  out += optional ? ",\"optional\":true" : ",\"optional\":false";
  if (p.name != nullptr) out += std::string(",\"name\":\"") + p.name + "\",\"version\":1";
  if (p.doc != nullptr) out += std::string(",\"doc\":\"") + p.doc + "\"";
  if (!p.parameters.empty()) out += ",\"parameters\":{" + p.parameters + "}";
  out += "}";
  return out;
}

// ---- Values ------------------------------------------------------------------------------

// Java's Double.toString / Float.toString for a finite value: the shortest digits that read
// back as the same value, plain between 10^-3 and 10^7, else d.dddE<n>.
template <typename F>
std::string JavaFloatText(F value) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  int exponent = std::atoi(std::string(sci.substr(e + 1)).c_str());
  if (digits == "0") return out + "0.0";
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= 1e-3 && magnitude < 1e7) {
    if (exponent >= 0) {
      while (static_cast<int>(digits.size()) <= exponent) digits += '0';
      out += digits.substr(0, exponent + 1) + ".";
      const std::string frac = digits.substr(exponent + 1);
      out += frac.empty() ? "0" : frac;
    } else {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1) + "." + (digits.size() > 1 ? digits.substr(1) : "0");
  out += "E" + std::to_string(exponent);
  return out;
}

// What PostgreSQL prints for a special float or numeric value, as Java spells it.
std::optional<std::string> SpecialNumber(std::string_view text) {
  if (text == "NaN") return "NaN";
  if (text == "Infinity") return "Infinity";
  if (text == "-Infinity") return "-Infinity";
  return std::nullopt;
}

// A decimal number's digits without sign or point, its scale and sign.
struct DecimalDigits {
  bool negative = false;
  std::string digits;  // at least one digit
  int scale = 0;
};

std::optional<DecimalDigits> ParseDecimal(std::string_view text) {
  DecimalDigits d;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) {
    d.negative = text[0] == '-';
    text.remove_prefix(1);
  }
  bool point = false;
  for (char c : text) {
    if (c == '.' && !point) {
      point = true;
    } else if (c >= '0' && c <= '9') {
      d.digits += c;
      if (point) ++d.scale;
    } else {
      return std::nullopt;
    }
  }
  if (d.digits.empty()) return std::nullopt;
  return d;
}

// BigInteger.toByteArray() of the decimal digits' value with `negative`'s sign: big-endian
// two's complement in the fewest bytes that hold the sign bit.
std::string TwosComplement(const std::string& decimal_digits, bool negative) {
  std::vector<uint8_t> magnitude;  // little-endian base 256
  for (char c : decimal_digits) {
    int carry = c - '0';
    for (auto& byte : magnitude) {
      const int v = byte * 10 + carry;
      byte = static_cast<uint8_t>(v & 0xff);
      carry = v >> 8;
    }
    while (carry > 0) {
      magnitude.push_back(static_cast<uint8_t>(carry & 0xff));
      carry >>= 8;
    }
  }
  while (!magnitude.empty() && magnitude.back() == 0) magnitude.pop_back();
  if (magnitude.empty()) return std::string(1, '\0');
  magnitude.push_back(0);  // room for the sign bit
  if (negative) {
    int carry = 1;
    for (auto& byte : magnitude) {
      const int v = static_cast<uint8_t>(~byte) + carry;
      byte = static_cast<uint8_t>(v & 0xff);
      carry = v >> 8;
    }
  }
  const uint8_t fill = negative ? 0xff : 0x00;
  while (magnitude.size() > 1 && magnitude.back() == fill &&
         ((magnitude[magnitude.size() - 2] & 0x80) != 0) == negative)
    magnitude.pop_back();
  return std::string(magnitude.rbegin(), magnitude.rend());
}

// Howard Hinnant's days_from_civil: days since 1970-01-01 in the proleptic Gregorian calendar.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

struct CivilDate {
  int64_t year;
  unsigned month, day;
};

CivilDate CivilFromDays(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return {static_cast<int64_t>(yoe) + era * 400 + (m <= 2), m, d};
}

// PostgreSQL's `infinity` date and timestamps, as Debezium maps them: the date becomes the
// LocalDate PostgreSQL's JDBC driver uses for it.
constexpr int64_t kInfinityDays = -2147472692;       // -5877611-06-21
constexpr int64_t kMinusInfinityDays = -2147472691;  // -5877611-06-22

class TextReader {
 public:
  explicit TextReader(std::string_view s) : s_(s) {}
  bool Digits(int min, int max, int64_t* out) {
    int n = 0;
    int64_t v = 0;
    while (pos_ < s_.size() && n < max && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      ++n;
    }
    *out = v;
    return n >= min;
  }
  bool Char(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  // ".ffffff" as nanoseconds, 0 without a fraction.
  bool Fraction(int64_t* nanos) {
    *nanos = 0;
    if (!Char('.')) return true;
    int n = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      if (n < 9) *nanos = *nanos * 10 + (s_[pos_] - '0');
      ++pos_;
      ++n;
    }
    for (int i = n; i < 9; ++i) *nanos *= 10;
    return n > 0;
  }
  std::string_view Rest() const { return s_.substr(pos_); }
  bool Done() const { return pos_ == s_.size(); }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

// "2024-02-29" (optionally followed by more, and " BC" at the very end) as days since epoch.
bool ReadDate(TextReader& r, bool bc, int64_t* days) {
  int64_t y, mo, d;
  if (!r.Digits(4, 9, &y) || !r.Char('-') || !r.Digits(2, 2, &mo) || !r.Char('-') ||
      !r.Digits(2, 2, &d))
    return false;
  if (bc) y = 1 - y;
  *days = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  return true;
}

// "12:34:56.789" as nanoseconds since midnight.
bool ReadTime(TextReader& r, int64_t* nanos) {
  int64_t h, mi, s, f;
  if (!r.Digits(2, 2, &h) || !r.Char(':') || !r.Digits(2, 2, &mi) || !r.Char(':') ||
      !r.Digits(2, 2, &s) || !r.Fraction(&f))
    return false;
  *nanos = ((h * 60 + mi) * 60 + s) * 1'000'000'000 + f;
  return true;
}

// "+02", "-07:30", "+05:30:15" as seconds east of UTC.
bool ReadOffset(TextReader& r, int64_t* seconds) {
  const bool minus = r.Char('-');
  if (!minus && !r.Char('+')) return false;
  int64_t h, m = 0, s = 0;
  if (!r.Digits(2, 2, &h)) return false;
  if (r.Char(':') && !r.Digits(2, 2, &m)) return false;
  if (r.Char(':') && !r.Digits(2, 2, &s)) return false;
  *seconds = (minus ? -1 : 1) * (h * 3600 + m * 60 + s);
  return true;
}

bool StripBc(std::string_view* text) {
  constexpr std::string_view kBc = " BC";
  if (text->size() > kBc.size() && text->substr(text->size() - kBc.size()) == kBc) {
    text->remove_suffix(kBc.size());
    return true;
  }
  return false;
}

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

std::string Pad(int64_t v, int width) {
  std::string s = std::to_string(v);
  return std::string(width > static_cast<int>(s.size()) ? width - s.size() : 0, '0') + s;
}

// Java's LocalDate.toString: years beyond four digits carry a sign.
std::string IsoDate(int64_t days) {
  const CivilDate c = CivilFromDays(days);
  std::string year;
  if (c.year < 0) {
    year = "-" + Pad(-c.year, 4);
  } else {
    year = c.year > 9999 ? "+" + std::to_string(c.year) : Pad(c.year, 4);
  }
  return year + "-" + Pad(c.month, 2) + "-" + Pad(c.day, 2);
}

// HH:mm:ss with the fraction ISO_LOCAL_TIME prints: as few digits as the value needs, or
// exactly `fraction_digits` when that is not negative.
std::string IsoTime(int64_t nanos_of_day, int fraction_digits) {
  const int64_t secs = nanos_of_day / 1'000'000'000;
  const int64_t frac = nanos_of_day % 1'000'000'000;
  std::string out = Pad(secs / 3600, 2) + ":" + Pad(secs / 60 % 60, 2) + ":" + Pad(secs % 60, 2);
  std::string digits = Pad(frac, 9);
  if (fraction_digits >= 0) {
    if (fraction_digits > 0) out += "." + digits.substr(0, fraction_digits);
    return out;
  }
  if (frac == 0) return out;
  while (digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

constexpr int64_t kNanosPerDay = 86'400'000'000'000;

// A value as Kafka Connect data, before it is written as JSON or as bytes.
struct Datum {
  enum class Kind { kNull, kString, kInteger, kFloat, kBoolean, kBytes, kVariableScale, kRawJson };
  Datum() = default;
  Datum(Kind kind_, std::string text_ = {}, int64_t integer_ = 0)
      : kind(kind_), text(std::move(text_)), integer(integer_) {}
  Kind kind = Kind::kNull;
  std::string text;     // kString, kBytes (raw), kFloat (Java's text), kRawJson
  int64_t integer = 0;  // kInteger; kVariableScale's scale
  bool boolean = false;
};

Datum StringDatum(std::string s) { return Datum(Datum::Kind::kString, std::move(s)); }
Datum IntDatum(int64_t v) { return Datum(Datum::Kind::kInteger, "", v); }

Result<Datum> Fail(const Column& column, std::string_view what) {
  return Status::Transform("column '" + column.name + "' of type " + column.type + " holds '" +
                           column.text.substr(0, 64) + "', which is not " + std::string(what));
}

Result<Datum> NumericDatum(const Column& column, const PgType& t, const ColumnModes& m) {
  const std::optional<std::string> special = SpecialNumber(column.text);
  switch (m.decimal) {
    case DecimalMode::kString:
      if (special) {
        return StringDatum(*special == "NaN"        ? "NAN"
                           : *special == "Infinity" ? "POSITIVE_INFINITY"
                                                    : "NEGATIVE_INFINITY");
      }
      return StringDatum(column.text);
    case DecimalMode::kDouble: {
      if (special) return Datum{Datum::Kind::kFloat, *special};
      double v = 0;
      const auto res =
          std::from_chars(column.text.data(), column.text.data() + column.text.size(), v);
      if (res.ec != std::errc() || res.ptr != column.text.data() + column.text.size())
        return Fail(column, "a number");
      return Datum{Datum::Kind::kFloat, JavaFloatText(v)};
    }
    case DecimalMode::kPrecise:
    case DecimalMode::kNative: break;
  }
  // Debezium cannot hold NaN or Infinity in a Decimal: it logs an error and writes null.
  if (special) return Datum{};
  std::optional<DecimalDigits> d = ParseDecimal(column.text);
  if (!d) return Fail(column, "a number");
  if (t.scale >= 0) {
    // PostgreSQL prints a constrained numeric with exactly its scale; pad in case.
    while (d->scale < t.scale) {
      d->digits += '0';
      ++d->scale;
    }
    return Datum{Datum::Kind::kBytes, TwosComplement(d->digits, d->negative)};
  }
  // An unconstrained numeric goes without the trailing zeros of its fraction.
  while (d->scale > 0 && d->digits.size() > 1 && d->digits.back() == '0') {
    d->digits.pop_back();
    --d->scale;
  }
  return Datum{Datum::Kind::kVariableScale, TwosComplement(d->digits, d->negative), d->scale};
}

Result<Datum> TemporalDatum(const Column& column, const PgType& t, const ColumnModes& m) {
  std::string_view text = column.text;
  const bool bc = StripBc(&text);
  TextReader r(text);
  switch (t.kind) {
    case PgKind::kDate: {
      int64_t days;
      if (text == "infinity") {
        days = kInfinityDays;
      } else if (text == "-infinity") {
        days = kMinusInfinityDays;
      } else if (!ReadDate(r, bc, &days) || !r.Done()) {
        return Fail(column, "a date");
      }
      if (m.time == TimeMode::kIsoString) return StringDatum(IsoDate(days) + "Z");
      return IntDatum(days);
    }
    case PgKind::kTime: {
      int64_t nanos;
      if (!ReadTime(r, &nanos) || !r.Done()) return Fail(column, "a time");
      const int p = TimePrecision(t);
      // 24:00:00 has no ISO-8601 local time: Debezium's LocalTime makes it midnight.
      if (m.time == TimeMode::kIsoString)
        return StringDatum(IsoTime(nanos % kNanosPerDay, -1) + "Z");
      if (m.time == TimeMode::kConnect) return IntDatum(nanos / 1'000'000);
      if (m.time == TimeMode::kAdaptiveTimeMicroseconds || (p > 3 && p <= 6))
        return IntDatum(nanos / 1000);
      if (p <= 3) return IntDatum(nanos / 1'000'000);
      return IntDatum(nanos);
    }
    case PgKind::kTimestamp:
    case PgKind::kTimestampTz: {
      if (t.kind == PgKind::kTimestampTz && (text == "infinity" || text == "-infinity"))
        return StringDatum(std::string(text));
      int64_t days, nanos, offset = 0;
      if (!ReadDate(r, false, &days) || !r.Char(' ') || !ReadTime(r, &nanos))
        return Fail(column, "a timestamp");
      if (t.kind == PgKind::kTimestampTz && !ReadOffset(r, &offset))
        return Fail(column, "a timestamp with a time zone");
      if (!r.Done()) return Fail(column, "a timestamp");
      if (bc) {
        const CivilDate c = CivilFromDays(days);
        days = DaysFromCivil(1 - c.year, c.month, c.day);
      }
      // Nanoseconds since the epoch overflow beyond 2262; keep days and time apart.
      int64_t utc_nanos_of_day = nanos - offset * 1'000'000'000;
      days += FloorDiv(utc_nanos_of_day, kNanosPerDay);
      utc_nanos_of_day -= FloorDiv(utc_nanos_of_day, kNanosPerDay) * kNanosPerDay;
      if (t.kind == PgKind::kTimestampTz) {
        return StringDatum(IsoDate(days) + "T" + IsoTime(utc_nanos_of_day, TimePrecision(t)) + "Z");
      }
      if (m.time == TimeMode::kIsoString)
        return StringDatum(IsoDate(days) + "T" + IsoTime(utc_nanos_of_day, -1) + "Z");
      const int p = TimePrecision(t);
      const int64_t micros = days * 86'400'000'000 + utc_nanos_of_day / 1000;
      if (m.time == TimeMode::kConnect || p <= 3) return IntDatum(FloorDiv(micros, 1000));
      if (p <= 6) return IntDatum(micros);
      return IntDatum(days * kNanosPerDay + utc_nanos_of_day);
    }
    case PgKind::kTimeTz: {
      int64_t nanos, offset;
      if (!ReadTime(r, &nanos) || !ReadOffset(r, &offset) || !r.Done())
        return Fail(column, "a time with a time zone");
      int64_t utc = nanos - offset * 1'000'000'000;
      utc -= FloorDiv(utc, kNanosPerDay) * kNanosPerDay;
      return StringDatum(IsoTime(utc, -1) + "Z");
    }
    case PgKind::kInterval: {
      // IntervalStyle postgres: "1 year 2 mons -3 days 04:05:06.789". Debezium counts a month
      // as 30.4375 days (365.25 / 12).
      constexpr int64_t kMicrosPerMonth = 2'629'800'000'000;
      constexpr int64_t kMicrosPerDay = 86'400'000'000;
      // Summed wide, then saturated: Debezium sums in a double and Java's cast to long stops at
      // Long.MAX_VALUE and Long.MIN_VALUE (PostgreSQL's intervals reach about 2^71 us).
      __int128 micros = 0;
      std::string_view rest = text;
      while (!rest.empty()) {
        while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
        if (rest.empty()) break;
        const size_t space = rest.find(' ');
        const std::string_view token = rest.substr(0, space);
        rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
        if (token.find(':') != std::string_view::npos) {
          std::string_view clock = token;
          const bool minus = !clock.empty() && clock[0] == '-';
          if (minus || (!clock.empty() && clock[0] == '+')) clock.remove_prefix(1);
          TextReader cr(clock);
          int64_t h, mi, s, f;
          if (!cr.Digits(1, 18, &h) || !cr.Char(':') || !cr.Digits(2, 2, &mi) || !cr.Char(':') ||
              !cr.Digits(2, 2, &s) || !cr.Fraction(&f) || !cr.Done())
            return Fail(column, "an interval");
          const __int128 v = ((__int128{h} * 60 + mi) * 60 + s) * 1'000'000 + f / 1000;
          micros += minus ? -v : v;
          continue;
        }
        int64_t n = 0;
        const auto res = std::from_chars(token.data(), token.data() + token.size(), n);
        if (res.ec != std::errc() || res.ptr != token.data() + token.size())
          return Fail(column, "an interval");
        const size_t space2 = rest.find(' ');
        const std::string_view unit = rest.substr(0, space2);
        rest = space2 == std::string_view::npos ? std::string_view() : rest.substr(space2 + 1);
        if (StartsWith(unit, "year")) {
          micros += __int128{n} * 12 * kMicrosPerMonth;
        } else if (StartsWith(unit, "mon")) {
          micros += __int128{n} * kMicrosPerMonth;
        } else if (StartsWith(unit, "day")) {
          micros += __int128{n} * kMicrosPerDay;
        } else {
          return Fail(column, "an interval");
        }
      }
      constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
      constexpr __int128 kMin = std::numeric_limits<int64_t>::min();
      return IntDatum(static_cast<int64_t>(std::clamp(micros, kMin, kMax)));
    }
    default: break;
  }
  return StringDatum(column.text);
}

constexpr char kHexDigits[] = "0123456789abcdef";

Result<Datum> ScalarDatum(const Column& column, const PgType& t, const ColumnModes& m) {
  if (column.is_null()) {
    // A NaN or infinity the decoder marked NULL as wal2json does (Column::text).
    if (SpecialNumber(column.text)) {
      if (t.kind == PgKind::kFloat32 || t.kind == PgKind::kFloat64)
        return Datum(Datum::Kind::kFloat, column.text);
      if (t.kind == PgKind::kNumeric) {
        Column special = column;
        special.kind = ValueKind::kString;
        return NumericDatum(special, t, m);
      }
    }
    return Datum{};
  }
  switch (t.kind) {
    case PgKind::kInt16:
    case PgKind::kInt32:
    case PgKind::kInt64: {
      int64_t v = 0;
      const auto res =
          std::from_chars(column.text.data(), column.text.data() + column.text.size(), v);
      if (res.ec != std::errc() || res.ptr != column.text.data() + column.text.size())
        return Fail(column, "an integer");
      return IntDatum(v);
    }
    case PgKind::kFloat32:
    case PgKind::kFloat64: {
      if (auto special = SpecialNumber(column.text)) return Datum{Datum::Kind::kFloat, *special};
      double v = 0;
      const auto res =
          std::from_chars(column.text.data(), column.text.data() + column.text.size(), v);
      if (res.ec != std::errc() || res.ptr != column.text.data() + column.text.size())
        return Fail(column, "a number");
      return Datum{Datum::Kind::kFloat, t.kind == PgKind::kFloat32
                                            ? JavaFloatText(static_cast<float>(v))
                                            : JavaFloatText(v)};
    }
    case PgKind::kBoolean: {
      Datum d{Datum::Kind::kBoolean};
      d.boolean = column.text == "true" || column.text == "t";
      return d;
    }
    case PgKind::kNumeric: return NumericDatum(column, t, m);
    case PgKind::kBytea: {
      auto bytes = DecodeByteaHex(column.text);
      if (!bytes) return Fail(column, "bytea hex");
      switch (m.binary) {
        case BinaryMode::kNative:
        case BinaryMode::kBytes: return Datum{Datum::Kind::kBytes, std::move(*bytes)};
        case BinaryMode::kBase64: return StringDatum(Base64(*bytes));
        case BinaryMode::kBase64UrlSafe: {
          std::string s = Base64(*bytes);
          for (char& c : s) c = c == '+' ? '-' : c == '/' ? '_' : c;
          return StringDatum(std::move(s));
        }
        case BinaryMode::kHex: {
          std::string s;
          for (unsigned char c : *bytes) {
            s += kHexDigits[c >> 4];
            s += kHexDigits[c & 15];
          }
          return StringDatum(std::move(s));
        }
      }
      break;
    }
    case PgKind::kDate:
    case PgKind::kTime:
    case PgKind::kTimestamp:
    case PgKind::kTimestampTz:
    case PgKind::kTimeTz:
    case PgKind::kInterval: return TemporalDatum(column, t, m);
    default: break;
  }
  return StringDatum(column.text);
}

void WriteDatum(const Datum& d, JsonWriter& w) {
  switch (d.kind) {
    case Datum::Kind::kNull: w.Null(); return;
    case Datum::Kind::kString: WriteJsonString(w, d.text); return;
    case Datum::Kind::kInteger: w.Int64(d.integer); return;
    case Datum::Kind::kFloat:
      // Jackson quotes NaN and the infinities.
      if (SpecialNumber(d.text)) {
        WriteJsonString(w, d.text);
      } else {
        w.RawValue(d.text.data(), d.text.size(), rapidjson::kNumberType);
      }
      return;
    case Datum::Kind::kBoolean: w.Bool(d.boolean); return;
    case Datum::Kind::kBytes: w.String(Base64(d.text)); return;
    case Datum::Kind::kVariableScale:
      w.StartObject();
      w.Key("scale");
      w.Int64(d.integer);
      w.Key("value");
      w.String(Base64(d.text));
      w.EndObject();
      return;
    case Datum::Kind::kRawJson:
      w.RawValue(d.text.data(), d.text.size(), rapidjson::kArrayType);
      return;
  }
}

// The elements of PostgreSQL's one-dimensional array text, "{1,2,NULL}" or {"a","b c"};
// nullopt for an element that is NULL. Empty on a malformed text (with *ok false).
std::vector<std::optional<std::string>> ParseArray(std::string_view text, bool* ok) {
  std::vector<std::optional<std::string>> out;
  *ok = text.size() >= 2 && text.front() == '{' && text.back() == '}';
  if (!*ok) return out;
  text = text.substr(1, text.size() - 2);
  size_t i = 0;
  while (i < text.size()) {
    std::string element;
    bool quoted = false;
    if (text[i] == '"') {
      quoted = true;
      ++i;
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        element += text[i++];
      }
      ++i;  // closing quote
    } else {
      while (i < text.size() && text[i] != ',') element += text[i++];
    }
    if (!quoted && element == "NULL") {
      out.emplace_back();
    } else {
      out.emplace_back(std::move(element));
    }
    if (i < text.size() && text[i] == ',') ++i;
  }
  return out;
}

// The number of top-level sub-arrays of a multi-dimensional array's text, "{{1,2},{3,4}}";
// nullopt when the text is not one.
std::optional<size_t> SubArrays(std::string_view text) {
  if (text.size() < 4 || text[0] != '{' || text[1] != '{' || text.back() != '}')
    return std::nullopt;
  size_t count = 0;
  int depth = 0;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '\\') ++i;
      else if (c == '"') quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '{') {
      if (++depth == 2) ++count;
    } else if (c == '}') {
      if (--depth < 0) return std::nullopt;
    }
  }
  if (depth != 0 || quoted) return std::nullopt;
  return count;
}

Result<Datum> ArrayDatum(const Column& column, const PgType& t, const ColumnModes& m) {
  if (column.is_null()) return Datum{};
  // A multi-dimensional array: Debezium's array schema has scalar items, so it writes one null
  // per sub-array (and never fails the record).
  if (const std::optional<size_t> rows = SubArrays(column.text)) {
    std::string nulls = "[";
    for (size_t i = 0; i < *rows; ++i) nulls += i == 0 ? "null" : ",null";
    return Datum{Datum::Kind::kRawJson, nulls + "]"};
  }
  bool ok = false;
  const auto elements = ParseArray(column.text, &ok);
  if (!ok) return Fail(column, "an array");
  PgType element_type = t;
  element_type.array = false;
  // Debezium's Decimal cannot hold NaN or an infinity: converting the array fails, and it
  // writes the whole column as null (decimal.handling.mode=precise; double and string hold
  // them).
  if (element_type.kind == PgKind::kNumeric && m.decimal == DecimalMode::kPrecise) {
    for (const auto& e : elements)
      if (e && SpecialNumber(*e)) return Datum{};
  }
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartArray();
  for (const auto& e : elements) {
    Column element;
    element.name = column.name;
    element.type = column.type.substr(0, column.type.size() - 2);
    if (e) {
      element.kind = ValueKind::kString;
      element.text = *e;
      if (element_type.kind == PgKind::kBytea && StartsWith(element.text, "\\x"))
        element.text = element.text.substr(2);
    }
    auto d = ScalarDatum(element, element_type, m);
    if (!d.ok()) return d.status();
    WriteDatum(*d, w);
  }
  w.EndArray();
  return Datum{Datum::Kind::kRawJson, std::string(buffer.GetString(), buffer.GetSize())};
}

ConnectType ScalarConnectType(const SchemaParts& p) {
  const std::string_view type = p.type;
  if (type == "int16") return ConnectType::kInt16;
  if (type == "int32") return ConnectType::kInt32;
  if (type == "int64") return ConnectType::kInt64;
  if (type == "float") return ConnectType::kFloat32;
  if (type == "double") return ConnectType::kFloat64;
  if (type == "boolean") return ConnectType::kBoolean;
  if (type == "bytes") return ConnectType::kBytes;
  if (type == "struct") return ConnectType::kStruct;
  return ConnectType::kString;
}

std::string BuildColumnSchemaJson(const PgType& t, bool optional, const ColumnModes& modes) {
  PgType element = t;
  element.array = false;
  const SchemaParts scalar = ScalarSchema(element, modes);
  if (!t.array) return SchemaJson(scalar, optional);
  return std::string("{\"type\":\"array\",\"items\":") + SchemaJson(scalar, true) +
         (optional ? ",\"optional\":true}" : ",\"optional\":false}");
}

// What a column type name means under one set of modes: its parsed type, its Connect type and
// its schema JSON (optional or not).
struct TypeFacts {
  PgType type;
  ConnectType connect_type = ConnectType::kString;
  SchemaText schema_required;  // shared with every value of the type (transform/record.h)
  SchemaText schema_optional;
};

TypeFacts BuildTypeFacts(std::string_view name, const ColumnModes& modes) {
  TypeFacts f;
  f.type = ParseType(name);
  PgType element = f.type;
  element.array = false;
  f.connect_type =
      f.type.array ? ConnectType::kArray : ScalarConnectType(ScalarSchema(element, modes));
  f.schema_required = BuildColumnSchemaJson(f.type, false, modes);
  f.schema_optional = BuildColumnSchemaJson(f.type, true, modes);
  return f;
}

// Parsing a type name and writing its schema took about a third of walrelay's instructions per
// outbox row (three columns per row, each parsed twice and its schema JSON built from string
// pieces). A table has few distinct type names, so they are worked out once per thread and
// modes. Bounded: past kTypeCacheLimit names (a catalog of thousands of varchar(n) lengths)
// a name is worked out every time into the caller's `spare`, and what was cached stays valid.
constexpr size_t kTypeCacheLimit = 1024;

struct TypeNameHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};

struct TypeCache {
  ColumnModes modes;
  std::unordered_map<std::string, TypeFacts, TypeNameHash, std::equal_to<>> facts;
};

bool SameModes(const ColumnModes& a, const ColumnModes& b) {
  return a.decimal == b.decimal && a.time == b.time && a.binary == b.binary;
}

const TypeFacts& FactsOf(std::string_view name, const ColumnModes& modes, TypeFacts& spare) {
  // One cache per modes; a process has one or two (the router's, the change events').
  thread_local std::vector<std::unique_ptr<TypeCache>> caches;
  TypeCache* cache = nullptr;
  for (const auto& c : caches) {
    if (SameModes(c->modes, modes)) {
      cache = c.get();
      break;
    }
  }
  if (cache == nullptr) {
    caches.push_back(std::make_unique<TypeCache>());
    cache = caches.back().get();
    cache->modes = modes;
  }
  if (auto it = cache->facts.find(name); it != cache->facts.end()) return it->second;
  if (cache->facts.size() >= kTypeCacheLimit) {
    spare = BuildTypeFacts(name, modes);
    return spare;
  }
  return cache->facts.emplace(std::string(name), BuildTypeFacts(name, modes)).first->second;
}

Result<Datum> ColumnDatum(const Column& column, const PgType& t, const ColumnModes& modes) {
  if (t.array) return ArrayDatum(column, t, modes);
  return ScalarDatum(column, t, modes);
}

}  // namespace

Result<ColumnModes> ReadColumnModes(const Properties& config, bool schemas_written) {
  ColumnModes modes;
  auto decimal = config.GetEnum("decimal.handling.mode", schemas_written ? "precise" : "",
                                {"precise", "double", "string"});
  if (!decimal.ok()) return decimal.status();
  modes.decimal = *decimal == "precise"  ? DecimalMode::kPrecise
                  : *decimal == "double" ? DecimalMode::kDouble
                  : *decimal == "string" ? DecimalMode::kString
                                         : DecimalMode::kNative;
  auto time = config.GetEnum("time.precision.mode", schemas_written ? "adaptive" : "",
                             {"adaptive", "adaptive_time_microseconds", "connect", "isostring"});
  if (!time.ok()) return time.status();
  modes.time = *time == "adaptive"                     ? TimeMode::kAdaptive
               : *time == "adaptive_time_microseconds" ? TimeMode::kAdaptiveTimeMicroseconds
               : *time == "connect"                    ? TimeMode::kConnect
               : *time == "isostring"                  ? TimeMode::kIsoString
                                                       : TimeMode::kNative;
  auto binary = config.GetEnum("binary.handling.mode", schemas_written ? "bytes" : "",
                               {"bytes", "base64", "base64-url-safe", "hex"});
  if (!binary.ok()) return binary.status();
  modes.binary = *binary == "bytes"             ? BinaryMode::kBytes
                 : *binary == "base64"          ? BinaryMode::kBase64
                 : *binary == "base64-url-safe" ? BinaryMode::kBase64UrlSafe
                 : *binary == "hex"             ? BinaryMode::kHex
                                                : BinaryMode::kNative;
  return modes;
}

std::string ColumnSchemaJson(const Column& column, const ColumnModes& modes) {
  TypeFacts spare;
  const TypeFacts& f = FactsOf(column.type, modes, spare);
  return column.optional ? f.schema_optional.str() : f.schema_required.str();
}

Result<ConnectValue> ColumnConnectValue(const Column& column, const ColumnModes& modes) {
  TypeFacts spare;
  const TypeFacts& f = FactsOf(column.type, modes, spare);
  const PgType& t = f.type;
  ConnectValue out;
  out.shape.schema_json = column.optional ? f.schema_optional : f.schema_required;
  out.shape.type = f.connect_type;
  const bool native = Native(modes) || (!t.array && KindNative(t.kind, modes));
  if (column.is_null() && (native || !SpecialNumber(column.text))) return out;
  if (native) {
    // walrelay's own bytes: PostgreSQL's text, raw bytea.
    auto bytes = ColumnBytes(column);
    if (!bytes.ok()) return bytes.status();
    out.bytes = std::move(*bytes);
    if (t.array) out.shape.type = ConnectType::kString;
    return out;
  }
  auto d = ColumnDatum(column, t, modes);
  if (!d.ok()) return d.status();
  switch (d->kind) {
    case Datum::Kind::kNull: break;
    case Datum::Kind::kInteger: out.bytes = std::to_string(d->integer); break;
    case Datum::Kind::kBoolean: out.bytes = d->boolean ? "true" : "false"; break;
    case Datum::Kind::kVariableScale: {
      rapidjson::StringBuffer buffer;
      JsonWriter w(buffer);
      WriteDatum(*d, w);
      out.bytes = std::string(buffer.GetString(), buffer.GetSize());
      break;
    }
    default: out.bytes = d->text; break;
  }
  return out;
}

void WriteColumnJson(const Column& column, const ColumnModes& modes, JsonWriter& writer) {
  // walrelay's own rendering needs no type: the common case parses nothing.
  if (Native(modes)) {
    WriteColumnJson(column, writer);
    return;
  }
  TypeFacts spare;
  const PgType& t = FactsOf(column.type, modes, spare).type;
  if (!t.array && KindNative(t.kind, modes)) {
    WriteColumnJson(column, writer);
    return;
  }
  auto d = ColumnDatum(column, t, modes);
  if (!d.ok()) {
    // A value PostgreSQL printed in a form this model does not read stays PostgreSQL's text.
    WriteColumnJson(column, writer);
    return;
  }
  WriteDatum(*d, writer);
}

}  // namespace walrelay
