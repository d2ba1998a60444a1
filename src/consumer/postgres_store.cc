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
//
// A poll batch takes the same two steps for all its records at once:
//  1. AcquireBatch: one pipelined transaction (one round trip): insert the missing key rows
//     already claimed, lock every row in key order (so two batches never deadlock), read their
//     states, claim the free older ones in one UPDATE, COMMIT. Each record gets the answer
//     Acquire would give.
//  2. RunBatch: one transaction with a savepoint per record. A completed handler's COMPLETED
//     mark, the savepoint's release and the next savepoint go in one pipeline; a failed
//     handler is rolled back to its savepoint alone, so the records before it stay, and the
//     run stops there (the claims after it are given back uncounted). One COMMIT at the end
//     makes every completed record's writes and mark durable together.
//
// ClaimAndRunBatch, the consumer's path once a partition has had its first batch, does both in
// one transaction: the new keys' rows are inserted COMPLETED (their insertion locks them until
// the COMMIT: that lock is the claim), the existing rows are read and locked, the handlers run
// under savepoints, and before the COMMIT only the rows of records that did not complete are
// changed (a failed record's row becomes the claim step 1 would have left; unrun records' rows
// are deleted). Batches that meet a PENDING row, a lock held past a second or a key committed
// meanwhile go through the two steps above instead. A crash inside it leaves nothing, not even
// the attempt: that is why a partition's first batch after an assignment takes the two steps.
#include <cctype>
#include <functional>
#include <iterator>
#include <map>
#include <set>

#include "consumer/consumer_sql.h"
#include "consumer/internal.h"
#include "consumer/pg_exec.h"
#include "walrelay/consumer/postgres_store.h"

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

// The verdict of a locked key row (state, attempts, holder, lease ended, result, last error,
// ms left), as Acquire decides it; `granted_attempts` is set for a row the claim updated.
Claim Verdict(PGresult* r, int row, const std::string& owner) {
  Claim c;
  const std::string state = Text(r, row, 1);
  c.attempts = std::atoi(PQgetvalue(r, row, 2));
  const std::string holder = Text(r, row, 3);
  const bool expired = Text(r, row, 4) == "t";
  c.result = Text(r, row, 5);
  c.last_error = Text(r, row, 6);
  c.payload_hash = Text(r, row, 8);
  if (state == "COMPLETED") {
    c.state = Claim::State::kDuplicate;
  } else if (state == "FAILED") {
    c.state = Claim::State::kFailed;
  } else if (!holder.empty() && holder != owner) {
    c.previous_owner = holder;
    c.state = expired ? Claim::State::kTakenOver : Claim::State::kConflict;
    if (!expired) c.retry_after = std::chrono::milliseconds(std::atoll(PQgetvalue(r, row, 7)));
  }
  return c;
}

// The COMPLETED marks of a batch's completed records, keys in $2 and results in $3, in one
// statement (through the primary key: the transaction has kByKey's settings by then).
constexpr const char* kMarkSql =
    " AS k SET state = 'COMPLETED', result = i.result, locked_by = NULL,"
    " expires_at = now() + $4::bigint * interval '1 millisecond', updated_at = now()"
    " FROM unnest($2::text[], $3::text[]) AS i(key, result)"
    " WHERE k.consumer_name = $1 AND k.idempotency_key = i.key";

// Unclaim's statement for every key in $2: the claim given back, its attempt uncounted.
constexpr const char* kUnclaimSql =
    " SET attempts = greatest(attempts - 1, 0), locked_by = NULL, updated_at = now()"
    " WHERE consumer_name = $1 AND idempotency_key = ANY($2::text[]) AND locked_by = $3"
    " AND state = 'PENDING'";

// The store's statements find a batch's rows through the primary key, key by key. With
// statistics taken while the table was small the planner otherwise reads every row of the
// consumer (a bitmap scan on consumer_name, the keys as a filter) or scans the table, a cost
// that grows with the table: at 60,000 rows a batch's claim took 25 ms instead of 5. The
// handlers' statements run with the session's own planner settings.
constexpr const char* kByKey[] = {
    "SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off",
    "SET LOCAL enable_hashjoin = off", "SET LOCAL enable_mergejoin = off"};
constexpr const char* kPlannerDefaults[] = {
    "SET LOCAL enable_seqscan TO DEFAULT", "SET LOCAL enable_bitmapscan TO DEFAULT",
    "SET LOCAL enable_hashjoin TO DEFAULT", "SET LOCAL enable_mergejoin TO DEFAULT"};

