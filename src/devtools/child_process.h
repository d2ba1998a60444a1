// ChildProcess: RAII ownership of one spawned program, for tests and dev tools that run,
// signal and kill -9 the walrelay binary (or any helper such as pg_ctl).
//
// Contract: Spawn() starts argv[0] (looked up in PATH when it has no '/') with stdin from
// /dev/null, stdout+stderr appended to `output_path` (or inherited when it is ""), the
// parent's environment plus `extra_env` overrides, and no file descriptors above 2: anything
// the parent holds open (librdkafka sockets, libpq connections) is not inherited. The child
// stays in the parent's process group, so a terminal Ctrl-C reaches it too; Kill() signals only
// the child's pid, not grandchildren it may have started. The destructor SIGKILLs the child if
// it is still running and reaps it, so no child outlives its owner unless the owner itself dies
// without unwinding (SIGKILL, abort).
//
// Exit codes: Wait() returns the exit status, or 128+signo for a signal death (the shell's
// convention, so "kill -9" reads as 137).
//
// Thread-safety: a ChildProcess is not thread-safe; use each object from one thread at a time.
// Do not reap its pid elsewhere (waitpid(-1), SIGCHLD=SIG_IGN) or Wait() cannot see the status.
// The free functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace walrelay::devtools {

class ChildProcess {
 public:
  // `extra_env` entries are "KEY=VALUE" and replace a same-named inherited variable.
  // `working_dir` "" keeps the parent's working directory.
  static Result<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                     const std::string& output_path,
                                                     const std::vector<std::string>& extra_env = {},
                                                     const std::string& working_dir = "");

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }

  // True until the child has exited (reaps it if it just did).
  bool Running();

  // Sends `signal` to the child. Error if it has already been reaped.
  Status Kill(int signal);

  // Waits for the child to exit and returns its exit code (128+signo for a signal death).
  // Error if it is still running after `timeout`; the child is left running then.
  // Once the child has exited, further calls return the same code.
  Result<int> Wait(std::chrono::milliseconds timeout);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}

  // Non-blocking reap; records the exit code. Returns true once the child is gone.
  bool TryReap();

  pid_t pid_;
  std::optional<int> exit_code_;  // set once reaped
  bool lost_ = false;             // reaped by someone else: status unknown
};

// The whole file, or "" if it does not exist or cannot be read.
std::string ReadFile(const std::string& path);

// Polls `path` until it contains `needle` or `timeout` passes. A missing file counts as empty.
bool WaitForFileContains(const std::string& path, const std::string& needle,
                         std::chrono::milliseconds timeout);

}  // namespace walrelay::devtools
