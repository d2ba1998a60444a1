// OutboxTable: the polled outbox table (source.mode=polling), on one ordinary PostgreSQL
// connection that also holds the lease.
//
// - TryTakeLease(): a session-level advisory lock named after the table, so one relay at a
//   time polls it (per-key order needs one reader: docs/polling.md). It is held until this
//   connection ends; PostgreSQL frees it when the process dies or the connection breaks, and a
//   standby takes it at its next try.
// - ReadNext(limit, in_flight): the oldest unpublished rows in polling.order.column's order:
//   every row (polling.mark=delete) or the rows whose mark column is NULL, but those still in
//   flight. One statement, one snapshot.
// - MarkPublished(rows): deletes them, or sets their mark column to now(); only rows whose
//   records Kafka acknowledged are ever passed here (polling/polling_relay.h).
//
// Open() checks the table, the columns the keys name and the user's privileges on them, so a
// wrong key or a missing GRANT fails at start with the table, column and key in the message. Every
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
// and the order column's value as text.
struct OutboxBatch {
  PgResultPtr result;
  int rows = 0;
  int columns = 0;  // the table's columns; the three below follow them

  int xid_field() const { return columns; }
  int commit_time_field() const { return columns + 1; }
  int order_field() const { return columns + 2; }
};

class OutboxTable {
 public:
  static Result<std::unique_ptr<OutboxTable>> Open(const RelaySettings& settings);

  Result<bool> TryTakeLease();
  // The backend pid holding the lease, if any relay holds it (for `walrelay validate`).
  Result<std::optional<int>> LeaseHolder();
  // `in_flight`: order values of rows read before and not yet marked, left out.
  Result<OutboxBatch> ReadNext(int64_t limit, const std::vector<std::string>& in_flight);
  // `order_values`: the order column's values (OutboxBatch::order_field) of the rows to mark.
  // Returns how many rows it marked. A failure retrying cannot fix (polling/mark_failure.h) is
  // kPrecondition, naming the table, the mark and the cause; any other is kConnection.
  Result<int64_t> MarkPublished(const std::vector<std::string>& order_values);
  // Whether the connection is still up (a failed statement may have left it so).
  bool connected() const;

  const OutboxShape& shape() const { return shape_; }
  // Whether the commit times are the transactions' own (track_commit_timestamp=on); else
  // they are the time the rows were read.
  bool commit_times_tracked() const { return commit_times_tracked_; }
  int backend_pid() const;

 private:
  OutboxTable(const RelaySettings& settings, PgConnPtr conn);
  Status Describe();
  // Stops the relay before it reads a row when polling.order.column cannot mark rows by its
  // value alone (polling/order_column.h), and logs what may break per-key order.
  Status CheckOrderColumn(const std::string& qualified);
  Result<PgResultPtr> Query(const std::string& sql, const std::vector<std::string>& params,
                            ExecStatusType expected);

  const RelaySettings& settings_;
  PgConnPtr conn_;
  OutboxShape shape_;
  std::string last_sqlstate_;  // of the latest failed statement, "" when the server gave none
  std::string order_type_;     // format_type of the order column, for the mark's array
  bool commit_times_tracked_ = false;
  std::string read_sql_, mark_sql_;
};

}  // namespace walrelay
