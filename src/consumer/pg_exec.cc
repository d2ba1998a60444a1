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

namespace {

struct ParamArrays {
  std::vector<const char*> values;
  std::vector<int> lengths;
  explicit ParamArrays(const SqlParams& params) {
    values.reserve(params.size());
    for (const auto& p : params) {
      values.push_back(p ? p->c_str() : nullptr);
      lengths.push_back(p ? static_cast<int>(p->size()) : 0);
    }
  }
};

}  // namespace

Result<PgResultPtr> ExecPg(PGconn* conn, const std::string& sql, const SqlParams& params) {
  const ParamArrays a(params);
  PgResultPtr res(PQexecParams(conn, sql.c_str(), static_cast<int>(params.size()), nullptr,
                               a.values.data(), a.lengths.data(), nullptr, 0));
  return CheckPg(conn, std::move(res));
}

Result<PgResultPtr> CheckPg(PGconn* conn, PgResultPtr res) {
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

Result<std::vector<PgResultPtr>> ExecPipeline(PGconn* conn,
                                              const std::vector<PgStatement>& statements,
                                              size_t* failed_at) {
  auto lost = [conn](const char* doing) {
    return Status::Connection("lost PostgreSQL connection to " + DescribePg(conn) + " " + doing +
                              ": " + OneLine(PQerrorMessage(conn)));
  };
  if (PQenterPipelineMode(conn) != 1) return lost("entering pipeline mode");
  for (const PgStatement& s : statements) {
    const ParamArrays a(s.params);
    const int n = static_cast<int>(s.params.size());
    const int sent = s.prepared ? PQsendQueryPrepared(conn, s.sql.c_str(), n, a.values.data(),
                                                      a.lengths.data(), nullptr, 0)
                                : PQsendQueryParams(conn, s.sql.c_str(), n, nullptr,
                                                    a.values.data(), a.lengths.data(), nullptr, 0);
    if (sent != 1) {
      PQexitPipelineMode(conn);
      return lost("sending a pipeline");
    }
  }
  if (PQpipelineSync(conn) != 1) {
    PQexitPipelineMode(conn);
    return lost("sending a pipeline");
  }
  std::vector<PgResultPtr> results;
  Status first_error;
  for (size_t i = 0; i < statements.size(); ++i) {
    PgResultPtr res(PQgetResult(conn));
    if (!res) return lost("reading a pipeline");
    // Each statement's results end with a null result.
    while (PGresult* extra = PQgetResult(conn)) PQclear(extra);
    if (PQresultStatus(res.get()) == PGRES_PIPELINE_ABORTED) {
      results.emplace_back();
      continue;
    }
    auto checked = CheckPg(conn, std::move(res));
    if (!checked.ok()) {
      if (first_error.ok() && failed_at != nullptr) *failed_at = i;
      if (first_error.ok()) first_error = checked.status();
      results.emplace_back();
      continue;
    }
    results.push_back(std::move(checked).value());
  }
  PgResultPtr sync(PQgetResult(conn));
  if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) return lost("ending a pipeline");
  if (PQexitPipelineMode(conn) != 1) return lost("leaving pipeline mode");
  if (!first_error.ok()) return first_error;
  return results;
}

std::string PgTextArray(const std::vector<std::string>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

std::string SqlStateOf(const Status& status) {
  const std::string& m = status.message();
  if (m.rfind("sqlstate:", 0) != 0 || m.size() < 14) return "";
  return m.substr(9, 5);
}

}  // namespace walrelay::consumer
