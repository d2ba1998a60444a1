// ReplicationConnection: one libpq connection in logical replication mode
// (replication=database) to the configured database, with the checks, slot management and
// CopyBoth streaming walrelay needs.
//
// Streaming is non-blocking on the read side: ReadMessage() returns what libpq has buffered
// and the caller waits on socket() for more. Not thread-safe.
#pragma once

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
};

struct ServerInfo {
  int server_version = 0;  // e.g. 150018
  std::string wal_level;
  bool can_replicate = false;  // REPLICATION or superuser
  std::string system_id;
  Lsn current_wal;
};

class ReplicationConnection {
 public:
  // Connects with `settings.pg_params` plus replication=database. Errors never contain the
  // password: libpq's message is reported with the host/port/db/user it was for.
  static Result<ReplicationConnection> Connect(const RelaySettings& settings);

  Result<ServerInfo> InspectServer();
  Result<SlotInfo> InspectSlot(const std::string& slot_name);
  // Whether every plain table name in `tables` exists; returns the missing ones.
  Result<std::vector<std::string>> MissingTables(const std::vector<std::string>& tables);

  // CREATE_REPLICATION_SLOT ... LOGICAL wal2json; returns the slot's consistent point.
  Result<Lsn> CreateSlot(const std::string& slot_name);
  Status DropSlot(const std::string& slot_name);

  // START_REPLICATION with the wal2json options walrelay decodes. `start` 0/0 resumes from
  // the slot's confirmed_flush_lsn; the server never goes below it.
  Status StartReplication(const std::string& slot_name, Lsn start, const std::string& add_tables);

  int socket() const { return PQsocket(conn_.get()); }

  enum class ReadStatus { kMessage, kWouldBlock, kEnded };
  // Next CopyData message, if libpq has one buffered. The view stays valid until the next call.
  Result<ReadStatus> ReadMessage(std::string_view& message);
  // Pulls bytes from the socket into libpq's buffer after the socket became readable.
  Status ConsumeInput();
  Status SendStandbyStatus(Lsn write, Lsn flush, bool reply_requested);
  // Ends the COPY (CopyDone) and drains what the server still sends, so a late error is seen.
  Status EndStreaming();

 private:
  explicit ReplicationConnection(PgConnPtr conn, std::string where)
      : conn_(std::move(conn)), where_(std::move(where)) {}
  Result<PgResultPtr> Exec(const std::string& sql, ExecStatusType expected);
  std::string Quote(const std::string& literal);
  Status Error(const std::string& what) const;

  PgConnPtr conn_;
  std::string where_;  // "host:port/db as user", for messages
  PgBufferPtr buffer_;
};

}  // namespace walrelay
