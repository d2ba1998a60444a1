// The three Debezium settings that decide how a column value is rendered:
// `decimal.handling.mode`, `time.precision.mode`, `binary.handling.mode`
// (transform/connect_column.h reads and applies them). kNative is walrelay's own rendering.
#pragma once

namespace walrelay {

enum class DecimalMode { kNative, kPrecise, kDouble, kString };
enum class TimeMode { kNative, kAdaptive, kAdaptiveTimeMicroseconds, kConnect, kIsoString };
enum class BinaryMode { kNative, kBytes, kBase64, kBase64UrlSafe, kHex };

struct ColumnModes {
  DecimalMode decimal = DecimalMode::kNative;
  TimeMode time = TimeMode::kNative;
  BinaryMode binary = BinaryMode::kNative;
};

}  // namespace walrelay
