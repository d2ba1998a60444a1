// PostgresStore: the processed-keys table of docs/consumer.sql.
//
// A run is two transactions on one connection:
//  1. Acquire (short, committed): insert-or-lock the key row (INSERT ... ON CONFLICT DO NOTHING,
//     then SELECT ... FOR UPDATE). A holder inside step 2 keeps the row locked, so a concurrent
//     duplicate blocks here until that holder commits and then reads COMPLETED. A free PENDING
//     row (or one whose lease ended) is claimed: attempts + 1, locked_by, locked_at,
//     expires_at = now() + lease. Counting the attempt in its own committed transaction is what
//     lets a handler that crashes the process still use up max_attempts.
//  2. Run: BEGIN, re-lock the row and check the claim is still ours, run the handler on this
//     connection, mark the row COMPLETED, COMMIT. A failed handler rolls everything back.
// Every timestamp is the database server's now(), never the client's clock.
#include <cctype>

#include "consumer/consumer_sql.h"
#include "consumer/pg_exec.h"
#include "consumer/internal.h"
#include "walrelay/consumer.h"

namespace walrelay::consumer {
namespace {

bool ValidTableName(const std::string& name) {
  // schema.table or table, each an unquoted SQL identifier.
  if (name.empty() || name.size() > 127) return false;
  int dots = 0;
  bool part_start = true;
  for (char c : name) {
    if (c == '.') {
      if (part_start || ++dots > 1) return false;
      part_start = true;
      continue;
    }
    const bool letter = std::isalpha(static_cast<unsigned char>(c)) || c == '_';
    if (part_start && !letter) return false;
    if (!letter && !std::isdigit(static_cast<unsigned char>(c))) return false;
    part_start = false;
  }
  return !part_start;
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()); }

std::string Text(PGresult* r, int row, int col) {
  return PQgetisnull(r, row, col) ? "" : std::string(PQgetvalue(r, row, col));
}

}  // namespace

struct PostgresStore::Impl {
  PostgresStoreOptions options;
  PgConnPtr conn;

  // Reconnects when the last connection was lost; the caller retries the whole step.
  Status EnsureConnected() {
    if (conn && PQstatus(conn.get()) == CONNECTION_OK) return Status::Ok();
    auto c = ConnectPg(options.conninfo, "the idempotency store");
    if (!c.ok()) return c.status();
    conn = std::move(c).value();
    return Status::Ok();
  }

  Result<PgResultPtr> Exec(const std::string& sql, const SqlParams& params = {}) {
    auto r = ExecPg(conn.get(), sql, params);
    if (!r.ok() && SqlStateOf(r.status()) == "42P01") {
      return Status::Precondition("idempotency table " + options.table + " does not exist in " +
                                  DescribePg(conn.get()) +
                                  ": create it with docs/consumer.sql or PostgresStore::CreateSchema");
    }
    return r;
  }

  void Rollback() {
    if (conn && PQtransactionStatus(conn.get()) != PQTRANS_IDLE) PgResultPtr(PQexec(conn.get(), "ROLLBACK"));
  }

  // Runs `body` inside BEGIN/COMMIT; any error rolls back and is returned.
  template <typename T, typename Body>
  Result<T> InTransaction(Body body) {
    WALRELAY_RETURN_IF_ERROR(EnsureConnected());
    if (auto b = Exec("BEGIN"); !b.ok()) return b.status();
    Result<T> out = body();
    if (!out.ok()) {
      Rollback();
      return out;
    }
    if (auto c = Exec("COMMIT"); !c.ok()) {
      Rollback();
      return c.status();
    }
    return out;
  }

  std::string where() { return options.table + " at " + DescribePg(conn.get()); }
};

PostgresStore::PostgresStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PostgresStore::~PostgresStore() = default;

Result<std::unique_ptr<PostgresStore>> PostgresStore::Connect(const PostgresStoreOptions& options) {
  if (!ValidTableName(options.table))
    return Status::Config("PostgresStoreOptions.table '" + options.table +
                          "' is not [schema.]name of letters, digits and '_'");
  if (options.pending_retention.count() < 0)
    return Status::Config("PostgresStoreOptions.pending_retention must not be negative");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  WALRELAY_RETURN_IF_ERROR(impl->EnsureConnected());
  return std::unique_ptr<PostgresStore>(new PostgresStore(std::move(impl)));
}

