// RelaySettings: the typed, validated configuration of one relay, read from a connector
// config with Debezium's key names and defaults (docs/configuration.md lists them all).
#pragma once

#include <cstdint>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/connector_config.h"
#include "config/skipped_operations.h"
#include "delivery/transaction_boundary.h"
#include "transform/column_modes.h"

namespace walrelay {

// Where the REST API listens: `listeners`, http://host:port or https://host:port as in Kafka
// Connect, and for https the PEM files of `listeners.https.ssl.*`.
struct ListenerAddress {
  std::string host = "127.0.0.1";  // an IP address; loopback unless configured otherwise
  uint16_t port = 8083;            // 0 = any free port (the log says which)
  bool https = false;
  std::string certificate_path;  // listeners.https.ssl.certificate.location (chain, leaf first)
  std::string key_path;          // listeners.https.ssl.key.location (unencrypted)
  // rest.max.connections: connections served at once; more are answered 503 and closed.
  int max_connections = 64;

  const char* scheme() const { return https ? "https" : "http"; }
  // 127.0.0.0/8 or ::1: only processes of this host can connect.
  bool IsLoopback() const;
};

// Who may use the REST API's endpoints that change the relay (pause, resume, restart); see
// status/rest_access.h. Values often come through ${file:...}; they are never logged.
struct RestAuthSettings {
  std::string token;           // rest.auth.token: "Authorization: Bearer <token>"; "" = none
  std::string basic_username;  // rest.auth.basic.username; "" = no basic auth
  std::string basic_password;  // rest.auth.basic.password
  // rest.allowed.hosts: Host header names a loopback listener accepts besides localhost,
  // 127.0.0.1 and [::1] (lower case, without port).
  std::vector<std::string> allowed_hosts;

  bool HasCredentials() const { return !token.empty() || !basic_username.empty(); }
};

// Bytes of key + value + topic in flight to Kafka, at most, unless max.queue.size.in.bytes
// says otherwise. librdkafka holds about twice that (its copies and request buffers); on
// loopback a quarter megabyte keeps up with the walsender, see docs/performance.md.
inline constexpr int64_t kDefaultMaxQueueBytes = 256 * 1024;

// publication.autocreate.mode (pgoutput only), as Debezium defines it: what walrelay does
// about the publication named by publication.name (see pg/publication.h).
enum class PublicationMode {
  kAllTables,  // create it FOR ALL TABLES when missing
  kDisabled,   // never create or change it; it must exist
  kFiltered,   // create it for table.include.list's tables, and keep it at that list
  kNoTables,   // create it without tables when missing; tables are added by hand
};

// exactly.once.support and the keys that go with it (docs/exactly-once.md). Parsed and
// validated whenever present; `enabled` says whether the relay is asked to deliver exactly once.
enum class ExactlyOnceSupport { kOff, kRequested, kRequired };

struct ExactlyOnceSettings {
  ExactlyOnceSupport support = ExactlyOnceSupport::kOff;  // unset: at least once
  TransactionBoundaryLimits boundary;                     // transaction.boundary[.*]
  // transactional.id; default walrelay-<name> (delivery/transactional_ids.h)
  std::string transactional_id;

  bool enabled() const { return support != ExactlyOnceSupport::kOff; }
};

// Where the relay keeps its source position outside the process, in both delivery modes
// (docs/architecture.md "The durable source position").
struct OffsetStorageSettings {
  // offsets.storage.topic; required with exactly.once.support, else walrelay-offsets-<name>
  std::string topic;
  int32_t partitions = 1;           // offsets.storage.partitions
  int16_t replication_factor = -1;  // offsets.storage.replication.factor; -1: broker's
  // offset.flush.interval.ms: at least once, how often a newer confirmed position is written
  std::chrono::milliseconds flush_interval{60000};
};

// The offsets topic a connector named `name` uses when offsets.storage.topic is not set:
// "walrelay-offsets-<name>", characters Kafka refuses in topic names replaced by '_'.
std::string DefaultOffsetsTopic(const std::string& name);

// source.mode: where outbox rows come from. Replication (the default) streams a logical
// replication slot; polling reads the outbox table with ordinary queries and marks the rows
// Kafka acknowledged (polling/polling_relay.h, docs/polling.md).
enum class SourceMode { kReplication, kPolling };

// The polling.* keys (source.mode=polling).
struct PollingSettings {
  std::string schema, table;         // table.include.list's one table
  std::string order_column = "seq";  // polling.order.column: rows are relayed in its order
  int64_t interval_ms = 100;  // polling.interval.ms: the wait after a batch that was not full
  int64_t batch_size = 500;   // polling.batch.size: rows read, relayed and marked at once
  // polling.mark: "" = delete (the default), else the timestamp column set to the publish time
  // (polling.mark=column:<name>); rows where it is NULL are the unpublished ones.
  std::string mark_column;
  int64_t lease_retry_ms = 2000;  // polling.lease.retry.ms: how often a standby asks for the lease
  // polling.unread.check.ms: how often the table's insert counter is compared with the rows
  // read (polling/unread_inserts.h); 0 = never
  int64_t unread_check_ms = 60000;

