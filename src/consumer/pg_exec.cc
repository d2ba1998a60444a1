#include "consumer/pg_exec.h"

namespace walrelay::consumer {

std::string OneLine(const char* message) {
  std::string s = message != nullptr ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (auto& c : s)
    if (c == '\n' || c == '\t') c = ' ';
  return s;
}

std::string DescribePg(PGconn* conn) {
  auto text = [](const char* v) { return std::string(v != nullptr ? v : "?"); };
  return text(PQhost(conn)) + ":" + text(PQport(conn)) + "/" + text(PQdb(conn)) + " as " +
         text(PQuser(conn));
}

Result<PgConnPtr> ConnectPg(const std::string& conninfo, const std::string& purpose) {
  PgConnPtr conn(PQconnectdb(conninfo.c_str()));
  if (!conn) return Status::Connection("out of memory connecting to PostgreSQL for " + purpose);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    // libpq's message names host and user but never the password.
    return Status::Connection("cannot connect to PostgreSQL at " + DescribePg(conn.get()) +
                              " for " + purpose + ": " + OneLine(PQerrorMessage(conn.get())));
  }
  return conn;
}

Result<PgResultPtr> ExecPg(PGconn* conn, const std::string& sql, const SqlParams& params) {
  std::vector<const char*> values;
  std::vector<int> lengths;
  values.reserve(params.size());
  for (const auto& p : params) {
    values.push_back(p ? p->c_str() : nullptr);
    lengths.push_back(p ? static_cast<int>(p->size()) : 0);
  }
  PgResultPtr res(PQexecParams(conn, sql.c_str(), static_cast<int>(params.size()), nullptr,
                               values.data(), lengths.data(), nullptr, 0));
  const ExecStatusType st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return res;
  if (PQstatus(conn) != CONNECTION_OK) {
    return Status::Connection("lost PostgreSQL connection to " + DescribePg(conn) + ": " +
                              OneLine(PQerrorMessage(conn)));
  }
  const char* code = res ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE) : nullptr;
  // The primary message alone: libpq's full text adds "ERROR:" and the statement's context.
  const char* msg = res ? PQresultErrorField(res.get(), PG_DIAG_MESSAGE_PRIMARY) : nullptr;
  if (msg == nullptr) msg = res ? PQresultErrorMessage(res.get()) : PQerrorMessage(conn);
  return Status::Precondition("sqlstate:" + std::string(code != nullptr ? code : "XX000") + ": " +
                              OneLine(msg));
}

std::string SqlStateOf(const Status& status) {
  const std::string& m = status.message();
  if (m.rfind("sqlstate:", 0) != 0 || m.size() < 14) return "";
  return m.substr(9, 5);
}

}  // namespace walrelay::consumer
