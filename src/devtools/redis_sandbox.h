// RedisSandbox: a throwaway redis-server (Debian's package) for the consumer tests and demos.
//
// Contract: Start() runs redis-server in the foreground as a child process, bound to
// 127.0.0.1 on a free port, with its working directory, log and (disabled) persistence in a
// new temporary directory ($TMPDIR or /tmp, walrelay-redis-*). It returns once the server
// answers PING. The destructor stops the server by its pid (SIGTERM, SIGKILL after 5 s) and
// deletes the directory. redis-server runs fine as root, so no user switch is needed.
//
// Thread-safety: Command() opens its own connection per call and may be called from any
// thread; Start/destruction must not race with it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "devtools/child_process.h"

namespace walrelay::devtools {

// Runs one command on the redis-server at host:port (after AUTH when `password` is not empty),
// rendered as RedisSandbox::Command describes. Opens and closes its own connection.
Result<std::string> RedisCommandAt(const std::string& host, int port,
                                   const std::vector<std::string>& args,
                                   const std::string& password = "");

class RedisSandbox {
 public:
  // `extra_args` are added to redis-server's command line, e.g. {"--requirepass", "pw"}.
  static Result<std::unique_ptr<RedisSandbox>> Start(
      const std::vector<std::string>& extra_args = {});

  RedisSandbox(const RedisSandbox&) = delete;
  RedisSandbox& operator=(const RedisSandbox&) = delete;
  ~RedisSandbox();

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  pid_t pid() const { return server_ ? server_->pid() : 0; }
  const std::string& log_path() const { return log_path_; }

  // Runs one command (no AUTH) and renders the reply as text: strings and status replies as
  // themselves, integers in decimal, nil as "(nil)", arrays as their elements joined by '\n'.
  // A Redis error reply is an error Status holding its text.
  Result<std::string> Command(const std::vector<std::string>& args) const;

 private:
  RedisSandbox() = default;

  std::string host_ = "127.0.0.1";
  int port_ = 0;
  std::string base_dir_;
  std::string log_path_;
  std::unique_ptr<ChildProcess> server_;
};

}  // namespace walrelay::devtools
