// How the slot health sample (pg/slot_health.h) appears in GET /metrics and in the connector
// status of GET /connectors/<name>/status, in one place so both say the same.
//
// Metrics: walrelay_slot_retained_wal_bytes, walrelay_slot_safe_wal_size_bytes (absent while
// PostgreSQL reports NULL: no max_slot_wal_keep_size, or the slot is lost),
// walrelay_slot_wal_status{status} (1 for the current one of reserved, extended, unreserved,
// lost), walrelay_slot_invalidated, walrelay_slot_stalled and walrelay_slot_stalls_total. Nothing
// but the stall counter before the first successful read.
//
// Status: a "slot" object {"name", "exists", "active", "wal_status", "retained_wal_bytes",
// "safe_wal_size_bytes", "restart_lsn", "confirmed_flush_lsn", "invalidation_reason",
// "stalled", "read_at"}, fields PostgreSQL did not give left out; {"name"} alone before the
// first read.
#pragma once

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <string>

#include "pg/slot_health.h"
#include "status/metrics.h"

namespace walrelay {

void WriteSlotHealthMetrics(PrometheusText& m, const SlotHealthSample& sample, uint64_t stalls);

void WriteSlotHealthJson(rapidjson::Writer<rapidjson::StringBuffer>& w,
                         const std::string& slot_name, const SlotHealthSample& sample);

}  // namespace walrelay
