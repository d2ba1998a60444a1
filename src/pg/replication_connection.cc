#include "pg/replication_connection.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "common/pg_time.h"
#include "pg/connect_failure.h"
#include "pg/wire_messages.h"

namespace walrelay {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kDuplicateObject = "42710";
constexpr const char* kObjectInUse = "55006";

// Waits until `fd` is ready for `events`, at most until `deadline` and at most 100 ms, so the
// caller looks at its cancel flag in between.
void WaitForSocket(int fd, short events, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const int slice = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 100));
  if (fd < 0) {
    poll(nullptr, 0, slice);
    return;
  }
  pollfd p{fd, events, 0};
  poll(&p, 1, slice);
}

std::string Trimmed(const char* message) {
  std::string s = message ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (auto& c : s)
    if (c == '\n' || c == '\t') c = ' ';
  return s;
}

std::string ParamValue(const RelaySettings& s, const std::string& key) {
  for (const auto& [k, v] : s.pg_params)
    if (k == key) return v;
  return "";
}

}  // namespace

Result<ReplicationConnection> ReplicationConnection::Connect(const RelaySettings& settings,
                                                             const std::atomic<bool>* cancel) {
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : settings.pg_params) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keys.push_back("replication");
  values.push_back("database");
  keys.push_back(nullptr);
  values.push_back(nullptr);
  const std::string where = ParamValue(settings, "host") + ":" + ParamValue(settings, "port") +
                            "/" + ParamValue(settings, "dbname") + " as " +
                            ParamValue(settings, "user");
  PgConnPtr conn(PQconnectStartParams(keys.data(), values.data(), 0));
  if (!conn) return Status::Connection("out of memory connecting to PostgreSQL at " + where);
  // Verbose errors carry the server's SQLSTATE, which decides whether to retry.
  PQsetErrorVerbosity(conn.get(), PQERRORS_VERBOSE);
  auto failed = [&]() -> Status {
    // libpq's text names host and user but never the password.
    ConnectFailure failure = ParseVerboseConnectError(PQerrorMessage(conn.get()));
    failure.where = where;
    failure.needs_password = PQconnectionNeedsPassword(conn.get()) != 0;
    return ClassifyConnectFailure(failure);
  };
  const auto deadline = Clock::now() + std::chrono::milliseconds(settings.connect_timeout_ms);
  PostgresPollingStatusType polling = PGRES_POLLING_WRITING;
  while (true) {
    if (PQstatus(conn.get()) == CONNECTION_BAD || polling == PGRES_POLLING_FAILED) return failed();
    if (polling == PGRES_POLLING_OK) break;
    if (cancel && cancel->load())
      return Status::Connection("connecting to " + where + " was cancelled");
    if (Clock::now() >= deadline) {
      return Status::Connection("cannot connect to PostgreSQL at " + where + ": no answer within " +
                                std::to_string(settings.connect_timeout_ms) +
                                " ms (database.connect.timeout.ms)");
    }
    // The socket can change between attempts (several addresses, SSL then plain).
    WaitForSocket(PQsocket(conn.get()), polling == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                  deadline);
    polling = PQconnectPoll(conn.get());
  }
  PQsetErrorVerbosity(conn.get(), PQERRORS_DEFAULT);
  return ReplicationConnection(std::move(conn), where, cancel, settings.query_timeout_ms);
}

Status ReplicationConnection::Error(const std::string& what) const {
  return Status::Connection(what + " (" + where_ + "): " + Trimmed(PQerrorMessage(conn_.get())));
}

std::string ReplicationConnection::Quote(const std::string& literal) {
  PgBufferPtr quoted(PQescapeLiteral(conn_.get(), literal.c_str(), literal.size()));
  return quoted ? std::string(quoted.get()) : "''";
}

Result<PgResultPtr> ReplicationConnection::Exec(const std::string& sql, ExecStatusType expected,
                                                Limit limit) {
  last_sqlstate_.clear();
  const std::string what = "'" + sql.substr(0, 120) + "'";
  if (PQsendQuery(conn_.get(), sql.c_str()) == 0) return Error("could not send " + what);
  const auto deadline = limit == Limit::kQueryTimeout && query_timeout_ms_ > 0
                            ? Clock::now() + std::chrono::milliseconds(query_timeout_ms_)
                            : Clock::time_point::max();
  while (PQisBusy(conn_.get())) {
    const bool stop = cancelled();
    if (stop || Clock::now() >= deadline) {
      // The server stops working on it; the caller drops this connection.
      if (std::unique_ptr<PGcancel, void (*)(PGcancel*)> handle{PQgetCancel(conn_.get()),
                                                                PQfreeCancel}) {
        char ignored[256];
        PQcancel(handle.get(), ignored, sizeof ignored);
      }
      if (stop) return Status::Connection(what + " was cancelled (" + where_ + ")");
      return Status::Connection("PostgreSQL (" + where_ + ") did not answer " + what + " within " +
                                std::to_string(query_timeout_ms_) +
                                " ms (database.query.timeout.ms)");
    }
    WaitForSocket(PQsocket(conn_.get()), POLLIN, deadline);
    if (PQconsumeInput(conn_.get()) == 0) return Error("lost the connection during " + what);
  }
  PgResultPtr res;
  while (PgResultPtr next{PQgetResult(conn_.get())}) {
    const ExecStatusType status = PQresultStatus(next.get());
    // The first error is the cause; COPY results come last and end the query's results.
    if (!res || PQresultStatus(res.get()) != PGRES_FATAL_ERROR) res = std::move(next);
    if (status == PGRES_COPY_BOTH || status == PGRES_COPY_IN || status == PGRES_COPY_OUT) break;
  }
  if (!res || PQresultStatus(res.get()) != expected) {
    if (res) {
      const char* state = PQresultErrorField(res.get(), PG_DIAG_SQLSTATE);
      last_sqlstate_ = state ? state : "";
    }
    const char* msg = res ? PQresultErrorMessage(res.get()) : PQerrorMessage(conn_.get());
    return Status::Connection("PostgreSQL (" + where_ + ") rejected " + what + ": " + Trimmed(msg));
  }
  return res;
}

