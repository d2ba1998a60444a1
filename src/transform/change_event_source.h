// The Debezium change event a row change represents before any transform rewrites it: what a
// walrelay user gets on `<topic.prefix>.<schema>.<table>` with no transforms configured.
//
// MakeSourceRecord() builds the Record the transform chain starts from (topic, key, timestamp,
// source info, `change` pointer; the value is left unset). SerializeChangeEvent() renders the
// change as the JSON Debezium's JsonConverter writes without schemas, for a record whose
// `change` is still set at the end of the chain.
//
// Column values follow the context's ColumnModes (transform/connect_column.h). Under kNative
// modes (the handling-mode keys absent) they keep wal2json's typing: numbers are JSON numbers
// with their exact digits, booleans are booleans, NULL is null, bytea is base64 (as
// JsonConverter writes bytes), and everything else (text, uuid, json/jsonb, timestamps, dates,
// enums) is a JSON string holding PostgreSQL's text. The same rendering serves the event
// router's envelope fields. Pure functions; thread-safe.
#pragma once

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "decode/change_event.h"
#include "transform/column_modes.h"
#include "transform/record.h"

namespace walrelay {

struct SourceContext {
  std::string topic_prefix;    // `topic.prefix`: first part of every topic, `source.name`
  std::string database;        // `database.dbname`: `source.db`
  std::string connector_name;  // the connector's name, for messages
  ColumnModes modes;           // how change events and keys render column values
};

// Whether MakeSourceRecord builds the topic and key, or leaves them for a chain whose first
// transform replaces both (TransformChain::SkipsSourceTopicAndKey): an empty topic and a null
// key until SetSourceTopicAndKey() builds them.
enum class SourceTopicAndKey : uint8_t { kBuild, kLeaveUnset };

// The record for `change` before any transform: topic `<topic_prefix>.<schema>.<table>`, key
// = JSON object of the primary-key columns (from the identity image for deletes), or a null
// key when the table has no primary key or the image lacks one of its columns; timestamp =
// commit time. `record.change` points at `change`, which must outlive the record's trip
// through the chain.
Record MakeSourceRecord(const RowChange& change, const SourceContext& ctx,
                        SourceTopicAndKey topic_and_key = SourceTopicAndKey::kBuild);
// Sets the topic and key MakeSourceRecord gives `change`'s record.
void SetSourceTopicAndKey(Record& record, const RowChange& change, const SourceContext& ctx);

// The tombstone Debezium sends after a delete (`tombstones.on.delete`, default true): the
// delete's record with `source.tombstone` set; its value stays null at the end of the chain.
// `record.change` still points at the delete, so that a transform treats it as one (the event
// router drops it, as Debezium's drops tombstones).
Record MakeTombstoneRecord(const RowChange& change, const SourceContext& ctx,
                           SourceTopicAndKey topic_and_key = SourceTopicAndKey::kBuild);

// The change event value as Debezium lays it out: {"before","after","source","transaction",
// "op","ts_ms","ts_us","ts_ns"}. `before` is RowChange::before (null when empty: an insert, an
// update without an old tuple); `transaction` is null (Debezium's provide.transaction.metadata
// is off). `now_ms` becomes the top-level ts_ms/ts_us/ts_ns (processing time).
std::string SerializeChangeEvent(const RowChange& change, const SourceContext& ctx, int64_t now_ms);

// The Connect schema of SerializeChangeEvent's value, as JsonConverter (schemas.enable=true)
// writes it under "schema": the `<topic_prefix>.<schema>.<table>.Envelope` struct (version 2)
// with before/after `<...>.Value` structs of the table's columns (ColumnSchemaJson under
// ctx.modes), Debezium's PostgreSQL source block, the transaction block, op and the
// processing times. Column defaults are not known, so no field carries "default".
std::string ChangeEventSchemaJson(const RowChange& change, const SourceContext& ctx);
// The Connect schema of MakeSourceRecord's key (`<...>.Key`, the primary-key columns), or ""
// when the record has a null key.
std::string ChangeEventKeySchemaJson(const RowChange& change, const SourceContext& ctx);

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

// RapidJSON 1.1 has no std::string overload of Key(), and sizes are 32-bit.
inline void WriteJsonKey(JsonWriter& writer, std::string_view key) {
  writer.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
}
inline void WriteJsonString(JsonWriter& writer, std::string_view value) {
  writer.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

// Writes the change event's "source" object: connector, topic prefix, database, schema,
// table, commit time, transaction id and LSN, as Debezium's PostgreSQL source block.
void WriteSourceBlock(JsonWriter& writer, const SourceContext& ctx, std::string_view schema,
                      std::string_view table, int64_t commit_time_ms, uint32_t xid, Lsn lsn);

// Standard base64 with padding, as JsonConverter writes bytes.
std::string Base64(std::string_view bytes);

// Writes one column value as a JSON value under kNative modes (see the typing rules above).
void WriteColumnJson(const Column& column, JsonWriter& writer);
// The same, as a standalone JSON text.
std::string RenderColumnJson(const Column& column);
// Writes {"<name>": <value>, ...} for `columns`, in order, under `modes`.
void WriteColumnsObject(const std::vector<Column>& columns, JsonWriter& writer,
                        const ColumnModes& modes = {});

bool IsBytea(const Column& column);
// wal2json's bytea rendering (hex digits, with or without a leading "\x") as raw bytes;
// nullopt if it is not valid hex.
std::optional<std::string> DecodeByteaHex(std::string_view hex);
// The bytes a column contributes to a Kafka key, value or header, like Kafka's
// StringConverter/ByteArrayConverter: the text PostgreSQL renders, the raw bytes for bytea.
// nullopt for SQL NULL; an error naming the column for bytea that is not valid hex.
Result<std::optional<std::string>> ColumnBytes(const Column& column);

}  // namespace walrelay