// `columns` of the rows of consumer $1's keys in $2, locked one by one in key order (two
// batches never deadlock), each found through the primary key; `extra` adds conditions on
// the row `r`. A lateral lookup per key rather than `idempotency_key = ANY($2) ORDER BY
// idempotency_key`, which the planner may answer by reading the consumer's rows in key order
// to spare a sort.
std::string LockedRows(const std::string& table, const std::string& columns,
                       const std::string& extra = "") {
  return "SELECT " + columns +
         " FROM (SELECT key FROM unnest($2::text[]) AS key ORDER BY key) i, LATERAL (SELECT * "
         "FROM " +
         table + " r WHERE r.consumer_name = $1 AND r.idempotency_key = i.key" + extra +
         " FOR UPDATE) k";
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
    claim_prepared = false;
    return Status::Ok();
  }
  // Whether ClaimAndRunBatch's claim statement is prepared on `conn`.
  bool claim_prepared = false;

  Result<PgResultPtr> Exec(const std::string& sql, const SqlParams& params = {}) {
    auto r = ExecPg(conn.get(), sql, params);
    if (!r.ok()) return Explain(r.status());
    return r;
  }

  // A missing table or column, in words that say how to fix it.
  Status Explain(const Status& st) {
    const std::string code = SqlStateOf(st);
    if (code == "42P01")
      return Status::Precondition(
          "idempotency table " + options.table + " does not exist in " + DescribePg(conn.get()) +
          ": create it with docs/consumer.sql or PostgresStore::CreateSchema");
    if (code == "42703")
      return Status::Precondition(
          "idempotency table " + options.table + " in " + DescribePg(conn.get()) +
          " lacks a column of this version (" + st.message() +
          "): run docs/consumer.sql or PostgresStore::CreateSchema again, which adds it");
    return st;
  }

  void Rollback() {
    if (conn && PQtransactionStatus(conn.get()) != PQTRANS_IDLE)
      PgResultPtr(PQexec(conn.get(), "ROLLBACK"));
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

  // A key's claim, and whether it is a conflict because the row stayed locked for `lock_wait`.
  struct KeyClaim {
    Claim claim;
    bool lock_wait_ran_out = false;
  };
  // Acquire's answer for one key, waiting at most `lock_wait` for the row's lock.
  Result<KeyClaim> AcquireKey(const std::string& consumer, const std::string& key,
                              const std::string& owner, std::chrono::milliseconds lease,
                              const Message& message, std::chrono::milliseconds lock_wait);
  // The batch's claims one key at a time, after its one-statement claim could not be taken.
  // Once a row's lock has been waited for in vain (`waited_out`: the batch statement's wait
  // already ran out), the keys after it do not wait: a member paused inside its batch
  // transaction holds all its keys, and waiting a lease for each would keep this member out
  // of its poll loop for (keys + 1) leases. They answer CONFLICT and are asked again later.
  Result<std::vector<Claim>> AcquireOneByOne(const std::string& consumer,
                                             const std::vector<BatchRecord>& records,
                                             const std::string& owner,
                                             std::chrono::milliseconds lease, bool waited_out);
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
  // A holder that is running its handler keeps the row locked; waiting longer than a lease
  // for it is reported as a conflict, and the consumer asks again later.
  auto claim = impl_->AcquireKey(consumer, key, owner, lease, message, lease);
  if (!claim.ok()) return claim.status();
  return claim->claim;
}

