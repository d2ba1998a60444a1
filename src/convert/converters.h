// Converters: the key, value and header converters of a connector, applied to each record
// after the transform chain and before it is produced (docs/configuration.md, "Converters").
//
// `key.converter`, `value.converter` and `header.converter` name Kafka Connect classes
// (connect_converters.h). A key that is absent keeps walrelay's own bytes for that part of the
// record, as before converters existed; a Kafka Connect worker would default to JsonConverter
// with schemas (header: SimpleHeaderConverter), which walrelay does not copy on purpose.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "config/properties.h"
#include "convert/converter.h"
#include "transform/record.h"

namespace walrelay {

// Which converter failed, as Kafka Connect's error context names it.
struct ConversionFailure {
  std::string stage;       // "KEY_CONVERTER", "VALUE_CONVERTER" or "HEADER_CONVERTER"
  std::string class_name;  // the converter class
  Status status;           // kTransform: converter key, topic, origin, LSN and why
};

class Converters {
 public:
  // Reads the converter keys of the connector config. kConfig errors name the key.
  static Result<Converters> Build(const Properties& connector_config);

  // walrelay's bytes for key, value and headers (no converter named).
  static Converters Native();

  // Rewrites key, value and headers of `record` (shapes are left as they were). On failure
  // the record is unchanged (walrelay's bytes, for a dead letter).
  std::optional<ConversionFailure> Apply(Record& record) const;

  // True when any converter writes Connect schemas, so Debezium's handling-mode defaults
  // apply (connect_column.h, ReadColumnModes).
  bool WritesSchemas() const;

  // Set once the handling modes are known (connect_column.h): true when
  // decimal.handling.mode renders numbers as walrelay does (Converter::KeepNumberText).
  void KeepNumberText(bool keep);

  // "value.converter" etc. for messages; which one failed is in Apply()'s error.
  static constexpr const char* kKeyConverter = "key.converter";
  static constexpr const char* kValueConverter = "value.converter";
  static constexpr const char* kHeaderConverter = "header.converter";

 private:
  struct Part {
    std::unique_ptr<Converter> converter;
    std::string class_name;  // "" for walrelay's own bytes
  };
  Converters(Part key, Part value, Part header, bool native)
      : key_(std::move(key)),
        value_(std::move(value)),
        header_(std::move(header)),
        native_(native) {}

  Part key_;
  Part value_;
  Part header_;
  bool native_;  // nothing to do: every part keeps walrelay's bytes
};

}  // namespace walrelay