Status PostgresStore::CreateSchema() {
  WALRELAY_RETURN_IF_ERROR(impl_->EnsureConnected());
  const std::string& t = impl_->options.table;
  const std::string bare = t.substr(t.find('.') == std::string::npos ? 0 : t.find('.') + 1);
  // docs/consumer.sql, with the configured table (and its index) named instead.
  std::string sql = kConsumerSql;
  auto replace_all = [&sql](const std::string& from, const std::string& to) {
    for (size_t at = sql.find(from); at != std::string::npos; at = sql.find(from, at + to.size()))
      sql.replace(at, from.size(), to);
  };
  replace_all("walrelay_consumer_keys_expires_at_idx", bare + "_expires_at_idx");
  replace_all("public.walrelay_consumer_keys", t);
  PgResultPtr res(PQexec(impl_->conn.get(), sql.c_str()));
  if (!res || PQresultStatus(res.get()) != PGRES_COMMAND_OK)
    return Status::Precondition("cannot create " + impl_->where() + ": " +
                                OneLine(PQerrorMessage(impl_->conn.get())));
  return Status::Ok();
}

Result<Claim> PostgresStore::Acquire(const std::string& consumer, const std::string& key,
                                     const std::string& owner, std::chrono::milliseconds lease,
                                     const Message& message) {
  Impl& d = *impl_;
  const std::string& t = d.options.table;
  auto claim = d.InTransaction<Claim>([&]() -> Result<Claim> {
    // A holder that is running its handler keeps the row locked; waiting longer than a lease
    // for it is reported as a conflict, and the consumer asks again later.
    if (auto r = d.Exec("SET LOCAL lock_timeout = " + Ms(lease)); !r.ok()) return r.status();
    if (auto r = d.Exec("INSERT INTO " + t +
                            " (consumer_name, idempotency_key, state, attempts, expires_at)"
                            " VALUES ($1, $2, 'PENDING', 0, now())"
                            " ON CONFLICT (consumer_name, idempotency_key) DO NOTHING",
                        {consumer, key});
        !r.ok())
      return r.status();
    auto row = d.Exec("SELECT state, attempts, coalesce(locked_by, ''), expires_at <= now(),"
                      " coalesce(result, ''), coalesce(last_error, ''),"
                      " greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint"
                      " FROM " + t + " WHERE consumer_name = $1 AND idempotency_key = $2 FOR UPDATE",
                      {consumer, key});
    if (!row.ok()) return row.status();
    PGresult* r = row->get();
    if (PQntuples(r) != 1)
      return Status::Internal("key row " + consumer + "/" + key + " vanished from " + t);
    Claim c;
    const std::string state = Text(r, 0, 0);
    c.attempts = std::atoi(PQgetvalue(r, 0, 1));
    const std::string holder = Text(r, 0, 2);
    const bool expired = Text(r, 0, 3) == "t";
    c.result = Text(r, 0, 4);
    c.last_error = Text(r, 0, 5);
    if (state == "COMPLETED") {
      c.state = Claim::State::kDuplicate;
      return c;
    }
    if (state == "FAILED") {
      c.state = Claim::State::kFailed;
      return c;
    }
    c.state = Claim::State::kAcquired;
    if (!holder.empty() && holder != owner) {
      c.previous_owner = holder;
      if (!expired) {
        c.state = Claim::State::kConflict;
        c.retry_after = std::chrono::milliseconds(std::atoll(PQgetvalue(r, 0, 6)));
        return c;
      }
      c.state = Claim::State::kTakenOver;
    }
    auto upd = d.Exec("UPDATE " + t + " SET attempts = attempts + 1, locked_by = $3,"
                      " locked_at = now(), expires_at = now() + $4::bigint * interval '1 millisecond',"
                      " topic = $5, kafka_partition = $6, kafka_offset = $7, updated_at = now()"
                      " WHERE consumer_name = $1 AND idempotency_key = $2 RETURNING attempts",
                      {consumer, key, owner, Ms(lease), message.topic,
                       std::to_string(message.partition), std::to_string(message.offset)});
    if (!upd.ok()) return upd.status();
    c.attempts = std::atoi(PQgetvalue(upd->get(), 0, 0));
    return c;
  });
  if (!claim.ok() && SqlStateOf(claim.status()) == "55P03") {
    // lock_timeout: the holder is still running its handler.
    Claim c;
    c.state = Claim::State::kConflict;
    c.previous_owner = "(row locked by a running handler)";
    return c;
  }
  if (!claim.ok()) return claim.status().WithContext("claiming key '" + key + "' in " + t);
  return claim;
}

