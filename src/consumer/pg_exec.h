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

// The SQLSTATE at the start of an ExecPg error message, or "".
std::string SqlStateOf(const Status& status);

// libpq's error text on one line.
std::string OneLine(const char* message);

}  // namespace walrelay::consumer