Result<PostgresStore::Impl::KeyClaim> PostgresStore::Impl::AcquireKey(
    const std::string& consumer, const std::string& key, const std::string& owner,
    std::chrono::milliseconds lease, const Message& message, std::chrono::milliseconds lock_wait) {
  Impl& d = *this;
  const std::string& t = d.options.table;
  auto claim = d.InTransaction<Claim>([&]() -> Result<Claim> {
    if (auto r = d.Exec("SET LOCAL lock_timeout = " + Ms(lock_wait)); !r.ok()) return r.status();
    const std::string hash = PayloadHash(message);
    if (auto r = d.Exec("INSERT INTO " + t +
                            " (consumer_name, idempotency_key, state, attempts, expires_at,"
                            " payload_hash) VALUES ($1, $2, 'PENDING', 0, now(), $3)"
                            " ON CONFLICT (consumer_name, idempotency_key) DO NOTHING",
                        {consumer, key, hash});
        !r.ok())
      return r.status();
    auto row = d.Exec("SELECT state, attempts, coalesce(locked_by, ''), expires_at <= now(),"
                      " coalesce(result, ''), coalesce(last_error, ''),"
                      " greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint,"
                      " coalesce(payload_hash, '')"
                      " FROM " +
                          t + " WHERE consumer_name = $1 AND idempotency_key = $2 FOR UPDATE",
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
    c.payload_hash = Text(r, 0, 7);
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
    auto upd =
        d.Exec("UPDATE " + t +
                   " SET attempts = attempts + 1, locked_by = $3,"
                   " locked_at = now(), expires_at = now() + $4::bigint * interval '1 millisecond',"
                   " topic = $5, kafka_partition = $6, kafka_offset = $7, updated_at = now(),"
                   " payload_hash = coalesce(payload_hash, $8)"
                   " WHERE consumer_name = $1 AND idempotency_key = $2 RETURNING attempts",
               {consumer, key, owner, Ms(lease), message.topic, std::to_string(message.partition),
                std::to_string(message.offset), hash});
    if (!upd.ok()) return upd.status();
    c.attempts = std::atoi(PQgetvalue(upd->get(), 0, 0));
    return c;
  });
  if (!claim.ok() && SqlStateOf(claim.status()) == "55P03") {
    // lock_timeout: the holder is still running its handler (or paused inside it).
    KeyClaim busy;
    busy.claim.state = Claim::State::kConflict;
    busy.claim.previous_owner = "(row locked by a running handler)";
    busy.lock_wait_ran_out = true;
    return busy;
  }
  if (!claim.ok()) return claim.status().WithContext("claiming key '" + key + "' in " + t);
  return KeyClaim{std::move(claim).value(), false};
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
          "sqlstate:25P02",
          "the handler returned success but a statement of its transaction failed");
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
  auto done =
      d.Exec("UPDATE " + t +
                 " SET state = 'COMPLETED', result = $3, locked_by = NULL,"
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

Result<std::vector<Claim>> PostgresStore::AcquireBatch(const std::string& consumer,
                                                       const std::vector<BatchRecord>& records,
                                                       const std::string& owner,
                                                       std::chrono::milliseconds lease) {
  Impl& d = *impl_;
  const std::string& t = d.options.table;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  std::vector<std::string> keys, topics, partitions, offsets, hashes;
  for (const BatchRecord& r : records) {
    keys.push_back(r.key);
    hashes.push_back(PayloadHash(*r.message));
    topics.push_back(r.message->topic);
    partitions.push_back(std::to_string(r.message->partition));
    offsets.push_back(std::to_string(r.message->offset));
  }
  const std::string key_array = PgTextArray(keys);
  const std::string hash_array = PgTextArray(hashes);
  const std::string topic_array = PgTextArray(topics);
  const std::string partition_array = PgTextArray(partitions);
  const std::string offset_array = PgTextArray(offsets);
  // The row lock waits for a holder running its handler, up to one lease, as Acquire does.
  auto results = ExecPipeline(
      d.conn.get(),
      {
          {"BEGIN", {}},
          // The batch's keys are found through the primary key, never a scan of the table:
          // for a few hundred keys the planner would otherwise scan a table of tens of
          // thousands of rows (5-6 ms a statement at 20,000 rows, growing with the table).
          {"SET LOCAL lock_timeout = " + Ms(lease), {}},
          {"SET LOCAL enable_seqscan = off", {}},
          {"SET LOCAL enable_bitmapscan = off", {}},
          {"SET LOCAL enable_hashjoin = off", {}},
          {"SET LOCAL enable_mergejoin = off", {}},
          // A new key is inserted already claimed (attempt 1): no second write for it.
          {"INSERT INTO " + t +
               " (consumer_name, idempotency_key, state, attempts, locked_by, locked_at,"
               " expires_at, topic, kafka_partition, kafka_offset, payload_hash)"
               " SELECT $1, k, 'PENDING', 1, $4, now(),"
               " now() + $5::bigint * interval '1 millisecond', topic, part, off, h"
               " FROM unnest($2::text[], $3::text[], $6::text[], $7::int[], $8::bigint[])"
               " AS i(k, h, topic, part, off) ORDER BY k"
               " ON CONFLICT (consumer_name, idempotency_key) DO NOTHING",
           {consumer, key_array, hash_array, owner, Ms(lease), topic_array, partition_array,
            offset_array}},
          // The rows this transaction inserted are locked by their insertion already, and
          // their verdict is known: read and lock only the others (a batch of new keys then
          // writes each row once here instead of twice).
          {LockedRows(t,
                      "idempotency_key, state, attempts, coalesce(locked_by, ''),"
                      " expires_at <= now(), coalesce(result, ''), coalesce(last_error, ''),"
                      " greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint,"
                      " coalesce(payload_hash, '')",
                      " AND NOT (r.locked_by IS NOT DISTINCT FROM $3 AND r.locked_at = now())"),
           {consumer, key_array, owner}},
          {"UPDATE " + t +
               " AS k SET attempts = k.attempts + 1, locked_by = $3, locked_at = now(),"
               " expires_at = now() + $4::bigint * interval '1 millisecond', topic = i.topic,"
               " kafka_partition = i.part, kafka_offset = i.off, updated_at = now(),"
               " payload_hash = coalesce(k.payload_hash, i.hash)"
               " FROM unnest($2::text[], $5::text[], $6::int[], $7::bigint[], $8::text[])"
               " AS i(key, topic, part, off, hash)"
               " WHERE k.consumer_name = $1 AND k.idempotency_key = i.key AND k.state = 'PENDING'"
               " AND (k.locked_by IS NULL OR k.locked_by = $3 OR k.expires_at <= now())"
               // Not the rows this transaction inserted (claimed already, at now()).
               " AND NOT (k.locked_by IS NOT DISTINCT FROM $3 AND k.locked_at = now())"
               " RETURNING k.idempotency_key, k.attempts",
           {consumer, key_array, owner, Ms(lease), topic_array, partition_array, offset_array,
            hash_array}},
          {"COMMIT", {}},
      });
  if (!results.ok()) {
    d.Rollback();
    const std::string code = SqlStateOf(results.status());
    // A key locked past the lease (55P03) or two batches crossing (40P01): the keys are
    // claimed one by one instead, each with Acquire's own answer for a busy row.
    if (code == "55P03" || code == "40P01")
      return d.AcquireOneByOne(consumer, records, owner, lease, code == "55P03");
    return d.Explain(results.status())
        .WithContext("claiming a batch of " + std::to_string(records.size()) + " keys in " + t);
  }
  if (PQtransactionStatus(d.conn.get()) != PQTRANS_IDLE) {
    d.Rollback();
    return Status::Internal("the batch claim in " + t + " did not commit");
  }
  std::map<std::string, Claim> by_key;
  // BEGIN, lock_timeout, kByKey, INSERT, then the rows and the claims.
  const size_t select_at = 2 + std::size(kByKey) + 1;
  PGresult* rows = (*results)[select_at].get();
  for (int i = 0; i < PQntuples(rows); ++i) by_key[Text(rows, i, 0)] = Verdict(rows, i, owner);
  PGresult* updated = (*results)[select_at + 1].get();
  for (int i = 0; i < PQntuples(updated); ++i) {
    Claim& c = by_key[Text(updated, i, 0)];
    c.attempts = std::atoi(PQgetvalue(updated, i, 1));
  }
  std::vector<Claim> claims;
  for (size_t i = 0; i < records.size(); ++i) {
    auto it = by_key.find(records[i].key);
    if (it != by_key.end()) {
      claims.push_back(it->second);
      continue;
    }
    // Inserted by this transaction, claimed at attempt 1 (a row a concurrent cleanup deleted
    // between the INSERT and the SELECT is found missing by RunBatch, and claimed again).
    Claim c;
    c.attempts = 1;
    c.payload_hash = hashes[i];
    claims.push_back(c);
  }
  return claims;
}

Result<std::vector<Claim>> PostgresStore::Impl::AcquireOneByOne(
    const std::string& consumer, const std::vector<BatchRecord>& records, const std::string& owner,
    std::chrono::milliseconds lease, bool waited_out) {
  // PostgreSQL's smallest lock_timeout (0 would mean no limit): a lock that is free, or let go
  // within it, is still taken.
  constexpr std::chrono::milliseconds kNoWait{1};
  std::vector<Claim> claims;
  claims.reserve(records.size());
  for (const BatchRecord& r : records) {
    auto c = AcquireKey(consumer, r.key, owner, lease, *r.message, waited_out ? kNoWait : lease);
    if (!c.ok()) return c.status();
    waited_out = waited_out || c->lock_wait_ran_out;
    claims.push_back(std::move(c->claim));
  }
  return claims;
}

namespace {

// The statements a batch has queued for its next round trip: a record's savepoint goes out
// with its handler's first statement, and a completed record's mark with the next record's
// savepoint (or the COMMIT), so a record costs one round trip beside its handler's own.
class BatchPipeline final : public SqlPrelude {
 public:
  explicit BatchPipeline(PGconn* conn) : conn_(conn) {}

  void Queue(std::string sql, SqlParams params = {}) {
    queued_.push_back({std::move(sql), std::move(params)});
  }
  // Sends the queue; an error of one of its statements is kept in `error()`.
  Status Send() {
    if (queued_.empty()) return Status::Ok();
    size_t failed_at = 0;
    auto r = ExecPipeline(conn_, queued_, &failed_at);
    committing_failed_ = !r.ok() && r.status().code() != ErrorCode::kConnection &&
                         failed_at + 1 == queued_.size() && queued_.back().sql == "COMMIT";
    queued_.clear();
    if (!r.ok() && error_.ok() && !committing_failed_) error_ = r.status();
    return r.status();
  }
  // An error of the store's own queued statements (never the handler's).
  const Status& error() const { return error_; }
  // The last Send failed on its final statement, the COMMIT, for a reason other than the
  // connection (a deferred constraint, a serialization failure).
  bool committing_failed() const { return committing_failed_; }

  // Called before a handler statement that ends the transaction is sent, to queue the marks
  // of the records completed so far, so a handler's own COMMIT carries them.
  void OnTransactionEnd(std::function<void()> f) { on_end_ = std::move(f); }

  // Called once, before the handler first takes the connection itself (connection()), whose
  // statements the pipeline cannot see.
  void OnRawConnection(std::function<void()> f) { on_raw_ = std::move(f); }

  Result<SqlRows> Exec(const std::string& sql, const SqlParams& params) override {
    if (on_end_ && EndsTransaction(sql)) on_end_();
    if (queued_.empty()) {
      auto r = ExecPg(conn_, sql, params);
      if (!r.ok()) return r.status();
      return RowsOf(r->get());
    }
    queued_.push_back({sql, params});
    size_t failed_at = 0;
    auto r = ExecPipeline(conn_, queued_, &failed_at);
    const size_t mine = queued_.size() - 1;
    queued_.clear();
    if (!r.ok()) {
      if (r.status().code() != ErrorCode::kConnection && failed_at < mine && error_.ok())
        error_ = r.status();
      return r.status();
    }
    return RowsOf(r->back().get());
  }
  void Flush() override {
    if (on_raw_) {
      auto f = std::move(on_raw_);
      on_raw_ = nullptr;
      f();
    }
    (void)Send();
  }

 private:
  // COMMIT, END, ROLLBACK, ABORT or PREPARE TRANSACTION: the statements that end a transaction
  // block (inside one, procedures and DO blocks cannot). A false positive costs a mark sent
  // early, which the marks sent with the batch's COMMIT repeat.
  static bool EndsTransaction(const std::string& sql) {
    size_t i = 0;
    while (i < sql.size()) {
      if (std::isspace(static_cast<unsigned char>(sql[i])) || sql[i] == '(') {
        ++i;
      } else if (sql.compare(i, 2, "--") == 0) {
        i = sql.find('\n', i);
        if (i == std::string::npos) return false;
      } else if (sql.compare(i, 2, "/*") == 0) {
        // Comments nest in PostgreSQL.
        int depth = 0;
        do {
          if (sql.compare(i, 2, "/*") == 0) {
            ++depth;
            i += 2;
          } else if (sql.compare(i, 2, "*/") == 0) {
            --depth;
            i += 2;
          } else {
            ++i;
          }
        } while (depth > 0 && i < sql.size());
      } else {
        break;
      }
    }
    std::string word;
    while (i < sql.size() && std::isalpha(static_cast<unsigned char>(sql[i])))
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(sql[i++])));
    return word == "commit" || word == "end" || word == "rollback" || word == "abort" ||
           word == "prepare";
  }

  PGconn* conn_;
  std::function<void()> on_end_;
  std::function<void()> on_raw_;
  std::vector<PgStatement> queued_;
  Status error_;
  bool committing_failed_ = false;
};

}  // namespace

