// PgSandbox: a throwaway PostgreSQL (15+) cluster with wal2json logical decoding enabled, for
// `walrelay demo` and the integration tests.
//
// Contract: Start() initdb's a fresh cluster in a new temporary directory ($TMPDIR or /tmp),
// starts it listening on 127.0.0.1 only, on a free port, with trust authentication for user
// `postgres` (including replication connections), wal_level=logical and durability off. The
// object owns the server: the destructor stops it (immediate shutdown, SIGKILL as a fallback)
// and deletes the directory, also while unwinding from an exception. If the owning process dies
// without unwinding (SIGKILL, abort) the daemonised postmaster survives; server.log and the
// directory name (walrelay-pg-*) identify it.
//
// Server binaries come from $WALRELAY_PG_BINDIR, else the newest /usr/lib/postgresql/<N>/bin
// with N >= 15. PostgreSQL refuses to run as root, so under euid 0 the cluster belongs to the
// `postgres` OS user and initdb/pg_ctl run through `runuser -u postgres --`.
//
// Some PostgreSQL builds restrict which libraries may serve as logical decoding output plugins
// (GUC output_plugin_libraries); when the server has that setting, wal2json is added to it.
//
// Thread-safety: Exec/Query/QueryValue and the accessors may be called concurrently (each query
// uses its own connection). Stop/Restart must not race with each other or with destruction.
#pragma once

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
  void KillPostmaster();

  std::string bin_dir_;
  std::string base_dir_;
  std::string data_dir_;
  std::string log_path_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  bool run_as_postgres_ = false;  // euid 0: run tools through runuser
  bool running_ = false;
  std::vector<std::string> extra_settings_;
};

}  // namespace walrelay::devtools
