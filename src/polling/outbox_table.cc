#include "polling/outbox_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string_view>

#include "pg/plain_connection.h"
#include "polling/mark_failure.h"

namespace walrelay {
namespace {

// The advisory lock's first key: "walr". The second is hashtext('<schema>.<table>').
constexpr const char* kLeaseClass = "2002873458";

std::string Ident(PGconn* conn, const std::string& name) {
  PgBufferPtr quoted(PQescapeIdentifier(conn, name.c_str(), name.size()));
  if (quoted) return std::string(quoted.get());
  // libpq failed (out of memory, or bytes invalid in the client encoding): PostgreSQL's own
  // rule, embedded quotes doubled, so a name never reaches the statement unescaped.
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// A PostgreSQL array literal of `values`, each quoted, for `$1::<type>[]`.
std::string ArrayLiteral(const std::vector<std::string>& values) {
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : values[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

// Microseconds since the Unix epoch of a timestamptz expression, exact on every major (extract
// gives a double before PostgreSQL 14).
std::string EpochMicros(const std::string& ts) {
  return "(extract(epoch from date_trunc('second', " + ts +
         "))::bigint * 1000000 + extract(microseconds from " + ts + ")::bigint % 1000000)";
}

}  // namespace

Result<std::unique_ptr<OutboxTable>> OutboxTable::Open(const RelaySettings& settings) {
  const std::string timeout =
      std::to_string(std::max<int64_t>(1, settings.connect_timeout_ms / 1000));
  PgParams overrides = {{"connect_timeout", timeout}, {"application_name", "walrelay-polling"}};
  auto conn = ConnectPlain(settings.pg_params, overrides, "polling the outbox table");
  if (!conn.ok()) return conn.status();
  std::unique_ptr<OutboxTable> table(new OutboxTable(settings, std::move(conn).value()));
  // Set once connected, not as the `options` startup parameter, which pgbouncer refuses
  // ("unsupported startup parameter: options") unless told to ignore it.
  if (settings.query_timeout_ms > 0) {
    auto set = table->Query("SELECT set_config('statement_timeout', $1, false)",
                            {std::to_string(settings.query_timeout_ms)}, PGRES_TUPLES_OK);
    if (!set.ok()) return set.status();
  }
  WALRELAY_RETURN_IF_ERROR(table->CheckSession());
  WALRELAY_RETURN_IF_ERROR(table->Describe());
  return table;
}

Status OutboxTable::CheckSession() {
  auto pid = Query("SELECT pg_backend_pid()", {}, PGRES_TUPLES_OK);
  if (!pid.ok()) return pid.status();
  server_pid_ = std::stoi(PQgetvalue(pid->get(), 0, 0));
  if (server_pid_ != PQbackendPID(conn_.get())) {
    // A pooler answers the startup with a process id of its own: the statements run in a
    // server session libpq was not told about.
    spdlog::warn("the connection polling {}.{} goes through a connection pooler or proxy (the "
                 "server session is process {}, the connection was told {}): the lease is a "
                 "session-level lock, so the pooler must give this connection one server "
                 "session for its lifetime (pgbouncer pool_mode=session); in transaction or "
                 "statement mode two relays can both poll, publishing every row twice "
                 "(docs/polling.md, \"Poolers\")",
                 settings_.polling.schema, settings_.polling.table, server_pid_,
                 PQbackendPID(conn_.get()));
  }
  return Status::Ok();
}

OutboxTable::OutboxTable(const RelaySettings& settings, PgConnPtr conn)
    : settings_(settings), conn_(std::move(conn)) {}

int OutboxTable::backend_pid() const { return server_pid_; }

bool OutboxTable::connected() const { return PQstatus(conn_.get()) == CONNECTION_OK; }

Result<PgResultPtr> OutboxTable::Query(const std::string& sql,
                                       const std::vector<std::string>& params,
                                       ExecStatusType expected) {
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p.c_str());
  PgResultPtr res(PQexecParams(conn_.get(), sql.c_str(), static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0));
  if (!res || PQresultStatus(res.get()) != expected) return Failure(res.get());
  return res;
}

Status OutboxTable::Failure(const PGresult* res) {
  std::string why = res ? PQresultErrorMessage(res) : PgErrorText(conn_.get());
  while (!why.empty() && why.back() == '\n') why.pop_back();
  if (why.empty()) why = PgErrorText(conn_.get());
  // SQLSTATE class 42 (a table that is not there, a privilege missing) does not pass by
  // retrying; anything else (a lost connection, a timeout, a conflict) may. So may a column
  // that went (42703) after the table's columns were read: reconnecting reads them again, and
  // Open() says so if a column the keys name is the one that went.
  const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  last_sqlstate_ = state != nullptr ? state : "";
  if (state != nullptr && std::string_view(state).starts_with("42") &&
      std::string_view(state) != "42703") {
    return Status::Config("outbox table " + settings_.polling.schema + "." +
                          settings_.polling.table + ": " + why);
  }
  return Status::Connection("outbox table " + settings_.polling.schema + "." +
                            settings_.polling.table + ": " + why);
}

Status OutboxTable::CheckOrderColumn(const std::string& qualified) {
  const PollingSettings& polling = settings_.polling;
  // What polling/order_column.h decides on: NOT NULL, a valid unique index on the column alone
  // (no other key column, no expression, no predicate), an identity or nextval() default, and
  // that sequence's cache.
  auto facts = Query(
      "SELECT a.attnotnull,"
      "       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisunique"
      "               AND i.indisvalid AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum"
      "               AND i.indexprs IS NULL AND i.indpred IS NULL),"
      "       a.attidentity <> '' OR EXISTS (SELECT 1 FROM pg_attrdef d WHERE d.adrelid = c.oid"
      "               AND d.adnum = a.attnum AND pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%'),"
      "       coalesce((SELECT s.seqcache FROM pg_sequence s WHERE s.seqrelid ="
      "               pg_get_serial_sequence(format('%I.%I', n.nspname, c.relname), a.attname)"
      "               ::regclass), 0) "
      "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
      "JOIN pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped "
      "WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3",
      {polling.schema, polling.table, polling.order_column}, PGRES_TUPLES_OK);
  if (!facts.ok()) return facts.status();
  PGresult* res = facts->get();
  if (PQntuples(res) != 1)
    return Status::Internal("order column " + polling.order_column + " of " + qualified +
                            " vanished from the catalog");
  const OrderColumnVerdict verdict =
      walrelay::CheckOrderColumn({qualified, polling.order_column, PQgetvalue(res, 0, 0)[0] == 't',
                                  PQgetvalue(res, 0, 1)[0] == 't', PQgetvalue(res, 0, 2)[0] == 't',
                                  std::stoll(PQgetvalue(res, 0, 3)), partitioned_});
  for (const std::string& warning : verdict.warnings) spdlog::warn("{}", warning);
  return verdict.error;
}

Status OutboxTable::Describe() {
  const PollingSettings& polling = settings_.polling;
  const std::string qualified = polling.schema + "." + polling.table;
  shape_.schema = polling.schema;
  shape_.table = polling.table;
  // Columns as pgoutput's Relation message lists them: live, not generated (attgenerated
  // exists from PostgreSQL 12 on, the oldest major walrelay supports is 13).
  auto columns = Query(
      "SELECT c.oid, a.attname, a.atttypid, a.atttypmod, "
      "       coalesce(a.attnum = ANY(i.indkey), false), format_type(a.atttypid, a.atttypmod), "
      "       a.attnotnull, c.relkind "
      "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
      "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
      "     AND a.attgenerated = '' "
      "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary "
      "WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') ORDER BY a.attnum",
      {polling.schema, polling.table}, PGRES_TUPLES_OK);
  if (!columns.ok()) return columns.status();
  PGresult* res = columns->get();
  if (PQntuples(res) == 0) {
    return Status::Config("'table.include.list': table " + qualified +
                          " does not exist (or this user cannot see it); source.mode=polling "
                          "reads it");
  }
  std::string mark_type;
  bool mark_not_null = false;
  for (int row = 0; row < PQntuples(res); ++row) {
    OutboxShape::Column column;
    shape_.relation_oid = static_cast<uint32_t>(std::stoul(PQgetvalue(res, row, 0)));
    partitioned_ = PQgetvalue(res, row, 7)[0] == 'p';
    column.name = PQgetvalue(res, row, 1);
    column.type_oid = static_cast<uint32_t>(std::stoul(PQgetvalue(res, row, 2)));
    column.typmod = std::stoi(PQgetvalue(res, row, 3));
    column.key = PQgetvalue(res, row, 4)[0] == 't';
    if (column.name == polling.order_column) order_type_ = PQgetvalue(res, row, 5);
    if (column.name == polling.mark_column) {
      mark_type = PQgetvalue(res, row, 5);
      mark_not_null = PQgetvalue(res, row, 6)[0] == 't';
    }
    shape_.columns.push_back(std::move(column));
  }
  if (order_type_.empty()) {
    return Status::Config("'polling.order.column': table " + qualified + " has no column '" +
                          polling.order_column +
                          "' (rows are relayed in its order: add an identity column, see "
                          "docs/outbox-polling.sql)");
  }
  WALRELAY_RETURN_IF_ERROR(CheckOrderColumn(qualified));
  auto catalog = ReadTableCatalog(conn_.get(), polling.schema, polling.table);
  if (!catalog.ok()) return catalog.status();
  catalog_ = std::make_shared<const CatalogSnapshot>(std::move(catalog).value());
  if (!polling.marks_by_delete()) {
    if (mark_type.empty()) {
      return Status::Config("'polling.mark': table " + qualified + " has no column '" +
                            polling.mark_column + "'");
    }
    if (!mark_type.starts_with("timestamp") || mark_not_null) {
      return Status::Config("'polling.mark': column '" + polling.mark_column + "' of " + qualified +
                            " must be a nullable timestamp or timestamptz column, it is " +
                            mark_type + (mark_not_null ? " NOT NULL" : ""));
    }
  }

  // A missing privilege said at start, with the statement that grants it, rather than at the
  // first mark, after records went out.
  const std::string mark_privilege =
      polling.marks_by_delete() ? "DELETE" : "UPDATE (" + polling.mark_column + ")";
  auto privileges =
      Query("SELECT current_user, has_table_privilege($1, 'SELECT'), " +
                std::string(polling.marks_by_delete() ? "has_table_privilege($1, 'DELETE')"
                                                      : "has_column_privilege($1, $2, 'UPDATE')"),
            polling.marks_by_delete() ? std::vector<std::string>{qualified}
                                      : std::vector<std::string>{qualified, polling.mark_column},
            PGRES_TUPLES_OK);
  if (!privileges.ok()) return privileges.status();
  const std::string user = PQgetvalue(privileges->get(), 0, 0);
  for (int field : {1, 2}) {
    if (PQgetvalue(privileges->get(), 0, field)[0] == 't') continue;
    const std::string missing = field == 1 ? "SELECT" : mark_privilege;
    return Status::Config(
        "user '" + user + "' lacks " + missing + " on " + qualified +
        ", which source.mode=polling needs (" +
        (field == 1 ? "to read it"
                    : "polling.mark=" + std::string(polling.marks_by_delete()
                                                        ? "delete"
                                                        : "column:" + polling.mark_column)) +
        "): GRANT SELECT, " + mark_privilege + " ON " + qualified + " TO " + user);
  }

  auto tracked = Query("SELECT current_setting('track_commit_timestamp')", {}, PGRES_TUPLES_OK);
  if (!tracked.ok()) return tracked.status();
  commit_times_tracked_ = std::string(PQgetvalue(tracked->get(), 0, 0)) == "on";

  PGconn* conn = conn_.get();
  // A partitioned table holds no rows of its own: its partitions' rows are read and marked
  // through it. Any other table is read alone, without tables that inherit from it.
  const std::string table = (partitioned_ ? "" : "ONLY ") + Ident(conn, polling.schema) + "." +
                            Ident(conn, polling.table);
  // Qualified: the order column's text copy at the end of the select list has its name too.
  const std::string order = "o." + Ident(conn, polling.order_column);
  std::string select;
  for (const auto& column : shape_.columns) select += "o." + Ident(conn, column.name) + ", ";
  // A row's transaction commit time when PostgreSQL keeps it (NULL for a frozen xmin);
  // otherwise, and then, when the statement read it.
  const std::string commit_time =
      commit_times_tracked_ ? "coalesce(pg_xact_commit_timestamp(o.xmin), statement_timestamp())"
                            : "statement_timestamp()";
  select += "o.xmin::text::bigint, " + EpochMicros(commit_time) + ", " + order + "::text";
  // Rows still in flight ($2) are left out: their records are on their way to Kafka.
  const std::string in_flight = "NOT (" + order + " = ANY($2::" + order_type_ + "[]))";
  const std::string unpublished =
      polling.marks_by_delete()
          ? in_flight
          : "o." + Ident(conn, polling.mark_column) + " IS NULL AND " + in_flight;
  read_sql_ = "SELECT " + select + " FROM " + table + " AS o WHERE " + unpublished + " ORDER BY " +
              order + " LIMIT $1";
  // The rows read, each by its order value and the xmin of the version read: a row updated
  // since then keeps its new version, which the next read relays.
  const std::string chosen =
      " AS o USING unnest($1::" + order_type_ + "[], $2::xid[]) AS m(value, version) WHERE o." +
      Ident(conn, polling.order_column) + " = m.value AND o.xmin = m.version";
  mark_sql_ = polling.marks_by_delete()
                  ? "DELETE FROM " + table + chosen
                  : "UPDATE " + table + " AS o SET " + Ident(conn, polling.mark_column) +
                        " = now() FROM unnest($1::" + order_type_ +
                        "[], $2::xid[]) AS m(value, version) WHERE o." +
                        Ident(conn, polling.order_column) +
                        " = m.value AND o.xmin = m.version AND o." +
                        Ident(conn, polling.mark_column) + " IS NULL";
  return Status::Ok();
}

Result<bool> OutboxTable::TryTakeLease() {
  // With the lock, the session that took it: a pooler in transaction mode may run the next
  // statement in another server session, which then polls without holding anything.
  // First, whether this server session holds the lock already: this connection never took
  // it, so another client of a pooler did, in the session the pooler now lends this one, and
  // the lock (which a session may take again) would let both poll.
  auto res = Query(std::string("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks WHERE locktype "
                               "= 'advisory' AND pid = pg_backend_pid() AND classid = ") +
                       kLeaseClass +
                       "::bigint::oid AND objid = hashtext($1)::oid AND objsubid = 2 AND "
                       "granted), pg_try_advisory_lock(" +
                       kLeaseClass + ", hashtext($1)), pg_backend_pid()",
                   {settings_.polling.schema + "." + settings_.polling.table}, PGRES_TUPLES_OK);
  if (!res.ok()) return res.status();
  const int session = std::stoi(PQgetvalue(res->get(), 0, 2));
  if (std::string(PQgetvalue(res->get(), 0, 0)) == "t") {
    return Status::Config(
        "server session " + std::to_string(session) + " held the lease on " +
        settings_.polling.schema + "." + settings_.polling.table +
        " before this relay asked for it: a connection pooler in transaction or statement mode "
        "lent this relay the server session another relay polls in, and a session-level lock "
        "cannot keep the two apart. Connect directly, or through a pooler in session mode "
        "(pgbouncer pool_mode=session)");
  }
  if (std::string(PQgetvalue(res->get(), 0, 1)) != "t") return false;
  // And the session of the statement after it: a pooler moving statements between sessions
  // shows in one of the two comparisons, whichever way it hands them out.
  auto next = Query("SELECT pg_backend_pid()", {}, PGRES_TUPLES_OK);
  if (!next.ok()) return next.status();
  const int next_session = std::stoi(PQgetvalue(next->get(), 0, 0));
  if (session != server_pid_ || next_session != session) {
    return Status::Config(
        "the lease on " + settings_.polling.schema + "." + settings_.polling.table +
        " was taken in server session " + std::to_string(session) +
        ", not in this connection's session " + std::to_string(server_pid_) +
        ": a connection pooler in transaction or statement mode is between the relay and "
        "PostgreSQL, and a session-level lock cannot keep a second relay from polling there. "
        "Connect directly, or through a pooler in session mode (pgbouncer pool_mode=session)");
  }
  return true;
}

Result<int64_t> OutboxTable::InsertedRows() {
  // The table itself, and its partitions when it has any (pg_partition_tree gives no row for
  // a table that is not partitioned).
  auto res = Query("SELECT coalesce(sum(s.n_tup_ins), 0)::bigint FROM pg_stat_user_tables s "
                   "WHERE s.relid = $1::regclass "
                   "OR s.relid IN (SELECT relid FROM pg_partition_tree($1::regclass))",
                   {Ident(conn_.get(), settings_.polling.schema) + "." +
                    Ident(conn_.get(), settings_.polling.table)},
                   PGRES_TUPLES_OK);
  if (!res.ok()) return res.status();
  return static_cast<int64_t>(std::stoll(PQgetvalue(res->get(), 0, 0)));
}

Result<std::optional<int>> OutboxTable::LeaseHolder() {
  auto res =
      Query(std::string("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND classid = ") +
                kLeaseClass +
                " AND objid = (hashtext($1)::bigint & 4294967295)::text::oid AND objsubid = 2",
            {settings_.polling.schema + "." + settings_.polling.table}, PGRES_TUPLES_OK);
  if (!res.ok()) return res.status();
  if (PQntuples(res->get()) == 0) return std::optional<int>();
  return std::optional<int>(std::stoi(PQgetvalue(res->get(), 0, 0)));
}

int64_t RowsToAsk(int64_t limit, int64_t max_bytes, double average_row_bytes) {
  if (max_bytes <= 0) return limit;
  if (average_row_bytes <= 0) return std::min(limit, kFirstReadRows);
  const double fit = static_cast<double>(max_bytes) / average_row_bytes;
  if (fit >= static_cast<double>(limit)) return limit;
  return std::min(limit, static_cast<int64_t>(fit) + 1);
}

Result<OutboxBatch> OutboxTable::ReadNext(int64_t limit, int64_t max_bytes,
                                          const std::vector<std::string>& in_flight) {
  const int64_t asked = RowsToAsk(limit, max_bytes, average_row_bytes_);
  const std::string limit_text = std::to_string(asked);
  const std::string excluded = ArrayLiteral(in_flight);
  const char* values[] = {limit_text.c_str(), excluded.c_str()};
  PGconn* conn = conn_.get();
  if (!PQsendQueryParams(conn, read_sql_.c_str(), 2, nullptr, values, nullptr, nullptr, 0))
    return Failure(nullptr);
  // One result per row: the rows past the byte bound are received and freed one by one.
  PQsetSingleRowMode(conn);
  OutboxBatch batch;
  batch.columns = static_cast<int>(shape_.columns.size());
  int64_t received = 0;
  size_t received_bytes = 0;
  PgResultPtr failed;
  while (PgResultPtr res{PQgetResult(conn)}) {
    const ExecStatusType status = PQresultStatus(res.get());
    if (status == PGRES_TUPLES_OK && PQntuples(res.get()) == 0) continue;  // the end of the rows
    if (status != PGRES_SINGLE_TUPLE) {
      if (!failed) failed = std::move(res);  // the rest is read so the connection stays usable
      continue;
    }
    ++received;
    size_t row_bytes = 0;
    for (int field = 0; field < PQnfields(res.get()); ++field)
      row_bytes += static_cast<size_t>(PQgetlength(res.get(), 0, field));
    received_bytes += row_bytes;
    if (max_bytes > 0 && batch.rows > 0 && batch.bytes >= static_cast<size_t>(max_bytes)) {
      batch.more_may_wait = true;
      continue;
    }
    batch.bytes += row_bytes;
    batch.row_results.push_back(std::move(res));
    ++batch.rows;
  }
  if (failed) return Failure(failed.get());
  if (PQstatus(conn) != CONNECTION_OK) return Failure(nullptr);
  if (received >= asked) batch.more_may_wait = true;
  if (received > 0)
    average_row_bytes_ = static_cast<double>(received_bytes) / static_cast<double>(received);
  return batch;
}

Result<int64_t> OutboxTable::MarkPublished(const std::vector<RowMark>& rows) {
  std::vector<std::string> values, versions;
  values.reserve(rows.size());
  versions.reserve(rows.size());
  for (const RowMark& row : rows) {
    values.push_back(row.order_value);
    versions.push_back(row.xmin);
  }
  auto res = Query(mark_sql_, {ArrayLiteral(values), ArrayLiteral(versions)}, PGRES_COMMAND_OK);
  if (!res.ok()) {
    const PollingSettings& polling = settings_.polling;
    const std::string mark = polling.marks_by_delete() ? "delete" : "column:" + polling.mark_column;
    const std::string what = "marking " + std::to_string(rows.size()) +
                             " published rows (polling.mark=" + mark + ") failed";
    const std::string cause = res.status().message() +
                              (last_sqlstate_.empty() ? "" : " (SQLSTATE " + last_sqlstate_ + ")");
    if (ClassifyMarkFailure(last_sqlstate_) == MarkFailure::kStop)
      return Status::Precondition(what + ", and retrying cannot fix it: " + cause);
    return Status::Connection(what + ": " + cause);
  }
  const char* affected = PQcmdTuples(res->get());
  return static_cast<int64_t>(affected[0] ? std::stoll(affected) : 0);
}

}  // namespace walrelay
