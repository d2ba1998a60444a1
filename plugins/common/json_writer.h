// JsonWriter: RapidJSON's Writer with RawNumber fixed, for the C++ example plugins.
//
// The plugins parse with kParseNumbersAsStringsFlag so numbers keep their exact digits
// (a bigint or numeric never goes through a double); the reader then hands each number to
// RawNumber(). RapidJSON 1.1's Writer::RawNumber writes it as a quoted string, so this one
// writes the digits as a number. Header-only; links nothing.
#pragma once

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string_view>

namespace walrelay_plugin {

class JsonWriter : public rapidjson::Writer<rapidjson::StringBuffer> {
 public:
  using Writer::Writer;

  // Hides Writer::RawNumber: rapidjson::Reader calls it on the handler's static type.
  bool RawNumber(const Ch* digits, rapidjson::SizeType length, bool = false) {
    return RawValue(digits, length, rapidjson::kNumberType);
  }

  bool String(std::string_view s) {
    return Writer::String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  }
  using Writer::String;
};

}  // namespace walrelay_plugin
