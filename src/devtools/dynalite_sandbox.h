// DynaliteSandbox: a throwaway dynalite (an implementation of DynamoDB's HTTP API on LevelDB,
// from the npm registry) for the DynamoDB store's tests and the consumer benchmark.
//
// Contract: Start() runs `node <dynalite>/cli.js` as a child process bound to 127.0.0.1 on a
// free port, in memory (no --path), with tables ACTIVE at once (--createTableMs 0), its output
// in a new temporary directory ($TMPDIR or /tmp, walrelay-dynalite-*). dynalite is found at
// $WALRELAY_DYNALITE (its package directory), else where scripts/install-deps.sh puts it:
// ${XDG_CACHE_HOME:-$HOME/.cache}/walrelay/dynalite/node_modules/dynalite. Start() returns
// once the port accepts connections; a missing node or dynalite is a Precondition error that
// names the install script. The destructor stops the server by its pid (SIGTERM, SIGKILL after
// 5 s) and deletes the directory.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "devtools/child_process.h"

namespace walrelay::devtools {

// The dynalite package directory Start() uses, or "" when none is installed.
std::string FindDynalite();

class DynaliteSandbox {
 public:
  static Result<std::unique_ptr<DynaliteSandbox>> Start();

  DynaliteSandbox(const DynaliteSandbox&) = delete;
  DynaliteSandbox& operator=(const DynaliteSandbox&) = delete;
  ~DynaliteSandbox();

  int port() const { return port_; }
  pid_t pid() const { return server_ ? server_->pid() : 0; }
  // "http://127.0.0.1:<port>", for DynamoStoreOptions::endpoint.
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& log_path() const { return log_path_; }

 private:
  DynaliteSandbox() = default;

  int port_ = 0;
  std::string base_dir_;
  std::string log_path_;
  std::unique_ptr<ChildProcess> server_;
};

}  // namespace walrelay::devtools