Result<RunOutcome> PostgresStore::Run(const std::string& consumer, const std::string& key,
                                      const std::string& owner,
                                      std::chrono::milliseconds completed_ttl,
                                      const Message& message, int attempt, const Handler& handler) {
  Impl& d = *impl_;
  const std::string& t = d.options.table;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  auto fail = [&](Status st) -> Result<RunOutcome> {
    d.Rollback();
    return st.WithContext("running key '" + key + "' in " + t);
  };
  if (auto b = d.Exec("BEGIN"); !b.ok()) return fail(b.status());
  auto row = d.Exec("SELECT state, coalesce(locked_by, '') FROM " + t +
                        " WHERE consumer_name = $1 AND idempotency_key = $2 FOR UPDATE",
                    {consumer, key});
  if (!row.ok()) return fail(row.status());
  RunOutcome out;
  if (PQntuples(row->get()) != 1 || Text(row->get(), 0, 0) != "PENDING" ||
      Text(row->get(), 0, 1) != owner) {
    // Our lease ended and someone else took the key (or finished it) meanwhile.
    d.Rollback();
    out.kind = RunOutcome::Kind::kLost;
    return out;
  }

  HandlerContext ctx(message, key, attempt, d.conn.get());
  out.handler = CallHandler(handler, ctx);
  if (PQstatus(d.conn.get()) != CONNECTION_OK)
    return fail(Status::Connection("lost PostgreSQL connection to " + DescribePg(d.conn.get()) +
                                   " while the handler ran"));
  const PGTransactionStatusType tx = PQtransactionStatus(d.conn.get());
  if (out.handler.kind == HandlerResult::Kind::kDone) {
    if (tx == PQTRANS_INERROR) {
      out.handler = HandlerResult::Retry(
          "sqlstate:25P02", "the handler returned success but a statement of its transaction failed");
    } else if (tx != PQTRANS_INTRANS) {
      out.handler = HandlerResult::Reject(
          "HandlerEndedTransaction",
          "the handler committed or rolled back the store's transaction itself; its writes may "
          "have been committed without the key");
    }
  }
  if (out.handler.kind != HandlerResult::Kind::kDone) {
    d.Rollback();
    out.kind = RunOutcome::Kind::kFailed;
    return out;
  }
  auto done = d.Exec("UPDATE " + t + " SET state = 'COMPLETED', result = $3, locked_by = NULL,"
                     " expires_at = now() + $4::bigint * interval '1 millisecond', updated_at = now()"
                     " WHERE consumer_name = $1 AND idempotency_key = $2",
                     {consumer, key, out.handler.result, Ms(completed_ttl)});
  if (!done.ok()) return fail(done.status());
  auto commit = d.Exec("COMMIT");
  if (!commit.ok()) {
    if (commit.status().code() == ErrorCode::kConnection) return fail(commit.status());
    // A deferred constraint or serialization failure of the handler's writes: a handler
    // failure like any other; nothing was committed.
    d.Rollback();
    out.handler = HandlerContext::SqlFailure(commit.status());
    out.kind = RunOutcome::Kind::kFailed;
    return out;
  }
  out.kind = RunOutcome::Kind::kCompleted;
  return out;
}

Status PostgresStore::Release(const std::string& consumer, const std::string& key,
                              const std::string& owner, const std::string& error) {
  Impl& d = *impl_;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  auto r = d.Exec("UPDATE " + d.options.table + " SET locked_by = NULL, last_error = $4,"
                  " updated_at = now() WHERE consumer_name = $1 AND idempotency_key = $2"
                  " AND locked_by = $3 AND state = 'PENDING'",
                  {consumer, key, owner, error});
  if (!r.ok()) return r.status().WithContext("releasing key '" + key + "' in " + d.options.table);
  return Status::Ok();
}

Status PostgresStore::MarkFailed(const std::string& consumer, const std::string& key,
                                 const std::string& error, std::chrono::milliseconds failed_ttl) {
  Impl& d = *impl_;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  const std::string& t = d.options.table;
  auto r = d.Exec("INSERT INTO " + t + " AS k (consumer_name, idempotency_key, state, attempts,"
                  " expires_at, last_error) VALUES ($1, $2, 'FAILED', 0,"
                  " now() + $4::bigint * interval '1 millisecond', $3)"
                  " ON CONFLICT (consumer_name, idempotency_key) DO UPDATE SET state = 'FAILED',"
                  " locked_by = NULL, last_error = EXCLUDED.last_error,"
                  " expires_at = EXCLUDED.expires_at, updated_at = now()"
                  " WHERE k.state <> 'COMPLETED'",
                  {consumer, key, error, Ms(failed_ttl)});
  if (!r.ok()) return r.status().WithContext("marking key '" + key + "' FAILED in " + t);
  return Status::Ok();
}

Result<int64_t> PostgresStore::CleanupBatch(int batch_size) {
  Impl& d = *impl_;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  const std::string& t = d.options.table;
  // `expires_at < now()` first, so the expires_at index finds the candidates; SKIP LOCKED
  // leaves rows a handler is working on to a later run.
  auto r = d.Exec("DELETE FROM " + t + " WHERE ctid = ANY(ARRAY(SELECT ctid FROM " + t +
                  " WHERE expires_at < now() AND (state <> 'PENDING' OR"
                  " expires_at < now() - $1::bigint * interval '1 millisecond')"
                  " LIMIT $2 FOR UPDATE SKIP LOCKED))",
                  {Ms(d.options.pending_retention), std::to_string(batch_size)});
  if (!r.ok()) return r.status().WithContext("deleting expired keys from " + t);
  return static_cast<int64_t>(std::atoll(PQcmdTuples(r->get())));
}

}  // namespace walrelay::consumer
