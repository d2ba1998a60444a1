// Record: one outgoing Kafka record as it moves through the transform chain.
//
// The source builds a Record from each RowChange. While `change` is set, the value is still
// the structured Debezium change event; a transform that rewrites the value (the event router)
// sets `value` and clears `change`. A transactional logical decoding message becomes a Record
// whose value is already its serialized Debezium message event and whose `message` points at
// the message, for the transform that decodes its content (transform/message_event.h). Key and
// value are bytes exactly as they go to Kafka; std::nullopt means a null key / null value (a
// tombstone).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/lsn.h"
#include "decode/change_event.h"

namespace walrelay {

// What a key, value or header is in Kafka Connect's data model, so that the configured
// converter (convert/converter.h) can write it as Kafka Connect would. The bytes themselves
// stay walrelay's own rendering: text for strings, numbers and booleans (their decimal or
// "true"/"false" text), raw bytes for kBytes, JSON text for kStruct/kArray/kMap.
enum class ConnectType : uint8_t {
  kString,
  kBytes,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFloat32,
  kFloat64,
  kBoolean,
  kStruct,
  kArray,
  kMap,
};

// A Connect schema's JSON text, immutable and shared when copied: every record of one column
// type carries the same schema, built once per thread (transform/connect_column.cc), and a
// copy per record would allocate. Reads as a const std::string.
class SchemaText {
 public:
  SchemaText() = default;
  SchemaText(std::string text)  // NOLINT: implicit, like the std::string it replaced
      : text_(text.empty() ? nullptr : std::make_shared<const std::string>(std::move(text))) {}
  SchemaText(const char* text) : SchemaText(std::string(text)) {}  // NOLINT: as above

  const std::string& str() const { return text_ ? *text_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT: reads as a string
  operator std::string_view() const { return str(); }    // NOLINT: as above
  bool empty() const { return !text_; }
  size_t find(std::string_view what, size_t from = 0) const { return str().find(what, from); }
  friend bool operator==(const SchemaText& a, std::string_view b) { return a.str() == b; }

 private:
  static const std::string& Empty() {
    static const std::string empty;
    return empty;
  }
  std::shared_ptr<const std::string> text_;  // null for no schema
};

struct ConnectShape {
  ConnectType type = ConnectType::kString;
  // The Connect schema as JsonConverter writes it under "schema" (e.g.
  // {"type":"string","optional":true,"name":"io.debezium.data.Json","version":1}); empty when
  // nobody knows it (a plugin rewrote the value), which JsonConverter writes as null.
  SchemaText schema_json;
};

struct Header {
  std::string key;
  std::optional<std::string> value;  // nullopt = null header value
  ConnectShape shape{};              // braced so that {key, value} still initialises a whole Header
};

// Where the record came from, for error messages, dead-letter headers and plugins.
struct SourceInfo {
  Lsn lsn;                     // LSN of the row change (or logical decoding message)
  std::string table;           // "schema.table"; empty for a logical decoding message
  std::string message_prefix;  // a logical decoding message's prefix
  int64_t commit_time_ms = 0;
  ChangeOp op = ChangeOp::kInsert;
  uint32_t xid = 0;
  // The null-value record Debezium sends after a delete (tombstones.on.delete); its `change`
  // is the delete, its value stays null.
  bool tombstone = false;
};

// "logical decoding message with prefix 'orders'": how every message names a message's origin.
inline constexpr std::string_view kMessageOriginLead = "logical decoding message";
inline std::string MessageOrigin(const std::string& prefix) {
  return std::string(kMessageOriginLead) + " with prefix '" + prefix + "'";
}

// A record's origin as one string: "schema.table", or MessageOrigin() for a logical decoding
// message. The ack ledger keeps it per record and dead letters carry it in a header.
inline std::string OriginLabel(const SourceInfo& source) {
  return source.table.empty() ? MessageOrigin(source.message_prefix) : source.table;
}

// The one way messages name where a record came from: "table public.outbox", or
// MessageOrigin() for a message. Takes a label (OriginLabel) or the source info.
inline std::string DescribeOrigin(const std::string& label) {
  return label.starts_with(kMessageOriginLead) ? label : "table " + label;
}
inline std::string DescribeOrigin(const SourceInfo& source) {
  return DescribeOrigin(OriginLabel(source));
}

inline constexpr int32_t kAnyPartition = -1;

struct Record {
  std::string topic;
  std::optional<std::string> key;
  std::optional<std::string> value;
  ConnectShape key_shape;
  ConnectShape value_shape;  // a null value with a schema is not a tombstone to JsonConverter
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
