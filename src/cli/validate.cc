// `walrelay validate`: the checks `run` does before streaming, reported line by line.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "delivery/producer.h"
#include "pg/preflight.h"
#include "pg/publication.h"
#include "polling/outbox_table.h"
#include "transform/chain.h"

namespace walrelay {
namespace {

void Line(const char* label, const std::string& value) {
  std::printf("%-22s %s\n", label, value.c_str());
}

int Problem(const Status& status) {
  std::printf("PROBLEM: %s\n", status.ToString().c_str());
  std::fflush(stdout);
  return ExitCodeFor(status);
}

// The replication source: server, role, tables, slot and publication.
int ValidateSlot(const RelaySettings& settings) {
  auto conn = ReplicationConnection::Connect(settings);
  if (!conn.ok()) return Problem(conn.status());
  PreflightReport report;
  const Status preflight = RunPreflight(*conn, settings, report);
  if (report.server.server_version) {
    Line("server version:", std::to_string(report.server.server_version));
    Line("wal_level:", report.server.wal_level);
    Line("replication role:", report.server.can_replicate ? "yes" : "no");
    Line("current WAL LSN:", report.server.current_wal.ToString());
  }
  const std::vector<std::string> plain_tables = settings.PlainIncludedTables();
  for (const auto& t : settings.table_include) {
    if (std::find(plain_tables.begin(), plain_tables.end(), t) == plain_tables.end()) {
      Line("table:", t + " (a regex, matched against each row's table)");
      continue;
    }
    bool missing = false;
    for (const auto& m : report.missing_tables) missing |= m == t;
    Line("table:", t + (missing ? " (NOT FOUND)" : " (found)"));
  }
  const SlotInfo& slot = report.slot;
  if (!slot.exists) {
    Line("slot:", settings.slot_name + " (does not exist; `run` creates it with " +
                      settings.plugin_name + ")");
  } else {
    Line("slot:", settings.slot_name);
    Line("  plugin:", slot.plugin);
    Line("  database:", slot.database);
    Line("  active:",
         slot.active ? "yes (pid " + std::to_string(slot.active_pid.value_or(0)) + ")" : "no");
    Line("  confirmed LSN:", slot.confirmed_flush.ToString());
    Line("  wal_status:", slot.wal_status);
  }
  if (!preflight.ok()) return Problem(preflight);
  Line("plugin:", settings.plugin_name);
  if (settings.plugin_name == "pgoutput") {
    PublicationReport publication;
    const Status checked = EnsurePublication(*conn, settings, /*apply=*/false, publication);
    std::string tables = publication.all_tables ? "all tables" : "";
    for (const auto& t : publication.tables) tables += (tables.empty() ? "" : ", ") + t;
    Line("publication:", settings.publication_name + " (" +
                             (publication.existed ? "exists" : "does not exist") + "; " +
                             publication.action + "; publication.autocreate.mode=" +
                             PublicationModeName(settings.publication_mode) + ")");
    Line("  tables:", tables.empty() ? "none" : tables);
    Line("  operations:", publication.publishes.ToString());
    if (!checked.ok()) return Problem(checked);
  }

  return kExitOk;
}

// source.mode=polling: the table, its order and mark columns, the privileges, the lease.
int ValidatePolledTable(const RelaySettings& settings) {
  auto table = OutboxTable::Open(settings);
  if (!table.ok()) return Problem(table.status());
  const OutboxShape& shape = (*table)->shape();
  Line("source:", "polling " + shape.schema + "." + shape.table + " (source.mode=polling)");
  Line("  columns:", std::to_string(shape.columns.size()));
  Line("  order column:", settings.polling.order_column);
  Line("  marked by:", settings.polling.marks_by_delete()
                           ? std::string("delete")
                           : "setting column " + settings.polling.mark_column);
  Line("  commit times:", (*table)->commit_times_tracked()
                              ? "track_commit_timestamp=on (record timestamps are commit times)"
                              : "track_commit_timestamp=off (record timestamps are read times)");
  auto holder = (*table)->LeaseHolder();
  if (!holder.ok()) return Problem(holder.status());
  Line("  lease:", *holder ? "held by backend pid " + std::to_string(**holder) +
                                 " (another relay polls; `run` waits as a standby)"
                           : std::string("free"));
  return kExitOk;
}

}  // namespace

int ValidateCommand(const std::string& config_path) {
  auto config = LoadConnectorConfig(config_path);
  if (!config.ok()) return Problem(config.status());
  auto settings = ParseRelaySettings(*config);
  if (!settings.ok()) return Problem(settings.status());
  auto chain = TransformChain::Build(
      settings->properties,
      {settings->topic_prefix, settings->dbname, settings->name, settings->column_modes});
  if (!chain.ok()) return Problem(chain.status());
  Line("connector:", config->name);
  Line("transforms:", std::to_string(chain->size()));
  for (const auto& key : settings->properties.UnreadKeys())
    Line("unknown key:", key + " (ignored)");

  const int source = settings->source_mode == SourceMode::kPolling ? ValidatePolledTable(*settings)
                                                                   : ValidateSlot(*settings);
  if (source != kExitOk) return source;

  // The producer's config is checked locally; then one bounded metadata request tells whether
  // the brokers answer.
  auto producer = KafkaProducer::Create(
      settings->kafka, [](const DeliveryReport&) {}, {}, settings->ProvidedKafkaKeys());
  if (!producer.ok()) return Problem(producer.status());
  auto reachable = (*producer)->CheckBrokers(5000);
  if (!reachable.ok()) return Problem(reachable.status());
  Line("kafka:", *reachable);
  std::printf("OK\n");
  return kExitOk;
}

}  // namespace walrelay
