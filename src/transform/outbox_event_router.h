// Outbox Event Router: Debezium's io.debezium.transforms.outbox.EventRouter for walrelay.
//
// Turns each INSERT into an outbox table into one Kafka record: the topic comes from the
// route-by column (rewritten by a Java regex and replacement), the key from the key column,
// the value from the payload column (optionally expanded from JSON text, optionally wrapped in
// an envelope with extra columns), and headers start with the event id. Deletes, truncates and
// updates are dropped (updates per `table.op.invalid.behavior`); records that are not row
// changes pass through unchanged. docs/event-router.md lists the keys, the record mapping and
// every deliberate difference from Debezium.
//
// All configuration is read and validated by MakeOutboxEventRouter(); a record-level failure
// is a kTransform Status naming the key or column, the table, the event id and the LSN.
// Apply() runs on one thread at a time (it keeps a small topic cache).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "config/properties.h"
#include "transform/connect_column.h"
#include "transform/transform.h"

namespace walrelay {

inline constexpr const char* kOutboxEventRouterType = "io.debezium.transforms.outbox.EventRouter";

inline constexpr const char* kDefaultRouteTopicRegex = "(?<routedByValue>.*)";
inline constexpr const char* kDefaultRouteTopicReplacement = "outbox.event.${routedByValue}";

// `props` is scoped to `transforms.<alias>.`: props.Get("route.by.field") reads
// `transforms.<alias>.route.by.field`. Every key the router accepts is marked as read.
// `modes` decide how column values and their Connect schemas are rendered (connect_column.h).
Result<std::unique_ptr<Transform>> MakeOutboxEventRouter(const std::string& alias,
                                                         const Properties& props,
                                                         const ColumnModes& modes = {});

}  // namespace walrelay
