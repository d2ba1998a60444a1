// Preflight: the checks a relay needs to pass before it streams, shared by `walrelay run`
// and `walrelay validate` so both say the same thing: wal_level, the REPLICATION privilege,
// the included tables, and the slot (plugin, database, invalidated, held by someone else).
// A missing slot is not a problem: the relay creates it.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/relay_settings.h"
#include "pg/replication_connection.h"

namespace walrelay {

struct PreflightReport {
  ServerInfo server;
  SlotInfo slot;
  std::vector<std::string> missing_tables;
};

// Fills `report` and returns the first problem found, as a one-line Status that says what is
// wrong and how to fix it.
Status RunPreflight(ReplicationConnection& conn, const RelaySettings& settings,
                    PreflightReport& report);

}  // namespace walrelay
