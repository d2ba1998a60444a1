// The converter classes walrelay implements, by their Kafka Connect class name, configured by
// the keys under `<role>.converter.` as Kafka Connect's worker passes them:
//
//   org.apache.kafka.connect.storage.StringConverter      value.toString() in UTF-8
//       (converter.encoding: UTF-8 only)
//   org.apache.kafka.connect.json.JsonConverter           JSON as Jackson writes it
//       (schemas.enable, default true; decimal.format BASE64 only; schemas.cache.size and
//       replace.null.with.default accepted)
//   org.apache.kafka.connect.converters.ByteArrayConverter    bytes as they are
//   io.debezium.converters.BinaryDataConverter            bytes as they are; other values go
//       to delegate.converter.type (configured by delegate.converter.type.*)
//   org.apache.kafka.connect.storage.SimpleHeaderConverter    Values.convertToString in UTF-8
//
// An unknown class or a refused setting is a kConfig error naming the key.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "config/properties.h"
#include "convert/converter.h"

namespace walrelay {

inline constexpr const char* kStringConverterClass =
    "org.apache.kafka.connect.storage.StringConverter";
inline constexpr const char* kJsonConverterClass = "org.apache.kafka.connect.json.JsonConverter";
inline constexpr const char* kByteArrayConverterClass =
    "org.apache.kafka.connect.converters.ByteArrayConverter";
inline constexpr const char* kBinaryDataConverterClass =
    "io.debezium.converters.BinaryDataConverter";
inline constexpr const char* kSimpleHeaderConverterClass =
    "org.apache.kafka.connect.storage.SimpleHeaderConverter";

// `class_key` is the full key that named the class (e.g. "value.converter"); `settings` is
// scoped to its sub-keys ("value.converter."), every key it reads is marked as read.
Result<std::unique_ptr<Converter>> MakeConverter(const std::string& class_name,
                                                 const std::string& class_key,
                                                 const Properties& settings);

// walrelay's own bytes, unchanged: what it sends when no converter is named.
std::unique_ptr<Converter> MakeNativeConverter();

}  // namespace walrelay