Result<std::vector<RunOutcome>> PostgresStore::RunBatch(const std::string& consumer,
                                                        const std::vector<BatchRecord>& records,
                                                        const std::string& owner,
                                                        std::chrono::milliseconds completed_ttl,
                                                        const Handler& handler) {
  Impl& d = *impl_;
  const std::string& t = d.options.table;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  const std::string where =
      "running a batch of " + std::to_string(records.size()) + " keys in " + t;
  std::vector<std::string> keys;
  for (const BatchRecord& r : records) keys.push_back(r.key);
  auto rest_of = [&](size_t from) {
    return PgTextArray(
        std::vector<std::string>(keys.begin() + static_cast<std::ptrdiff_t>(from), keys.end()));
  };
  const std::string unclaim = "UPDATE " + t + kUnclaimSql;
  auto fail = [&](const Status& st) -> Result<std::vector<RunOutcome>> {
    d.Rollback();
    return st.WithContext(where);
  };
  // The rows stay locked by this transaction until its COMMIT, as in Run.
  // The keys through the primary key (see AcquireBatch); the handlers' statements then run
  // with the session's own planner settings again.
  auto begun = ExecPipeline(d.conn.get(),
                            {
                                {"BEGIN", {}},
                                {"SELECT txid_current()", {}},
                                {"SET LOCAL enable_seqscan = off", {}},
                                {"SET LOCAL enable_bitmapscan = off", {}},
                                {"SET LOCAL enable_hashjoin = off", {}},
                                {"SET LOCAL enable_mergejoin = off", {}},
                                {LockedRows(t, "idempotency_key, state, coalesce(locked_by, '')"),
                                 {consumer, PgTextArray(keys)}},
                                {"SET LOCAL enable_seqscan TO DEFAULT", {}},
                                {"SET LOCAL enable_bitmapscan TO DEFAULT", {}},
                                {"SET LOCAL enable_hashjoin TO DEFAULT", {}},
                                {"SET LOCAL enable_mergejoin TO DEFAULT", {}},
                            });
  if (!begun.ok()) return fail(begun.status());
  // The transaction's id: whether it committed, if a handler ends it (below).
  const std::string xid = Text((*begun)[1].get(), 0, 0);
  std::set<std::string> ours;
  PGresult* rows = (*begun)[2 + std::size(kByKey)].get();  // after BEGIN, txid, kByKey
  for (int i = 0; i < PQntuples(rows); ++i)
    if (Text(rows, i, 1) == "PENDING" && Text(rows, i, 2) == owner) ours.insert(Text(rows, i, 0));

  BatchPipeline pipe(d.conn.get());
  std::vector<RunOutcome> out;
  // The completed records' keys and results, marked COMPLETED together before the COMMIT.
  std::vector<std::string> marked_keys, marked_results;
  const std::string mark = "UPDATE " + t + kMarkSql;
  pipe.OnTransactionEnd([&] {
    if (marked_keys.empty()) return;
    pipe.Queue(
        mark, {consumer, PgTextArray(marked_keys), PgTextArray(marked_results), Ms(completed_ttl)});
  });
  for (size_t i = 0; i < records.size(); ++i) {
    const BatchRecord& r = records[i];
    RunOutcome o;
    if (ours.count(r.key) == 0) {
      // Our lease ended and someone else took the key (or finished it) meanwhile.
      o.kind = RunOutcome::Kind::kLost;
      out.push_back(o);
      continue;
    }
    pipe.Queue("SAVEPOINT walrelay_record");
    HandlerContext ctx(*r.message, r.key, r.claim.attempts, d.conn.get());
    ctx.set_prelude(&pipe);
    o.handler = CallHandler(handler, ctx);
    if (PQstatus(d.conn.get()) != CONNECTION_OK)
      return fail(Status::Connection("lost PostgreSQL connection to " + DescribePg(d.conn.get()) +
                                     " while the handler of key '" + r.key + "' ran"));
    if (!pipe.error().ok()) return fail(pipe.error());
    const PGTransactionStatusType tx = PQtransactionStatus(d.conn.get());
    if (tx != PQTRANS_INTRANS && tx != PQTRANS_INERROR) {
      // The handler ended the batch's transaction. A COMMIT made the earlier records' writes
      // durable, with their marks (queued before its statement): they stand, their marks are
      // written again in case the statement was not recognised, and this record is refused
      // as Run refuses it. A ROLLBACK undid them: every record goes again, one by one.
      d.Rollback();
      auto status = d.Exec("SELECT txid_status($1::bigint)", {xid});
      if (!status.ok()) return status.status().WithContext(where);
      if (Text(status->get(), 0, 0) != "committed") {
        (void)d.Exec(unclaim, {consumer, rest_of(0), owner});
        return std::vector<RunOutcome>();
      }
      if (!marked_keys.empty()) {
        auto marked = d.Exec(mark, {consumer, PgTextArray(marked_keys), PgTextArray(marked_results),
                                    Ms(completed_ttl)});
        if (!marked.ok()) return marked.status().WithContext(where);
      }
      o.kind = RunOutcome::Kind::kFailed;
      o.handler = HandlerResult::Reject(
          "HandlerEndedTransaction",
          "the handler committed or rolled back the store's transaction itself; its writes may "
          "have been committed without the key");
      out.push_back(o);
      if (i + 1 < records.size()) (void)d.Exec(unclaim, {consumer, rest_of(i + 1), owner});
      return out;
    }
    if (o.handler.kind == HandlerResult::Kind::kDone && tx == PQTRANS_INERROR)
      o.handler = HandlerResult::Retry(
          "sqlstate:25P02",
          "the handler returned success but a statement of its transaction failed");
    if (o.handler.kind != HandlerResult::Kind::kDone) {
      // This record's writes go; the records before it stay, the ones after it are not run.
      pipe.Queue("ROLLBACK TO SAVEPOINT walrelay_record");
      pipe.Queue("RELEASE SAVEPOINT walrelay_record");
      for (const char* s : kByKey) pipe.Queue(s);
      if (i + 1 < records.size()) pipe.Queue(unclaim, {consumer, rest_of(i + 1), owner});
      o.kind = RunOutcome::Kind::kFailed;
      out.push_back(o);
      break;
    }
    // The mark is written by the batch's own transaction after the last record, not by a
    // record's subtransaction, which spares PostgreSQL a multixact on the locked row; one
    // statement for the batch instead of one per record.
    pipe.Queue("RELEASE SAVEPOINT walrelay_record");
    marked_keys.push_back(r.key);
    marked_results.push_back(o.handler.result);
    o.kind = RunOutcome::Kind::kCompleted;
    out.push_back(o);
  }
  // The marks and the COMMIT in one round trip, atomic with the handlers' writes as before.
  if (!marked_keys.empty()) {
    for (const char* s : kByKey) pipe.Queue(s);
    pipe.Queue(
        mark, {consumer, PgTextArray(marked_keys), PgTextArray(marked_results), Ms(completed_ttl)});
  }
  pipe.Queue("COMMIT");
  if (Status st = pipe.Send(); !st.ok()) {
    if (!pipe.committing_failed()) return fail(st);
    // A deferred constraint or serialization failure: nothing of the batch was kept. One by
    // one, the failing record is then found and the others complete.
    d.Rollback();
    (void)d.Exec(unclaim, {consumer, rest_of(0), owner});
    return std::vector<RunOutcome>();
  }
  return out;
}

