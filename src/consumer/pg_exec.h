// libpq helpers shared by PostgresStore, HandlerContext::Exec and `walrelay consumer-gc`.
//
// Errors never contain the connection string: connection failures name host, port, database
// and user as libpq resolved them, which is where a password could otherwise leak from.
#pragma once

#include <libpq-fe.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "pg/pg_handles.h"

namespace walrelay::consumer {

using SqlParams = std::vector<std::optional<std::string>>;

// Connects with `conninfo`; a failure is a kConnection Status naming "host:port/db as user".
Result<PgConnPtr> ConnectPg(const std::string& conninfo, const std::string& purpose);

// "host:port/db as user" for `conn`, for messages.
std::string DescribePg(PGconn* conn);

// Runs one statement with text parameters. A statement error is a kPrecondition Status whose
// message is "sqlstate:<code>: <server message>"; a lost connection is kConnection.
Result<PgResultPtr> ExecPg(PGconn* conn, const std::string& sql, const SqlParams& params = {});

// `res` as ExecPg reports it: the result when it succeeded, else the error.
Result<PgResultPtr> CheckPg(PGconn* conn, PgResultPtr res);

// One statement of a pipeline.
struct PgStatement {
  std::string sql;  // or, with `prepared`, the statement's name for diagnostics
  SqlParams params;
  bool prepared = false;  // `sql` names a statement prepared on the connection
};

// Sends `statements` in libpq's pipeline mode, one round trip for all, and returns every
// result. The first failing statement's error (as ExecPg reports it) is returned instead; the
// server skipped the statements after it, and an open transaction is left for the caller to
// roll back. `failed_at`, when given, receives the failing statement's index.
Result<std::vector<PgResultPtr>> ExecPipeline(PGconn* conn,
                                              const std::vector<PgStatement>& statements,
                                              size_t* failed_at = nullptr);

// A PostgreSQL array literal ({"a","b"}) of `items`, for a text[] parameter.
std::string PgTextArray(const std::vector<std::string>& items);

// The SQLSTATE at the start of an ExecPg error message, or "".
std::string SqlStateOf(const Status& status);

// libpq's error text on one line.
std::string OneLine(const char* message);

}  // namespace walrelay::consumer
