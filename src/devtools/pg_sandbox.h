// PgSandbox: a throwaway PostgreSQL cluster with logical decoding enabled, for `walrelay demo`
// and the integration tests; also physical standbys of one, for failover tests.
//
// Contract: Start() initdb's a fresh cluster in a new temporary directory ($TMPDIR or /tmp),
// starts it listening on 127.0.0.1 only, on a free port, with trust authentication for user
// `postgres` (including replication connections), wal_level=logical and durability off. The
// object owns the server: the destructor stops it (immediate shutdown, SIGKILL as a fallback)
// and deletes the directory, also while unwinding from an exception. If the owning process dies
// without unwinding (SIGKILL, abort) the daemonised postmaster survives; server.log and the
// directory name (walrelay-pg-*) identify it.
//
// Server binaries: PgSandboxOptions::bin_dir, else for PgSandboxOptions::major N the directory
// /usr/lib/postgresql/N/bin or the build scripts/fetch-postgres.sh put in
// ${WALRELAY_CACHE_DIR:-~/.cache/walrelay}/postgres-N.*/bin, else (major 0, the default)
// $WALRELAY_PG_BINDIR or the newest /usr/lib/postgresql/<N>/bin with N >= 15 (Debian's 15).
// PostgreSQL refuses to run as root, so under euid 0 the cluster belongs to the `postgres` OS
// user and initdb/pg_ctl run through `runuser -u postgres --`; a binary tree that user cannot
// reach (the cache under /root) is mirrored once into /tmp/walrelay-pgbin-<name> and run there.
// The fetched builds have pgoutput but no wal2json: the wal2json check applies to Debian's only.
//
// Standbys: StartStandby() clones a running sandbox without pg_basebackup (an online
// pg_backup_start/pg_backup_stop file copy, or a cold copy of the briefly stopped primary) into a
// new sandbox that streams from it through a physical slot; Promote() ends its recovery (a new
// timeline); KillServer() is kill -9 of a server and all its processes (a crash).
//
// Some PostgreSQL builds restrict which libraries may serve as logical decoding output plugins
// (GUC output_plugin_libraries); when the server has that setting, wal2json is added to it.
//
// Thread-safety: Exec/Query/QueryValue and the accessors may be called concurrently (each query
// uses its own connection). Stop/Restart/KillServer/Promote must not race with each other or
// with destruction.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace walrelay::devtools {

struct PgSandboxOptions {
  // "name=value" server settings, passed as -c to the server; they override the defaults.
  std::vector<std::string> extra_settings;
  // The server's log_line_prefix in server.log; "" keeps PostgreSQL's default ("%m [%p] ").
  std::string log_prefix;
  // PostgreSQL major version to run (13, 14, 15, 16, 17, 18); 0 = the default binaries above.
  // A major whose binaries are missing is a Precondition error naming the fetch script.
  int major = 0;
  // Explicit directory holding initdb, pg_ctl and postgres; overrides `major`.
  std::string bin_dir;
};

// How StartStandby() makes and configures a physical standby.
struct PgStandbyOptions {
  // Physical replication slot on the primary that the standby streams through
  // (primary_slot_name). Created on the primary, reserving WAL, before the copy if missing.
  std::string slot_name = "walrelay_standby";
  // Extra "name=value" settings for the standby only (e.g. sync_replication_slots=on,
  // hot_standby_feedback=on), on top of the primary's extra settings.
  std::vector<std::string> extra_settings;
  // false: online copy between pg_backup_start and pg_backup_stop (the primary keeps serving).
  // true: fast-stop the primary, copy its directory, start it again on the same port.
  bool cold_copy = false;
  // Wait until the primary reports the standby as streaming (pg_stat_replication).
  bool wait_streaming = true;
};

class PgSandbox {
 public:
  using Row = std::vector<std::optional<std::string>>;  // nullopt = SQL NULL

  static Result<std::unique_ptr<PgSandbox>> Start(const PgSandboxOptions& opts = {});