Result<BatchRun> PostgresStore::ClaimAndRunBatch(
    const std::string& consumer, const std::vector<BatchRecord>& records, const std::string& owner,
    std::chrono::milliseconds lease, std::chrono::milliseconds completed_ttl,
    const BatchAccept& accept, const Handler& handler) {
  Impl& d = *impl_;
  const std::string& t = d.options.table;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  auto two_step = [&] {
    return IdempotencyStore::ClaimAndRunBatch(consumer, records, owner, lease, completed_ttl,
                                              accept, handler);
  };
  const std::string where =
      "claiming and running a batch of " + std::to_string(records.size()) + " keys in " + t;
  auto fail = [&](const Status& st) -> Result<BatchRun> {
    d.Rollback();
    return d.Explain(st).WithContext(where);
  };
  std::vector<std::string> keys, topics, partitions, offsets, hashes;
  for (const BatchRecord& r : records) {
    keys.push_back(r.key);
    hashes.push_back(PayloadHash(*r.message));
    topics.push_back(r.message->topic);
    partitions.push_back(std::to_string(r.message->partition));
    offsets.push_back(std::to_string(r.message->offset));
  }
  // One round trip claims the batch. A new key's row is inserted as it will be committed,
  // COMPLETED (attempt 1): its insertion locks it until this transaction ends, which is the
  // claim, and a concurrent claimant of the key waits for that end and then finds the row
  // COMPLETED (or absent, if this run gave it back). The other rows are read and locked in key
  // order, as AcquireBatch locks them. Waiting for a row lock is bounded well below the poll
  // interval; a batch that waits longer takes the two-step path, whose claims answer CONFLICT.
  const std::string lock_wait = Ms(std::min(lease, std::chrono::milliseconds(1000)));
  // Prepared once per connection, and run with its generic plan: planning the statement took
  // longer than running it for a batch of a few keys, and its plan (per-key lookups) does not
  // depend on how many keys there are.
  constexpr const char* kClaimStatement = "walrelay_claim_batch";
  if (!d.claim_prepared) {
    PgResultPtr prepared(PQprepare(
        d.conn.get(), kClaimStatement,
        ("WITH ins AS (INSERT INTO " + t +
         " (consumer_name, idempotency_key, state, attempts, locked_at, expires_at, topic,"
         " kafka_partition, kafka_offset, payload_hash)"
         " SELECT $1, k, 'COMPLETED', 1, now(),"
         " now() + $3::bigint * interval '1 millisecond', topic, part, off, h"
         " FROM unnest($2::text[], $4::text[], $5::text[], $6::int[], $7::bigint[])"
         " AS i(k, h, topic, part, off) ORDER BY k"
         " ON CONFLICT (consumer_name, idempotency_key) DO NOTHING"
         " RETURNING idempotency_key),"
         // The statement's snapshot predates its inserts: `old` sees only rows that
         // were there before.
         " old AS (" +
         LockedRows(t, "idempotency_key, state, attempts, coalesce(locked_by, ''),"
                       " expires_at <= now(), coalesce(result, ''), coalesce(last_error, ''),"
                       " greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))"
                       "::bigint, coalesce(payload_hash, '')") +
         ")"
         " SELECT * FROM old UNION ALL"
         " SELECT idempotency_key, 'NEW', 1, '', false, '', '', 0::bigint, '' FROM ins")
            .c_str(),
        7, nullptr));
    if (auto r = CheckPg(d.conn.get(), std::move(prepared)); !r.ok()) return fail(r.status());
    d.claim_prepared = true;
  }
  auto begun = ExecPipeline(
      d.conn.get(), {
                        {"BEGIN", {}},
                        {"SELECT txid_current()", {}},
                        {"SET LOCAL lock_timeout = " + lock_wait, {}},
                        {"SET LOCAL plan_cache_mode = force_generic_plan", {}},
                        {kClaimStatement,
                         {consumer, PgTextArray(keys), Ms(completed_ttl), PgTextArray(hashes),
                          PgTextArray(topics), PgTextArray(partitions), PgTextArray(offsets)},
                         true},
                        // The handlers' statements run with the session's own settings.
                        {"SET LOCAL plan_cache_mode TO DEFAULT", {}},
                        {"SET LOCAL lock_timeout TO DEFAULT", {}},
                    });
  if (!begun.ok()) {
    d.Rollback();
    const std::string code = SqlStateOf(begun.status());
    // The statement is gone (a handler's DEALLOCATE): prepared again for the next batch.
    if (code == "26000") {
      d.claim_prepared = false;
      return two_step();
    }
    // A key locked past the wait (55P03) or two batches crossing (40P01): nothing was kept.
    if (code == "55P03" || code == "40P01") return two_step();
    return fail(begun.status());
  }
  const std::string xid = Text((*begun)[1].get(), 0, 0);
  PGresult* rows = (*begun)[4].get();  // after BEGIN, txid, lock_timeout, plan_cache_mode
  std::map<std::string, int> row_of;
  for (int i = 0; i < PQntuples(rows); ++i) row_of[Text(rows, i, 0)] = i;
  std::vector<Claim> claims;
  std::vector<bool> fresh;  // the row was inserted by this transaction
  for (size_t i = 0; i < records.size(); ++i) {
    auto it = row_of.find(records[i].key);
    // A row this statement could not insert nor see: committed by another claimant after the
    // statement began. Or a PENDING row: claimed, released or left by a crash, whose claim
    // counts an attempt. Both take the two-step path, which answers them as Acquire does.
    if (it == row_of.end() || Text(rows, it->second, 1) == "PENDING") {
      d.Rollback();
      return two_step();
    }
    if (Text(rows, it->second, 1) == "NEW") {
      Claim c;
      c.attempts = 1;
      c.payload_hash = hashes[i];
      claims.push_back(c);
      fresh.push_back(true);
    } else {
      claims.push_back(Verdict(rows, it->second, owner));
      fresh.push_back(false);
    }
  }
  BatchRun out;
  size_t cut = 0;
  while (cut < records.size() && accept(records[cut], claims[cut])) ++cut;
  out.claims.assign(claims.begin(),
                    claims.begin() + static_cast<std::ptrdiff_t>(std::min(cut + 1, claims.size())));
  std::vector<size_t> runnable;  // records[i] to run, in order
  for (size_t i = 0; i < cut; ++i)
    if (fresh[i]) runnable.push_back(i);
  if (runnable.empty()) {
    // Nothing to run: the rows inserted for records after the refused one go with the
    // rollback, and the locks of the others are let go.
    d.Rollback();
    return out;
  }

  // The keys of records from runnable[from] on, and the new keys after the refused record:
  // the rows that are not (yet) their records' outcome.
  auto rest = [&](size_t from) {
    std::vector<std::string> k;
    for (size_t r = from; r < runnable.size(); ++r) k.push_back(keys[runnable[r]]);
    for (size_t i = cut; i < records.size(); ++i)
      if (fresh[i]) k.push_back(keys[i]);
    return k;
  };
  const std::string to_claim =
      "UPDATE " + t +
      " SET state = 'PENDING', result = NULL, locked_by = $3, locked_at = now(),"
      " expires_at = now() + $4::bigint * interval '1 millisecond', updated_at = now()"
      " WHERE consumer_name = $1 AND idempotency_key = ANY($2::text[])";
  const std::string give_back = "DELETE FROM " + t +
                                " WHERE consumer_name = $1 AND idempotency_key = ANY($2::text[])"
                                " AND (locked_by IS NULL OR locked_by = $3)";
  const std::string mark = "UPDATE " + t + kMarkSql;

  BatchPipeline pipe(d.conn.get());
  std::vector<RunOutcome> outcomes;
  // Completed records whose row still needs its final state: a result to store, or a row
  // turned into a claim before its handler ran (below).
  std::vector<std::string> marked_keys, marked_results;
  size_t current = 0;                    // the runnable record whose handler runs
  size_t claims_from = runnable.size();  // runnable records from here on hold claim rows
  // The statements that make the rows the batch's outcome if it ends with runnable[stop]
  // (failed or refused: its row becomes a claim, as the two-step path leaves it) and the
  // records after it not run (their rows go: given back, the attempt uncounted).
  auto queue_outcome = [&](size_t stop) {
    const std::vector<std::string> gone = rest(stop < runnable.size() ? stop + 1 : stop);
    if (marked_keys.empty() && stop >= runnable.size() && gone.empty()) return;
    for (const char* s : kByKey) pipe.Queue(s);
    if (!marked_keys.empty())
      pipe.Queue(mark, {consumer, PgTextArray(marked_keys), PgTextArray(marked_results),
                        Ms(completed_ttl)});
    if (stop < runnable.size())
      pipe.Queue(to_claim, {consumer, PgTextArray({keys[runnable[stop]]}), owner, Ms(lease)});
    if (!gone.empty()) pipe.Queue(give_back, {consumer, PgTextArray(gone), owner});
  };
  // A handler statement that ends the transaction commits (or undoes) what is queued before
  // it: this record and the ones after it must not be committed COMPLETED.
  pipe.OnTransactionEnd([&] { queue_outcome(current); });
  // A handler that takes the connection itself could end the transaction unseen: from then
  // on the rows not yet completed are claims, as in the two-step path, and are marked at the
  // end.
  pipe.OnRawConnection([&] {
    claims_from = current;
    for (const char* s : kByKey) pipe.Queue(s);
    pipe.Queue(to_claim, {consumer, PgTextArray(rest(current)), owner, Ms(lease)});
    for (const char* s : kPlannerDefaults) pipe.Queue(s);
  });
  for (; current < runnable.size(); ++current) {
    const BatchRecord& r = records[runnable[current]];
    RunOutcome o;
    pipe.Queue("SAVEPOINT walrelay_record");
    HandlerContext ctx(*r.message, r.key, claims[runnable[current]].attempts, d.conn.get());
    ctx.set_prelude(&pipe);
    o.handler = CallHandler(handler, ctx);
    if (PQstatus(d.conn.get()) != CONNECTION_OK)
      return fail(Status::Connection("lost PostgreSQL connection to " + DescribePg(d.conn.get()) +
                                     " while the handler of key '" + r.key + "' ran"));
    if (!pipe.error().ok()) return fail(pipe.error());
    const PGTransactionStatusType tx = PQtransactionStatus(d.conn.get());
    if (tx != PQTRANS_INTRANS && tx != PQTRANS_INERROR) {
      // The handler ended the transaction. Committed: the records before it stand, this one
      // is refused as Run refuses it, the rows of the later ones go; the statements that make
      // it so went before the handler's own (written again here, in case it was not
      // recognised). Undone: nothing of the batch was kept.
      d.Rollback();
      auto status = d.Exec("SELECT txid_status($1::bigint)", {xid});
      if (!status.ok()) return status.status().WithContext(where);
      if (Text(status->get(), 0, 0) != "committed") {
        out.one_by_one = true;
        return out;
      }
      if (!marked_keys.empty()) {
        auto marked = d.Exec(mark, {consumer, PgTextArray(marked_keys), PgTextArray(marked_results),
                                    Ms(completed_ttl)});
        if (!marked.ok()) return marked.status().WithContext(where);
      }
      auto claimed = d.Exec(to_claim, {consumer, PgTextArray({r.key}), owner, Ms(lease)});
      if (!claimed.ok()) return claimed.status().WithContext(where);
      auto gone = d.Exec(give_back, {consumer, PgTextArray(rest(current + 1)), owner});
      if (!gone.ok()) return gone.status().WithContext(where);
      o.kind = RunOutcome::Kind::kFailed;
      o.handler = HandlerResult::Reject(
          "HandlerEndedTransaction",
          "the handler committed or rolled back the store's transaction itself; its writes may "
          "have been committed without the key");
      outcomes.push_back(o);
      out.outcomes = std::move(outcomes);
      return out;
    }
    if (o.handler.kind == HandlerResult::Kind::kDone && tx == PQTRANS_INERROR)
      o.handler = HandlerResult::Retry(
          "sqlstate:25P02",
          "the handler returned success but a statement of its transaction failed");
    if (o.handler.kind != HandlerResult::Kind::kDone) {
      // This record's writes go; the records before it stay, the ones after it are not run.
      pipe.Queue("ROLLBACK TO SAVEPOINT walrelay_record");
      pipe.Queue("RELEASE SAVEPOINT walrelay_record");
      o.kind = RunOutcome::Kind::kFailed;
      outcomes.push_back(o);
      break;
    }
    pipe.Queue("RELEASE SAVEPOINT walrelay_record");
    if (current >= claims_from || !o.handler.result.empty()) {
      marked_keys.push_back(r.key);
      marked_results.push_back(o.handler.result);
    }
    o.kind = RunOutcome::Kind::kCompleted;
    outcomes.push_back(o);
  }
  // The rows' final states and the COMMIT in one round trip, atomic with the handlers' writes.
  pipe.OnTransactionEnd(nullptr);
  queue_outcome(current);
  pipe.Queue("COMMIT");
  if (Status st = pipe.Send(); !st.ok()) {
    if (!pipe.committing_failed()) return fail(st);
    // A deferred constraint or serialization failure: nothing of the batch was kept. One by
    // one, the failing record is then found and the others complete.
    d.Rollback();
    out.one_by_one = true;
    return out;
  }
  out.outcomes = std::move(outcomes);
  return out;
}

