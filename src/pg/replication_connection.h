// ReplicationConnection: one libpq connection in logical replication mode
// (replication=database) to the configured database, with the checks, slot management and
// CopyBoth streaming walrelay needs.
//
// Streaming is non-blocking on the read side: ReadMessage() returns what libpq has buffered
// and the caller waits on socket() for more. Not thread-safe.
//
// Connecting and the setup queries wait in slices, so they can be interrupted: with a cancel
// flag (Connect's `cancel`) set from another thread the connection attempt ends, or the running
// query is cancelled on the server (PQcancel), within about 100 ms. Setup queries are limited
// to database.query.timeout.ms; CREATE_REPLICATION_SLOT is not, as it waits for the
// transactions running on the server to end, however long they take.
// Failures say by their ErrorCode whether retrying can help (pg/connect_failure.h).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/lsn.h"
#include "common/status.h"
#include "config/relay_settings.h"
#include "pg/pg_handles.h"

namespace walrelay {

struct SlotInfo {
  bool exists = false;
  std::string plugin;
  std::string database;
  bool active = false;
  std::optional<int> active_pid;
  Lsn confirmed_flush;
  Lsn restart_lsn;
  std::string wal_status;  // "reserved", "extended", "unreserved", "lost"
  // Why a lost slot was invalidated: invalidation_reason on 17+, "conflict" for a conflicting
  // slot on 16, else "wal_removed" (the only cause before 16).
  std::string invalidation_reason;
};

struct ServerInfo {
  int server_version = 0;  // e.g. 150018
  std::string wal_level;
  bool can_replicate = false;  // REPLICATION or superuser
  std::string system_id;       // IDENTIFY_SYSTEM: which cluster
  int timeline = 0;  // IDENTIFY_SYSTEM: which timeline (a promoted standby starts a new one)
  Lsn current_wal;
};

class ReplicationConnection {
 public:
  // Connects with `settings.pg_params` plus replication=database. Errors never contain the
  // password: libpq's message is reported with the host/port/db/user it was for.
  // `cancel`, if given, must outlive the connection.
  static Result<ReplicationConnection> Connect(const RelaySettings& settings,
                                               const std::atomic<bool>* cancel = nullptr);

  Result<ServerInfo> InspectServer();
  Result<SlotInfo> InspectSlot(const std::string& slot_name);
  // Whether every plain table name in `tables` exists; returns the missing ones.
  Result<std::vector<std::string>> MissingTables(const std::vector<std::string>& tables);

  // A setup query (SQL, before START_REPLICATION), limited to database.query.timeout.ms. On
  // failure last_sqlstate() is the server's SQLSTATE ("" if it never answered).
  Result<PgResultPtr> Query(const std::string& sql, ExecStatusType expected = PGRES_TUPLES_OK);
  const std::string& last_sqlstate() const { return last_sqlstate_; }
  std::string QuoteLiteral(const std::string& literal) { return Quote(literal); }
  std::string QuoteIdentifier(const std::string& identifier);

  // CREATE_REPLICATION_SLOT ... LOGICAL <plugin>; returns the slot's consistent point. A slot
  // of that name created meanwhile by another process is kSlotInUse.
  // `failover` (slot.failover) needs PostgreSQL 17; older servers are a kConfig error naming
  // the key.
  Result<Lsn> CreateSlot(const std::string& slot_name, const std::string& plugin,
                         bool failover = false);
  Status DropSlot(const std::string& slot_name);
  // TIMELINE_HISTORY: the content of timeline `timeline`'s history file (its ancestors and
  // where each ended; delivery/timeline.h parses it). Timeline 1 has none: "".
  Result<std::string> TimelineHistory(int timeline);

  // START_REPLICATION with `options`, the decoder's (Decoder::StartReplicationOptions()).
  // `start` 0/0 resumes from the slot's confirmed_flush_lsn; the server never goes below it. A
  // slot taken meanwhile by another process is kSlotInUse.
  Status StartReplication(const std::string& slot_name, Lsn start, const std::string& options);

  int socket() const { return PQsocket(conn_.get()); }
  // The server process serving this connection (the walsender).
  int backend_pid() const { return PQbackendPID(conn_.get()); }
  // Forgets Connect's cancel flag, for a connection that outlives it.
  void ForgetCancelFlag() { cancel_ = nullptr; }

  enum class ReadStatus { kMessage, kWouldBlock, kEnded };
  // Next CopyData message, if libpq has one buffered. The view stays valid until the next call.
  Result<ReadStatus> ReadMessage(std::string_view& message);
  // Pulls bytes from the socket into libpq's buffer after the socket became readable.
  Status ConsumeInput();
  Status SendStandbyStatus(Lsn write, Lsn flush, bool reply_requested);
  // Ends the COPY (CopyDone) and drains what the server still sends, so a late error is seen.
  Status EndStreaming();

 private:
  ReplicationConnection(PgConnPtr conn, std::string where, const std::atomic<bool>* cancel,
                        int64_t query_timeout_ms)
      : conn_(std::move(conn)),
        where_(std::move(where)),
        cancel_(cancel),
        query_timeout_ms_(query_timeout_ms) {}
  enum class Limit { kQueryTimeout, kNone };
  // Runs `sql`; a failure's SQLSTATE is left in last_sqlstate_.
  Result<PgResultPtr> Exec(const std::string& sql, ExecStatusType expected,
                           Limit limit = Limit::kQueryTimeout);
  std::string Quote(const std::string& literal);
  Status Error(const std::string& what) const;
  bool cancelled() const { return cancel_ && cancel_->load(); }

  PgConnPtr conn_;
  std::string where_;  // "host:port/db as user", for messages
  const std::atomic<bool>* cancel_ = nullptr;
  int64_t query_timeout_ms_ = 0;
  std::string last_sqlstate_;
  PgBufferPtr buffer_;
};

}  // namespace walrelay
