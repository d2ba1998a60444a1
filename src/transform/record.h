// Record: one outgoing Kafka record as it moves through the transform chain.
//
// The source builds a Record from each RowChange. While `change` is set, the value is still
// the structured Debezium change event; a transform that rewrites the value (the event router)
// sets `value` and clears `change`. A transactional logical decoding message becomes a Record
// whose value is already its serialized Debezium message event and whose `message` points at
// the message, for the transform that decodes its content (transform/message_event.h). Key and value are bytes exactly as they go to Kafka;
// std::nullopt means a null key / null value (a tombstone).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/lsn.h"
#include "decode/change_event.h"

namespace walrelay {

struct Header {
  std::string key;
  std::optional<std::string> value;  // nullopt = null header value
};

// Where the record came from, for error messages, dead-letter headers and plugins.
struct SourceInfo {
  Lsn lsn;          // LSN of the row change (or logical decoding message)
  std::string table;  // "schema.table"; empty for a logical decoding message
  std::string message_prefix;  // a logical decoding message's prefix
  int64_t commit_time_ms = 0;
  ChangeOp op = ChangeOp::kInsert;
  uint32_t xid = 0;
};

// "table public.outbox", or "logical decoding message with prefix 'orders'": where a record
// came from, for messages.
inline std::string DescribeOrigin(const SourceInfo& source) {
  if (source.table.empty()) return "logical decoding message with prefix '" + source.message_prefix + "'";
  return "table " + source.table;
}

inline constexpr int32_t kAnyPartition = -1;

struct Record {
  std::string topic;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<Header> headers;
  int32_t partition = kAnyPartition;
  int64_t timestamp_ms = 0;
  SourceInfo source;
  // The structured change this record still represents, or nullptr once a transform has
  // replaced the value. Borrowed: valid only while the chain processes this record.
  const RowChange* change = nullptr;
  // The logical decoding message this record still represents, or nullptr. Borrowed, like
  // `change`; cleared by a transform that replaces the value.
  const LogicalMessage* message = nullptr;

  // Returns the value of the first header named `name`, or nullptr.
  const Header* FindHeader(const std::string& name) const {
    for (const auto& h : headers)
      if (h.key == name) return &h;
    return nullptr;
  }
};

}  // namespace walrelay