Status PostgresStore::Unclaim(const std::string& consumer, const std::string& key,
                              const std::string& owner) {
  Impl& d = *impl_;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  auto r = d.Exec("UPDATE " + d.options.table + kUnclaimSql, {consumer, PgTextArray({key}), owner});
  if (!r.ok()) return r.status().WithContext("giving back key '" + key + "' in " + d.options.table);
  return Status::Ok();
}

Status PostgresStore::Release(const std::string& consumer, const std::string& key,
                              const std::string& owner, const std::string& error) {
  Impl& d = *impl_;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  auto r = d.Exec("UPDATE " + d.options.table +
                      " SET locked_by = NULL, last_error = $4,"
                      " updated_at = now() WHERE consumer_name = $1 AND idempotency_key = $2"
                      " AND locked_by = $3 AND state = 'PENDING'",
                  {consumer, key, owner, error});
  if (!r.ok()) return r.status().WithContext("releasing key '" + key + "' in " + d.options.table);
  return Status::Ok();
}

Result<bool> PostgresStore::MarkFailed(const std::string& consumer, const std::string& key,
                                       const std::string& owner, int64_t, const std::string& error,
                                       std::chrono::milliseconds failed_ttl) {
  Impl& d = *impl_;
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  const std::string& t = d.options.table;
  // Only this owner's claim (the row lock of a run excludes a second runner; the owner is what
  // a takeover changes), or a key no longer there; a COMPLETED key is left alone.
  auto r =
      d.Exec("INSERT INTO " + t +
                 " AS k (consumer_name, idempotency_key, state, attempts,"
                 " expires_at, last_error) VALUES ($1, $2, 'FAILED', 0,"
                 " now() + $4::bigint * interval '1 millisecond', $3)"
                 " ON CONFLICT (consumer_name, idempotency_key) DO UPDATE SET state = 'FAILED',"
                 " locked_by = NULL, last_error = EXCLUDED.last_error,"
                 " expires_at = EXCLUDED.expires_at, updated_at = now()"
                 " WHERE k.state = 'PENDING' AND k.locked_by = $5 RETURNING 1",
             {consumer, key, error, Ms(failed_ttl), owner});
  if (!r.ok()) return r.status().WithContext("marking key '" + key + "' FAILED in " + t);
  return PQntuples(r->get()) == 1;
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