Result<PgResultPtr> ReplicationConnection::Query(const std::string& sql, ExecStatusType expected) {
  return Exec(sql, expected);
}

std::string ReplicationConnection::QuoteIdentifier(const std::string& identifier) {
  PgBufferPtr quoted(PQescapeIdentifier(conn_.get(), identifier.c_str(), identifier.size()));
  return quoted ? std::string(quoted.get()) : "\"\"";
}

Result<ServerInfo> ReplicationConnection::InspectServer() {
  ServerInfo info;
  info.server_version = PQserverVersion(conn_.get());
  auto res = Exec("SELECT current_setting('wal_level'), "
                  "(SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user), "
                  "pg_current_wal_lsn()::text",
                  PGRES_TUPLES_OK);
  if (!res.ok()) return res.status();
  PGresult* r = res->get();
  info.wal_level = PQgetvalue(r, 0, 0);
  info.can_replicate = std::string(PQgetvalue(r, 0, 1)) == "t";
  if (auto lsn = Lsn::Parse(PQgetvalue(r, 0, 2)); lsn.ok()) info.current_wal = *lsn;
  auto ident = Exec("IDENTIFY_SYSTEM", PGRES_TUPLES_OK);
  if (!ident.ok()) return ident.status();
  info.system_id = PQgetvalue(ident->get(), 0, 0);
  info.timeline = std::atoi(PQgetvalue(ident->get(), 0, 1));
  return info;
}

Result<SlotInfo> ReplicationConnection::InspectSlot(const std::string& slot_name) {
  const int version = PQserverVersion(conn_.get());
  const std::string reason = version >= 170000   ? "invalidation_reason"
                             : version >= 160000 ? "CASE WHEN conflicting THEN 'conflict' END"
                                                 : "NULL::text";
  auto res = Exec("SELECT plugin, database, active, active_pid, confirmed_flush_lsn::text, "
                  "restart_lsn::text, wal_status, " +
                      reason +
                      " FROM pg_replication_slots "
                      "WHERE slot_name = " +
                      Quote(slot_name),
                  PGRES_TUPLES_OK);
  if (!res.ok()) return res.status();
  SlotInfo info;
  PGresult* r = res->get();
  if (PQntuples(r) == 0) return info;
  info.exists = true;
  info.plugin = PQgetvalue(r, 0, 0);
  info.database = PQgetvalue(r, 0, 1);
  info.active = std::string(PQgetvalue(r, 0, 2)) == "t";
  if (!PQgetisnull(r, 0, 3)) info.active_pid = std::atoi(PQgetvalue(r, 0, 3));
  if (!PQgetisnull(r, 0, 4))
    if (auto l = Lsn::Parse(PQgetvalue(r, 0, 4)); l.ok()) info.confirmed_flush = *l;
  if (!PQgetisnull(r, 0, 5))
    if (auto l = Lsn::Parse(PQgetvalue(r, 0, 5)); l.ok()) info.restart_lsn = *l;
  info.wal_status = PQgetisnull(r, 0, 6) ? "" : PQgetvalue(r, 0, 6);
  if (!PQgetisnull(r, 0, 7)) info.invalidation_reason = PQgetvalue(r, 0, 7);
  if (info.wal_status == "lost" && info.invalidation_reason.empty())
    info.invalidation_reason = "wal_removed";
  return info;
}

Result<std::vector<std::string>> ReplicationConnection::MissingTables(
    const std::vector<std::string>& tables) {
  std::vector<std::string> missing;
  for (const auto& t : tables) {
    const auto dot = t.find('.');
    if (dot == std::string::npos) continue;
    auto res =
        Exec("SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = " + Quote(t.substr(0, dot)) +
                 " AND tablename = " + Quote(t.substr(dot + 1)),
             PGRES_TUPLES_OK);
    if (!res.ok()) return res.status();
    if (PQntuples(res->get()) == 0) missing.push_back(t);
  }
  return missing;
}

