#include "pg/preflight.h"

namespace walrelay {

Status RunPreflight(ReplicationConnection& conn, const RelaySettings& settings,
                    PreflightReport& report) {
  auto server = conn.InspectServer();
  if (!server.ok()) return server.status();
  report.server = *server;
  // Only plain names: a regex entry names no table, and may match none until one is created.
  auto missing = conn.MissingTables(settings.PlainIncludedTables());
  if (!missing.ok()) return missing.status();
  report.missing_tables = *missing;
  auto slot = conn.InspectSlot(settings.slot_name);
  if (!slot.ok()) return slot.status();
  report.slot = *slot;

  if (server->wal_level != "logical") {
    return Status(ErrorCode::kWalLevel,
                  "wal_level is '" + server->wal_level +
                      "'; logical decoding needs wal_level=logical in postgresql.conf "
                      "(then restart PostgreSQL)");
  }
  if (!server->can_replicate) {
    return Status(ErrorCode::kNoReplicationRole,
                  "the user in 'database.user' lacks the REPLICATION privilege; "
                  "run ALTER ROLE <user> WITH REPLICATION");
  }
  if (!missing->empty()) {
    return Status(ErrorCode::kTableMissing,
                  "table " + missing->front() +
                      " (from 'table.include.list') does not exist in database '" +
                      settings.dbname + "'; create it (see docs/outbox.sql) or fix the key");
  }
  if (!slot->exists) {
    if (!settings.slot_create) {
      return Status(ErrorCode::kSlotMissing,
                    "replication slot '" + settings.slot_name +
                        "' does not exist and slot.create="
                        "false; create it with SELECT pg_create_logical_replication_slot('" +
                        settings.slot_name + "', '" + settings.plugin_name +
                        "') or set slot.create=true");
    }
    return Status::Ok();
  }
  const std::string name = "replication slot '" + settings.slot_name + "'";
  if (slot->plugin != settings.plugin_name) {
    return Status(ErrorCode::kSlotWrongPlugin,
                  name + " uses plugin '" + slot->plugin + "', not " + settings.plugin_name +
                      " as 'plugin.name' says; set plugin.name=" + slot->plugin +
                      ", drop the slot, or set 'slot.name' to another slot");
  }
  if (slot->database != settings.dbname) {
    return Status::Precondition(name + " belongs to database '" + slot->database + "', not '" +
                                settings.dbname + "'");
  }
  if (slot->wal_status == "lost") {
    const std::string lost = "changes after its confirmed LSN " + slot->confirmed_flush.ToString() +
                             " cannot be read from it";
    if (slot->invalidation_reason == "wal_removed") {
      return Status(ErrorCode::kSlotWalRemoved,
                    name +
                        " was invalidated (wal_status lost): PostgreSQL removed WAL it still "
                        "needed because it retained more than max_slot_wal_keep_size allows. Drop "
                        "and recreate it; " +
                        lost +
                        "; raise max_slot_wal_keep_size or keep the "
                        "relay from falling that far behind");
    }
    return Status(ErrorCode::kSlotInvalidated, name + " was invalidated (wal_status lost, " +
                                                   slot->invalidation_reason +
                                                   "): Drop and recreate it; " + lost);
  }
  if (slot->active) {
    return Status(ErrorCode::kSlotInUse, name + " is in use by another process (pid " +
                                             std::to_string(slot->active_pid.value_or(0)) + ")");
  }
  return Status::Ok();
}

}  // namespace walrelay
