// Logical decoding messages as records: the outbox without a table.
//
// An application that calls pg_logical_emit_message(true, prefix, content) inside its
// transaction gets, like Debezium's PostgreSQL connector:
//
// MakeMessageRecord(): Debezium's message event, what a consumer gets without transforms:
//   topic `<topic.prefix>.message`, key {"prefix": "<prefix>"}, value {"op": "m", "ts_ms":
//   <now>, "source": {...}, "message": {"prefix": ..., "content": <base64>}}, timestamp = the
//   transaction's commit time. The value is set already (transforms that do not know messages
//   see bytes) and `record.message` points at `message`, which must outlive the record's trip
//   through the chain.
//
// DecodeMessageContent transform (Debezium's DecodeLogicalDecodingMessageContent): replaces
//   such a record by the insert a row with the content's members as columns would be, so that
//   the EventRouter after it routes the message exactly as it routes an outbox row. The content
//   must be a JSON object (UTF-8); each member becomes a column, in order:
//     string          -> "text"   column holding the string
//     number          -> "integer" (fits 32 bits), "bigint" (64 bits), else "numeric" for
//                        integers, "double precision" otherwise; the digits as written
//     true/false      -> "boolean"
//     object or array -> "json"   column holding the member's JSON text exactly as written
//     null            -> left out (Debezium's default), or a NULL "bytea" column (Connect
//                        schema optional bytes, as Debezium infers) with
//                        `fields.null.include=true`
//   A repeated member name keeps the last value, as Jackson does. Records that are not
//   messages pass through unchanged. Content that is not a JSON object fails the record with
//   a kTransform error naming the prefix and LSN (the error policy decides what follows).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "config/properties.h"
#include "decode/change_event.h"
#include "transform/change_event_source.h"
#include "transform/transform.h"

namespace walrelay {

inline constexpr const char* kDecodeMessageContentType =
    "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent";

// The topic suffix Debezium gives message events: `<topic.prefix>.message`.
inline constexpr const char* kMessageTopicSuffix = ".message";

// `xid` and `commit_time_ms` are those of the transaction the message was emitted in.
Record MakeMessageRecord(const LogicalMessage& message, uint32_t xid, int64_t commit_time_ms,
                         const SourceContext& ctx, int64_t now_ms);

// Fills `row` (op insert, the message's LSN, `xid`, `commit_time_ms`, empty schema and table)
// with the columns of the message's JSON content, as listed above. Reuses row's storage.
Status DecodeMessageContent(const LogicalMessage& message, uint32_t xid, int64_t commit_time_ms,
                            bool include_null_members, RowChange& row);

// The built-in transform; `props` is scoped to `transforms.<alias>.` and may set
// `fields.null.include` (default false).
Result<std::unique_ptr<Transform>> MakeDecodeMessageContent(const std::string& alias,
                                                            const Properties& props);

}  // namespace walrelay
