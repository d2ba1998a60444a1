// Publication: the pgoutput publication a relay reads (publication.name), set up as
// publication.autocreate.mode says, the way Debezium's PostgreSQL connector does it:
//   all_tables  missing: CREATE PUBLICATION ... FOR ALL TABLES (needs superuser); else used as is.
//   disabled    never created or changed: a missing one is kPublicationMissing.
//   filtered    missing: created FOR TABLE with the existing tables table.include.list matches;
//               present: ALTER PUBLICATION ... SET TABLE to those tables when they differ, so
//               the publication follows the include list (a FOR ALL TABLES one is left as is).
//   no_tables   missing: created without tables (tables are added by hand); else used as is.
// Then every table table.include.list names plainly must be in the publication, else
// kPublicationLacksTable: its rows would never reach the relay. CREATE or ALTER refused for lack
// of privileges is kPublicationPrivilege; the messages name the publication, the table and the fix.
//
// Runs before the slot is created (rows are published from the publication's creation on) on
// the connecting worker thread, and from `walrelay validate` without changing anything.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "config/relay_settings.h"
#include "pg/replication_connection.h"

namespace walrelay {

struct PublicationReport {
  bool existed = false;
  bool all_tables = false;          // FOR ALL TABLES
  std::vector<std::string> tables;  // "schema.table" it publishes (after any change), sorted
  std::string action;               // what was done, or with apply=false what run would do
};

const char* PublicationModeName(PublicationMode mode);

// With `apply` false nothing is created or changed: `report.action` says what `run` would do,
// and the checks apply to the publication as it would be afterwards where that is known.
Status EnsurePublication(ReplicationConnection& conn, const RelaySettings& settings, bool apply,
                         PublicationReport& report);

}  // namespace walrelay
