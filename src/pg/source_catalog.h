// SourceCatalog: what the replication stream does not carry about the relayed tables, read from
// PostgreSQL's catalog and handed to the decoder as CatalogLookups (decode/decoder.h): each
// table's primary key and columns, and the names of the non-built-in types its columns use.
//
// Where the answers come from, so the relay's loop never waits long:
//   - a snapshot read on the worker thread that connects (SourceConnector), on the replication
//     connection before START_REPLICATION, for every table table.include.list includes; it is
//     read again at every (re)connect, when pgoutput also sends its Relation messages again.
//     The polling relay reads one for its table (ReadTableCatalog) at every connect of the
//     table's connection, when it describes the table to its decoder again;
//   - a table or type the snapshot lacks (created after the connect) is asked once, on a
//     separate, ordinary connection with short limits (kLiveConnectTimeoutSeconds to connect,
//     kLiveStatementTimeoutMs per query): at most a few seconds on the loop, once per new table.
//     If that fails the decoder uses what the stream says (pgoutput's replica identity flags as
//     the key), a warning says so, and the table is not asked again until the next connect.
// Every answer, also "not found", is kept, since the wal2json decoder asks on every update.
// Loop thread only (the decoder calls the lookups while decoding).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "config/relay_settings.h"
#include "decode/decoder.h"
#include "pg/pg_handles.h"

namespace walrelay {

class ReplicationConnection;

struct CatalogTable {
  std::vector<std::string> primary_key;  // column order
  std::vector<CatalogColumn> columns;    // column order
};

struct CatalogSnapshot {
  std::unordered_map<std::string, CatalogTable> tables;            // by "schema.table"
  std::map<std::pair<uint32_t, int32_t>, std::string> type_names;  // format_type(oid, typmod)
};

// Reads the snapshot for the tables `settings` includes, on a connection that has not started
// streaming yet.
Result<CatalogSnapshot> ReadCatalogSnapshot(ReplicationConnection& conn,
                                            const RelaySettings& settings);
// Reads the snapshot of one table, on an ordinary connection (the polled outbox table's, which
// has no replication stream to describe it): the same answers ReadCatalogSnapshot gives for it.
Result<CatalogSnapshot> ReadTableCatalog(PGconn* conn, const std::string& schema,
                                         const std::string& table);

inline constexpr int kLiveConnectTimeoutSeconds = 2;
inline constexpr int kLiveStatementTimeoutMs = 1000;

class SourceCatalog {
 public:
  explicit SourceCatalog(const RelaySettings& settings);
  ~SourceCatalog();

  // A new connect's snapshot replaces the answers kept so far.
  void Adopt(std::shared_ptr<const CatalogSnapshot> snapshot);
  // Lookups bound to this object, which must outlive the decoder holding them.
  CatalogLookups Lookups();

  std::optional<std::vector<std::string>> PrimaryKey(std::string_view schema,
                                                     std::string_view table);
  std::optional<std::vector<CatalogColumn>> Columns(std::string_view schema,
                                                    std::string_view table);
  std::optional<std::string> TypeName(uint32_t oid, int32_t typmod);

 private:
  // The snapshot's entry, or one asked of the live connection and kept; nullptr if unknown.
  const CatalogTable* Find(std::string_view schema, std::string_view table);
  Result<PgResultPtr> LiveQuery(const std::string& sql, const std::vector<std::string>& params);

  const RelaySettings& settings_;
  std::shared_ptr<const CatalogSnapshot> snapshot_;
  // Asked since the last connect: tables (nullopt = unknown or failed) and types.
  std::unordered_map<std::string, std::optional<CatalogTable>> asked_;
  std::map<std::pair<uint32_t, int32_t>, std::optional<std::string>> asked_types_;
  PgConnPtr live_;
};

}  // namespace walrelay
