// OutboxTable: the polled outbox table (source.mode=polling), on one ordinary PostgreSQL
// connection that also holds the lease.
//
// - TryTakeLease(): a session-level advisory lock named after the table, so one relay at a
//   time polls it (per-key order needs one reader: docs/polling.md). It is held until this
//   connection ends; PostgreSQL frees it when the process dies or the connection breaks, and a
//   standby takes it at its next try.
// - ReadNext(limit, max_bytes, in_flight): the oldest unpublished rows in polling.order.column's
//   order: every row (polling.mark=delete) or the rows whose mark column is NULL, but those
//   still in flight, bounded in rows and in bytes. One statement, one snapshot.
// - MarkPublished(rows): deletes them, or sets their mark column to now(), if they are still
//   the versions read; only rows whose records Kafka acknowledged are ever passed here
//   (polling/polling_relay.h).
//
// Open() reads the table's shape and catalog entry (what a slot's relay knows of it), and checks
// the table, the columns the keys name and the user's privileges on them, so a wrong key or a
// missing GRANT fails at start with the table, column and key in the message. Every
// call blocks (bounded by database.query.timeout.ms); errors are kConnection (the caller
// reconnects) unless the table itself is wrong (kConfig).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/relay_settings.h"
#include "pg/pg_handles.h"
#include "pg/source_catalog.h"
#include "polling/order_column.h"

namespace walrelay {

// The table's columns as pgoutput would describe them in a Relation message.
struct OutboxShape {
  uint32_t relation_oid = 0;
  std::string schema, table;
  struct Column {
    std::string name;
    uint32_t type_oid = 0;
    int32_t typmod = -1;
    bool key = false;  // part of the primary key
  };
  std::vector<Column> columns;  // attnum order, generated columns left out as pgoutput does
};

// Rows read by ReadNext: the table's columns (OutboxShape order, PostgreSQL's text output),
// then the inserting transaction's id, its commit time in microseconds since the Unix epoch,
// and the order column's value as text. One libpq result per row (single-row mode), so the rows
// a read leaves out of its byte bound are never held.
struct OutboxBatch {
  std::vector<PgResultPtr> row_results;
  int rows = 0;
  int columns = 0;  // the table's columns; the three below follow them
  // Rows may be waiting past these: the read returned as many as it asked for, or stopped at
  // its byte bound.
  bool more_may_wait = false;
  size_t bytes = 0;  // of every value kept

  int xid_field() const { return columns; }
  int commit_time_field() const { return columns + 1; }
  int order_field() const { return columns + 2; }
  const char* value(int row, int field) const {
    return PQgetvalue(row_results[static_cast<size_t>(row)].get(), 0, field);
  }
  int length(int row, int field) const {
    return PQgetlength(row_results[static_cast<size_t>(row)].get(), 0, field);
  }
  bool is_null(int row, int field) const {
    return PQgetisnull(row_results[static_cast<size_t>(row)].get(), 0, field) != 0;
  }
};

// How many rows a read asks the server for: `limit` (polling.batch.size), or with a byte bound
// (`max_bytes` > 0) as many as `average_row_bytes` says fit in it, plus one, since rows past
// the bound are received and dropped. kFirstReadRows when no row was read yet on this
// connection (average 0). Pure; tests/unit/polling_read_test.cc lists the cases.
inline constexpr int64_t kFirstReadRows = 16;
int64_t RowsToAsk(int64_t limit, int64_t max_bytes, double average_row_bytes);

// What a mark needs of a row it read: the row's order value, and the xmin of the version it
// read. A row updated since (another xmin) is left for the next read, which relays its new
// version: a mark never removes a version it did not relay.
struct RowMark {
  std::string order_value;
  std::string xmin;
};

class OutboxTable {
 public:
  static Result<std::unique_ptr<OutboxTable>> Open(const RelaySettings& settings);

  Result<bool> TryTakeLease();
  // The backend pid holding the lease, if any relay holds it (for `walrelay validate`).
  Result<std::optional<int>> LeaseHolder();
  // `in_flight`: order values of rows read before and not yet marked, left out. At most `limit`
  // rows, and with `max_bytes` > 0 no row once the values kept reach `max_bytes` (the first row
  // is always kept): what the read holds stays near the bound however large the rows are.
  Result<OutboxBatch> ReadNext(int64_t limit, int64_t max_bytes,
                               const std::vector<std::string>& in_flight);
  // `rows`: the rows to mark, as read (OutboxBatch::order_field and xid_field); a row whose
  // version is no longer the one read is not marked.
  // Returns how many rows it marked. A failure retrying cannot fix (polling/mark_failure.h) is
  // kPrecondition, naming the table, the mark and the cause; any other is kConnection.
  Result<int64_t> MarkPublished(const std::vector<RowMark>& rows);
  // Rows ever inserted into the table (and its partitions), as the statistics count them
  // (pg_stat_user_tables.n_tup_ins: rolled-back inserts too; about a second behind).
  Result<int64_t> InsertedRows();
  // Whether the connection is still up (a failed statement may have left it so).
  bool connected() const;

  const OutboxShape& shape() const { return shape_; }
  // What the catalog says of the table (keys, NOT NULL, type names), read with its shape, for
  // the relay's SourceCatalog: the decoder then renders the rows as it renders the slot's.
  std::shared_ptr<const CatalogSnapshot> catalog() const { return catalog_; }
  // Whether the commit times are the transactions' own (track_commit_timestamp=on); else
  // they are the time the rows were read.
  bool commit_times_tracked() const { return commit_times_tracked_; }
  // The server session's process id (pg_backend_pid(); a pooler tells libpq another one).
  int backend_pid() const;

 private:
  OutboxTable(const RelaySettings& settings, PgConnPtr conn);
  // Notes the server session's process id, and warns when a pooler stands between.
  Status CheckSession();
  Status Describe();
  // Stops the relay before it reads a row when polling.order.column cannot mark rows by its
  // value alone (polling/order_column.h), and logs what may break per-key order.
  Status CheckOrderColumn(const std::string& qualified);
  Result<PgResultPtr> Query(const std::string& sql, const std::vector<std::string>& params,
                            ExecStatusType expected);
  // The error of a statement that failed (`res` may be null), classified as Query says.
  Status Failure(const PGresult* res);

  const RelaySettings& settings_;
  PgConnPtr conn_;
  OutboxShape shape_;
  std::shared_ptr<const CatalogSnapshot> catalog_;
  std::string last_sqlstate_;  // of the latest failed statement, "" when the server gave none
  std::string order_type_;     // format_type of the order column, for the mark's array
  bool commit_times_tracked_ = false;
  bool partitioned_ = false;      // relkind 'p'
  int server_pid_ = 0;            // pg_backend_pid() once connected
  double average_row_bytes_ = 0;  // of the rows read on this connection, 0 before the first
  std::string read_sql_, mark_sql_;
};

}  // namespace walrelay
