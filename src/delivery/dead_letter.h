// Dead-letter records: what walrelay sends to `errors.deadletterqueue.topic.name` when a
// record cannot be produced or transformed and `errors.tolerance=all`.
//
// The dead-letter record keeps the original key, value and headers and adds Kafka Connect's
// `__connect.errors.*` context headers plus walrelay's `__walrelay.errors.*` (source LSN,
// table, event id). A value too large for Kafka is replaced by an empty value, and a header
// says so, so the record itself can always be delivered.
#pragma once

#include <cstddef>
#include <string>

#include "common/lsn.h"
#include "transform/record.h"

namespace walrelay {

struct FailureContext {
  std::string stage;            // "TRANSFORMATION" or "KAFKA_PRODUCE"
  std::string class_name;       // the failing transform's type, or "librdkafka"
  std::string exception_class;  // error class, e.g. librdkafka's error name
  std::string message;          // why it failed
  std::string connector_name;
  Lsn lsn;            // source row LSN
  std::string table;  // "schema.table"
};

// Builds the dead-letter record for `original`. `max_value_bytes` is the largest value that
// still fits Kafka's message.max.bytes with the headers added.
Record MakeDeadLetterRecord(const Record& original, const FailureContext& failure,
                            const std::string& dead_letter_topic, bool context_headers,
                            size_t max_value_bytes);

}  // namespace walrelay
