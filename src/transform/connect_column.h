// A PostgreSQL column as Debezium's PostgreSQL connector hands it to Kafka Connect: its
// Connect schema and its value under the connector's `decimal.handling.mode`,
// `time.precision.mode` and `binary.handling.mode`.
//
// Each mode has a kNative setting, walrelay's own rendering (PostgreSQL's text for numeric and
// temporal values, base64 for bytea in JSON, raw bytea elsewhere: docs/event-router.md). It is
// used when the key is absent and no converter writes schemas; any other setting renders the
// value as Debezium does, so that a converter writes Debezium's bytes. Each column type follows
// the mode that governs it (real and double precision follow decimal.handling.mode); types no
// mode governs (text, integers, boolean, uuid, json) render alike under every mode; an array
// renders as Debezium's array once any mode is not kNative. Values and schemas match what
// Debezium 3.2 writes for PostgreSQL (PostgresValueConverter), verified against it. Pure functions.
#pragma once

#include <string>

#include "common/status.h"
#include "config/properties.h"
#include "decode/change_event.h"
#include "transform/change_event_source.h"
#include "transform/column_modes.h"
#include "transform/record.h"

namespace walrelay {

// Reads the three keys from the connector config. A key that is absent is kNative, unless
// `schemas_written` (a converter writes Connect schemas), when it is Debezium's default
// (precise, adaptive, bytes). An unknown value is a kConfig error naming the key.
Result<ColumnModes> ReadColumnModes(const Properties& connector_config, bool schemas_written);

// The column's Connect schema as JsonConverter writes it, without a field name, e.g.
// {"type":"int64","optional":false,"name":"io.debezium.time.MicroTimestamp","version":1}.
std::string ColumnSchemaJson(const Column& column, const ColumnModes& modes);

// The column's value as Connect data: its type and walrelay's bytes for it (see record.h).
// nullopt bytes for SQL NULL. Under kNative modes the bytes are ColumnBytes(). Otherwise:
// integers and epoch-based temporal values as decimal text, real/double as Java's
// Float/Double.toString ("1.0E10", "NaN"), strings as text, kBytes raw (bytea; for a Decimal
// the unscaled value's two's-complement bytes, as BigInteger.toByteArray gives them, the scale
// being in the schema), a VariableScaleDecimal as its JSON {"scale":2,"value":"<base64>"}, an
// array as its JSON. An error names the column when its text cannot be converted.
struct ConnectValue {
  ConnectShape shape;
  std::optional<std::string> bytes;
};
Result<ConnectValue> ColumnConnectValue(const Column& column, const ColumnModes& modes);

// Writes the column's value as JsonConverter writes it inside a struct (an envelope field, a
// change event's before/after), under `modes`.
void WriteColumnJson(const Column& column, const ColumnModes& modes, JsonWriter& writer);

}  // namespace walrelay