  bool marks_by_delete() const { return mark_column.empty(); }
};

struct RelaySettings {
  std::string name;
  SourceMode source_mode = SourceMode::kReplication;
  PollingSettings polling;
  ListenerAddress listener;
  RestAuthSettings rest_auth;
  std::string log_level;                 // log.level; "" = unset (--log-level or info)
  std::string log_format = "text";       // log.format: text or json
  int64_t progress_interval_ms = 60000;  // log.progress.interval.ms; 0 = no progress lines

  // PostgreSQL, as libpq keywords -> values (host, port, user, password, dbname, ssl*).
  std::vector<std::pair<std::string, std::string>> pg_params;
  std::string dbname;
  std::string slot_name;
  std::string plugin_name = "pgoutput";              // plugin.name: the slot's output plugin
  std::string publication_name = "dbz_publication";  // publication.name (pgoutput)
  PublicationMode publication_mode = PublicationMode::kAllTables;
  std::vector<std::string> table_include;  // anchored regexes over "schema.table"
  std::vector<std::regex> table_include_regex;
  // message.prefix.include.list / .exclude.list: which logical decoding message prefixes are
  // relayed, case-insensitive regexes matching the whole prefix; at most one list is set.
  std::vector<std::regex> message_prefix_include;
  std::vector<std::regex> message_prefix_exclude;
  std::string topic_prefix;
  int64_t status_update_interval_ms = 10000;
  int64_t max_queue_size = 8192;
  int64_t max_queue_size_bytes = kDefaultMaxQueueBytes;  // 0 = no byte limit
  int64_t shutdown_timeout_ms = 30000;
  bool slot_drop_on_stop = false;
  bool slot_create = true;
  // slot.failover (Debezium's key, PostgreSQL 17+): a slot walrelay creates is a failover slot,
  // which PostgreSQL synchronizes to standbys with sync_replication_slots=on.
  bool slot_failover = false;
  // slot.recreate.when.missing: once this relay has streamed from the slot, a missing slot
  // stops it (rows since its last confirmed LSN may be lost) unless this allows re-creating it.
  bool slot_recreate_when_missing = false;

  // Connecting and watching the replication connection.
  int64_t connect_timeout_ms = 10000;  // database.connect.timeout.ms
  int64_t query_timeout_ms = 30000;    // database.query.timeout.ms: each setup query; 0 = none
  // database.replication.receive.timeout.ms: with nothing received for half of it a status
  // update asks the server to answer; with nothing for all of it the connection counts as
  // lost. 0 = never.
  int64_t receive_timeout_ms = 75000;

  // Reconnecting to PostgreSQL and waiting as a standby.
  int64_t reconnect_backoff_initial_ms = 500;
  int64_t reconnect_backoff_max_ms = 30000;
  int64_t errors_max_retries = -1;   // consecutive failed reconnects before giving up; -1 = never
  int64_t standby_retry_ms = 10000;  // slot.retry.delay.ms: how often a standby checks the slot

  // Slot health (pg/slot_health.h): how often pg_replication_slots is read (0 = never), and
  // how long the server may hold the stream back for synchronized_standby_slots unreported.
  int64_t slot_health_interval_ms = 10000;  // slot.health.interval.ms
  int64_t slot_stall_warn_ms = 30000;       // slot.stall.warn.ms

  // Kafka Connect's error policy for records the chain or Kafka cannot handle.
  bool errors_tolerance_all = false;
  std::string dead_letter_topic;  // errors.deadletterqueue.topic.name; "" = none
  bool dead_letter_context_headers = true;
  int64_t errors_retry_timeout_ms = -1;  // -1 or 0 = retry retriable Kafka failures until delivered

  // Change events (no transform or before one): `tombstones.on.delete` sends a null-value
  // record with the delete's key after each delete; the handling modes render column values.
  bool tombstones_on_delete = true;
  ColumnModes column_modes;
  // skipped.operations: row operations not relayed; when given, a publication walrelay
  // creates publishes only the others (config/skipped_operations.h).
  SkippedOperations skipped_operations;

  ExactlyOnceSettings exactly_once;
  OffsetStorageSettings offsets;

  // librdkafka properties (the `kafka.` keys without the prefix, plus walrelay's defaults).
  std::map<std::string, std::string> kafka;

  // The whole config, for the transform chain and unknown-key warnings.
  Properties properties;
  // Keys whose values came from ${env:...} or ${file:...} (ConnectorConfig::provider_keys).
  std::set<std::string> provider_keys;
  // The kafka.* keys among provider_keys, without the prefix (as in `kafka`).
  std::set<std::string> ProvidedKafkaKeys() const;

  bool IncludesTable(const std::string& qualified_table) const;
  // Whether transactional logical decoding messages with this prefix are relayed.
  bool IncludesMessagePrefix(const std::string& prefix) const;
  // wal2json's add-tables value when every include entry is a plain name, else "".
  std::string Wal2JsonAddTables() const;
  // The include entries that are plain schema.table names rather than patterns.
  std::vector<std::string> PlainIncludedTables() const;
};

Result<RelaySettings> ParseRelaySettings(const ConnectorConfig& config);

// Debezium connector keys walrelay accepts but that change nothing here (see
// docs/configuration.md); they are not reported as unknown.
bool IsAcceptedWithoutEffect(const std::string& key);

}  // namespace walrelay