Result<Lsn> ReplicationConnection::CreateSlot(const std::string& slot_name,
                                              const std::string& plugin, bool failover) {
  const int version = PQserverVersion(conn_.get());
  if (failover && version < 170000) {
    return Status::Config("'slot.failover'=true needs PostgreSQL 17 or later, which can "
                          "synchronize a slot to standbys; the server is " +
                          std::to_string(version / 10000) +
                          ": set slot.failover=false (after "
                          "a failover the slot is missing: exit 16)");
  }
  auto res = Exec("CREATE_REPLICATION_SLOT \"" + slot_name + "\" LOGICAL " + plugin +
                      (failover ? " (FAILOVER)" : ""),
                  PGRES_TUPLES_OK, Limit::kNone);
  if (!res.ok()) {
    if (last_sqlstate_ == kDuplicateObject) {
      return Status(ErrorCode::kSlotInUse, "replication slot '" + slot_name +
                                               "' was created by another process meanwhile (" +
                                               res.status().message() + ")");
    }
    // The server refused it (no such plugin, no free slot, ...): waiting does not change that.
    if (!last_sqlstate_.empty()) {
      return Status::Precondition("cannot create replication slot '" + slot_name +
                                  "' with plugin " + plugin + ": " + res.status().message());
    }
    return res.status();
  }
  return Lsn::Parse(PQgetvalue(res->get(), 0, 1));
}

Status ReplicationConnection::DropSlot(const std::string& slot_name) {
  auto res = Exec("DROP_REPLICATION_SLOT \"" + slot_name + "\"", PGRES_COMMAND_OK);
  return res.ok() ? Status::Ok() : res.status();
}

Result<std::string> ReplicationConnection::TimelineHistory(int timeline) {
  if (timeline <= 1) return std::string();
  auto res = Exec("TIMELINE_HISTORY " + std::to_string(timeline), PGRES_TUPLES_OK);
  if (!res.ok())
    return res.status().WithContext("reading timeline " + std::to_string(timeline) + "'s history");
  PGresult* r = res->get();
  if (PQntuples(r) != 1 || PQnfields(r) < 2)
    return Status::Protocol("TIMELINE_HISTORY " + std::to_string(timeline) +
                            " answered no history file (" + where_ + ")");
  return std::string(PQgetvalue(r, 0, 1), static_cast<size_t>(PQgetlength(r, 0, 1)));
}

Status ReplicationConnection::StartReplication(const std::string& slot_name, Lsn start,
                                               const std::string& options) {
  const std::string sql = "START_REPLICATION SLOT \"" + slot_name + "\" LOGICAL " +
                          start.ToString() + " (" + options + ")";
  auto res = Exec(sql, PGRES_COPY_BOTH);
  if (!res.ok() && last_sqlstate_ == kObjectInUse) {
    return Status(ErrorCode::kSlotInUse, res.status().message());
  }
  return res.ok() ? Status::Ok() : res.status();
}

Result<ReplicationConnection::ReadStatus> ReplicationConnection::ReadMessage(
    std::string_view& message) {
  char* raw = nullptr;
  const int len = PQgetCopyData(conn_.get(), &raw, 1);
  buffer_.reset(raw);
  if (len > 0) {
    message = std::string_view(raw, static_cast<size_t>(len));
    return ReadStatus::kMessage;
  }
  if (len == 0) return ReadStatus::kWouldBlock;
  if (len == -1) {
    PgResultPtr res(PQgetResult(conn_.get()));
    if (res && PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
      return Status::Connection("replication stream ended by the server (" + where_ +
                                "): " + Trimmed(PQresultErrorMessage(res.get())));
    }
    return ReadStatus::kEnded;
  }
  return Error("replication stream failed");
}

Status ReplicationConnection::ConsumeInput() {
  if (PQconsumeInput(conn_.get()) == 0) return Error("lost the replication connection");
  return Status::Ok();
}

Status ReplicationConnection::SendStandbyStatus(Lsn write, Lsn flush, bool reply_requested) {
  const std::string msg =
      EncodeStandbyStatus(write, flush, Lsn(), PgEpochMicrosNow(), reply_requested);
  if (PQputCopyData(conn_.get(), msg.data(), static_cast<int>(msg.size())) <= 0 ||
      PQflush(conn_.get()) != 0) {
    return Error("could not send a standby status update");
  }
  return Status::Ok();
}

Status ReplicationConnection::EndStreaming() {
  if (PQputCopyEnd(conn_.get(), nullptr) <= 0 || PQflush(conn_.get()) != 0)
    return Error("could not end the replication stream");
  // Drain synchronously so an error the server sends last is not lost.
  while (true) {
    char* raw = nullptr;
    const int len = PQgetCopyData(conn_.get(), &raw, 0);
    PgBufferPtr owned(raw);
    if (len < 0) break;
  }
  while (PgResultPtr res{PQgetResult(conn_.get())}) {
    if (PQresultStatus(res.get()) == PGRES_FATAL_ERROR)
      return Status::Connection("replication stream ended with an error (" + where_ +
                                "): " + Trimmed(PQresultErrorMessage(res.get())));
  }
  return Status::Ok();
}

}  // namespace walrelay