  PgSandbox(const PgSandbox&) = delete;
  PgSandbox& operator=(const PgSandbox&) = delete;
  ~PgSandbox();

  // Fast shutdown (disconnects clients, checkpoints). The directory stays until destruction.
  Status Stop();
  // Fast shutdown if running, then start again on the same port and directory.
  Status Restart();

  // A physical standby of this running server (see PgStandbyOptions): same binaries, a new
  // directory and port, standby.signal, primary_conninfo naming dbname=postgres (slot sync
  // needs a database) and application_name=<slot_name>, hot_standby=on. The primary's logical
  // slots are not copied (on 17 a standby gets them through slot synchronization instead).
  Result<std::unique_ptr<PgSandbox>> StartStandby(const PgStandbyOptions& opts = {});

  // Ends a standby's recovery (pg_ctl promote, waiting until it accepts writes): it continues
  // on a new timeline.
  Status Promote();

  // SIGKILLs the postmaster and every process of the server (a crash, e.g. of the machine): no
  // shutdown checkpoint, clients see the connection drop. The directory stays; Restart() runs
  // crash recovery.
  Status KillServer();

  // Whether the server has the wal2json output plugin (Debian's builds do; the fetched ones
  // serve pgoutput only).
  bool has_wal2json() const { return has_wal2json_; }
  // The server's major version (from server_version_num), e.g. 13 or 17.
  int major_version() const { return major_version_; }
  // The server's current timeline (from the name of the current WAL file; right after a
  // promotion pg_control_checkpoint() still reports the old one).
  Result<int> Timeline() const;

  // Puts `lines` at the top of pg_hba.conf, above every line already there (the default
  // trust entries included), so they decide for the connections they match, e.g.
  // "hostssl all relay 127.0.0.1/32 cert". The server reads the file when it starts: call
  // Restart() to apply them. Lines must leave user postgres its trust access from 127.0.0.1,
  // which Exec/Query use. Must not race with Stop/Restart.
  Status AddHbaLines(const std::vector<std::string>& lines);

  // True while the postmaster is up (checks the live process, not just our bookkeeping).
  bool running() const;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& log_path() const { return log_path_; }
  // The temporary directory holding data_dir(), server.log and the unix socket.
  const std::string& base_dir() const { return base_dir_; }

  // libpq keyword/value connection string: "host=127.0.0.1 port=N user=postgres dbname=...".
  std::string ConnInfo(const std::string& dbname = "postgres") const;

  // Runs `sql` (may hold several statements) on a fresh connection to database "postgres".
  Status Exec(const std::string& sql) const;
  // Rows of the last statement's result; empty for statements that return no rows.
  Result<std::vector<Row>> Query(const std::string& sql) const;
  // First column of the first row; an error if there is no row or the value is NULL.
  Result<std::string> QueryValue(const std::string& sql) const;

 private:
  PgSandbox() = default;

  // Runs a server program (initdb, pg_ctl, postgres) as the cluster owner. `log_name` is a
  // file in base_dir_ that receives its output; returns the exit code and that output.
  struct CommandResult {
    int exit_code = -1;
    std::string output;
  };
  Result<CommandResult> RunTool(const std::string& program, const std::vector<std::string>& args,
                                const std::string& log_name, int timeout_seconds) const;
  Status StartServer();
  Status ConfigureCluster();
  Status StartServerRetryingPort();
  Status ReadMajorVersion();
  Status CopyDataDirFrom(const PgSandbox& primary, bool copy_wal);
  void KillPostmaster();

  std::string bin_dir_;
  std::string base_dir_;
  std::string data_dir_;
  std::string log_path_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  bool run_as_postgres_ = false;  // euid 0: run tools through runuser
  bool running_ = false;
  bool standby_ = false;
  bool has_wal2json_ = false;
  int major_version_ = 0;
  uid_t pg_uid_ = 0;  // the cluster's owner under euid 0
  gid_t pg_gid_ = 0;
  std::vector<std::string> extra_settings_;
};

}  // namespace walrelay::devtools
