// How the JVM side of Kafka Connect writes values as text, for the converters: Jackson's JSON
// strings and its escaping of characters outside the Basic Multilingual Plane, Java's
// Double.toString / Float.toString, BigDecimal.toString of a Connect Decimal, and Kafka
// Connect's Values.convertToString / Struct.toString for structured values. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace walrelay {

// A JSON string literal as Jackson writes it: \" \\ \b \t \n \f \r, other control characters as
// \u00XX (upper-case hex), characters outside the BMP as a \uD83D\uDE00 surrogate pair, other
// UTF-8 as it is.
std::string JacksonStringLiteral(std::string_view utf8);

// `json` (compact JSON text in UTF-8) with every character outside the BMP written as Jackson
// writes it: a pair of upper-case \u escapes. Such characters occur only inside strings.
std::string EscapeOutsideBmp(std::string_view json);

// Java's Double.toString / Float.toString of the number in `text` (a decimal or PostgreSQL's
// NaN/Infinity/-Infinity), e.g. "1.5", "1.0E10", "1.0E-4"; nullopt when `text` is no number.
std::optional<std::string> JavaDoubleText(std::string_view text);
std::optional<std::string> JavaFloatText(std::string_view text);

// Jackson's JSON for a double: a number, or "NaN", "Infinity", "-Infinity" as JSON strings.
std::optional<std::string> JacksonDoubleJson(std::string_view text, bool single_precision);

// BigDecimal.toString of a Connect Decimal: `unscaled` is the big-endian two's-complement
// unscaled value (Connect's bytes); the decimal point goes `scale` digits from the right, in
// scientific notation where Java uses it (scale < 0, or more than 6 leading zeros): 12345670
// with scale 3 is "12345.670", 123 with scale 9 is "1.23E-7".
std::string JavaDecimalText(std::string_view unscaled, int32_t scale);

// A Connect Date (days), Time (milliseconds of the day) or Timestamp (milliseconds) value, named
// by `logical_name`, as Values.convertToString writes it (SimpleDateFormat in UTC: "yyyy-MM-dd"
// at midnight, "HH:mm:ss.SSS'Z'" within the first day, else "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
// or as java.util.Date.toString() does ("Thu Feb 29 12:34:56 UTC 2024") with `to_string`.
// A JVM in UTC is assumed. nullopt when `text` is no integer.
std::optional<std::string> JavaDateText(std::string_view logical_name, std::string_view text,
                                        bool to_string);

// The "scale" parameter of a Decimal schema ({"parameters":{"scale":"3"}}), if any.
std::optional<int32_t> DecimalScale(std::string_view schema_json);

// The "name" of a Connect schema, or "".
std::string SchemaName(std::string_view schema_json);

// Values.convertToString of a struct, array or map given as JSON text: {"name":value,...} with
// strings quoted (only \ and " escaped), numbers and booleans as they are, null as null.
Result<std::string> ConnectValuesText(std::string_view json);

// Struct.toString (objects: Struct{name=value,...} leaving out null fields) or List.toString
// ([a, b]) of a structured value given as JSON text; `map` writes top-level objects as
// AbstractMap.toString ({k=v, k2=v2}).
Result<std::string> JavaObjectText(std::string_view json, bool map);

}  // namespace walrelay
