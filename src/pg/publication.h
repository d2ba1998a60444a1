// Publication: the pgoutput publication a relay reads (publication.name), set up as
// publication.autocreate.mode says, the way Debezium's PostgreSQL connector does it:
//   all_tables  missing: CREATE PUBLICATION ... FOR ALL TABLES (needs superuser); else used as is.
//   disabled    never created or changed: a missing one is kPublicationMissing.
//   filtered    missing: created FOR TABLE with the existing tables table.include.list matches;
//               present: ALTER PUBLICATION ... SET TABLE to those tables when they differ, so
//               the publication follows the include list (a FOR ALL TABLES one is left as is).
//   no_tables   missing: created without tables (tables are added by hand); else used as is.
// With skipped.operations set, a publication walrelay creates publishes only the operations it
// does not skip (WITH (publish = '...'), as Debezium 3.6 does), and filtered mode sets an
// existing one's operations to match (ALTER PUBLICATION ... SET (publish = ...)).
// Then every table table.include.list names plainly must be in the publication, else
// kPublicationLacksTable: its rows would never reach the relay. CREATE or ALTER refused for lack
// of privileges is kPublicationPrivilege; the messages name the publication, the table and the fix.
//
// Runs before the slot is created (rows are published from the publication's creation on) on
// the connecting worker thread, and from `walrelay validate` without changing anything.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/relay_settings.h"
#include "pg/replication_connection.h"

namespace walrelay {

// The operations a publication publishes (pg_publication's pubinsert ... pubtruncate).
struct PublishedOperations {
  bool insert = true;
  bool update = true;
  bool remove = true;
  bool truncate = true;

  // Whether changes with Debezium's op letter `op` reach the slot.
  bool Carries(char op) const;
  // "insert, update, delete, truncate", or "nothing".
  std::string ToString() const;
};

struct PublicationReport {
  bool existed = false;
  bool all_tables = false;          // FOR ALL TABLES
  std::vector<std::string> tables;  // "schema.table" it publishes (after any change), sorted
  PublishedOperations publishes;    // after any change
  std::string action;               // what was done, or with apply=false what run would do
};

const char* PublicationModeName(PublicationMode mode);

// The `publish` value an existing publication publishing `current` must be set to for
// skipped.operations, or nullopt when it needs no change (the key unset or none: any
// publication is fine, as the relay skips what it must).
std::optional<std::string> PublishChange(const SkippedOperations& skipped,
                                         const PublishedOperations& current);

// With `apply` false nothing is created or changed: `report.action` says what `run` would do,
// and the checks apply to the publication as it would be afterwards where that is known.
Status EnsurePublication(ReplicationConnection& conn, const RelaySettings& settings, bool apply,
                         PublicationReport& report);

}  // namespace walrelay
