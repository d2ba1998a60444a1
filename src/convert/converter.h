// Converter: Kafka Connect's Converter.fromConnectData(topic, schema, value) (and
// HeaderConverter.fromConnectHeader) over walrelay's records. The value arrives as its
// ConnectShape (type and schema, transform/record.h) and walrelay's own bytes for it; the
// converter returns the bytes Kafka gets, exactly as the named Connect class writes them.
//
// A schema that is unknown (an empty schema_json) is Connect's null schema. A value the
// converter cannot write (ByteArrayConverter given a string) is a kTransform error saying
// why; the caller adds the converter key, topic and origin.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"
#include "transform/record.h"

namespace walrelay {

class Converter {
 public:
  virtual ~Converter() = default;

  // `value` nullopt is a null value; the result nullopt is a Kafka null.
  virtual Result<std::optional<std::string>> FromConnectData(
      const std::string& topic, const ConnectShape& shape,
      const std::optional<std::string>& value) const = 0;

  // True when the bytes carry the Connect schema (JsonConverter with schemas.enable): the
  // values must then be Debezium's, as the schema describes them (connect_column.h).
  virtual bool WritesSchemas() const { return false; }

  // With walrelay's rendering of numbers (decimal.handling.mode absent and no schemas
  // written), a FLOAT32/FLOAT64 value is PostgreSQL's text of a numeric, real or double
  // column and is written as that text, not as Java prints a double.
  virtual void KeepNumberText(bool keep) { keep_number_text_ = keep; }

 protected:
  bool keep_number_text_ = false;
};

}  // namespace walrelay
