#include "devtools/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace walrelay::devtools {
namespace {

std::string Errno(int err) { return std::strerror(err); }

std::string Join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

// posix_spawn's C structures, released on every path out of Spawn().
class SpawnActions {
 public:
  SpawnActions() { ok_ = posix_spawn_file_actions_init(&actions_) == 0; }
  ~SpawnActions() {
    if (ok_) posix_spawn_file_actions_destroy(&actions_);
  }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  bool ok() const { return ok_; }
  posix_spawn_file_actions_t* get() { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
  bool ok_ = false;
};

class SpawnAttr {
 public:
  SpawnAttr() { ok_ = posix_spawnattr_init(&attr_) == 0; }
  ~SpawnAttr() {
    if (ok_) posix_spawnattr_destroy(&attr_);
  }
  SpawnAttr(const SpawnAttr&) = delete;
  SpawnAttr& operator=(const SpawnAttr&) = delete;
  bool ok() const { return ok_; }
  posix_spawnattr_t* get() { return &attr_; }

 private:
  posix_spawnattr_t attr_;
  bool ok_ = false;
};

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Result<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                          const std::string& output_path,
                                                          const std::vector<std::string>& extra_env,
                                                          const std::string& working_dir) {
  if (argv.empty() || argv[0].empty()) return Status::Internal("ChildProcess::Spawn: empty argv");

  // The parent's environment with extra_env replacing same-named entries.
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& kv : extra_env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::Internal("ChildProcess::Spawn: environment entry '" + kv +
                              "' is not KEY=VALUE");
    const std::string prefix = kv.substr(0, eq + 1);
    std::erase_if(env, [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
    env.push_back(kv);
  }

  std::vector<char*> c_argv;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  std::vector<char*> c_env;
  for (const auto& e : env) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);

  SpawnActions actions;
  SpawnAttr attr;
  if (!actions.ok() || !attr.ok()) return Status::Internal("posix_spawn setup failed");

  int rc = 0;
  // A test's stdin is not the child's business; reading it would hang or steal input.
  rc |= posix_spawn_file_actions_addopen(actions.get(), 0, "/dev/null", O_RDONLY, 0);
  if (!output_path.empty()) {
    rc |= posix_spawn_file_actions_addopen(actions.get(), 1, output_path.c_str(),
                                           O_WRONLY | O_CREAT | O_APPEND, 0644);
    rc |= posix_spawn_file_actions_adddup2(actions.get(), 1, 2);
  }
  // After the opens, so a relative output_path means relative to the parent's directory.
  if (!working_dir.empty())
    rc |= posix_spawn_file_actions_addchdir_np(actions.get(), working_dir.c_str());
  // Other threads (librdkafka, libpq) may open descriptors without O_CLOEXEC; a postmaster or
  // walrelay child holding our sockets open would keep connections alive after we close them.
  rc |= posix_spawn_file_actions_addclosefrom_np(actions.get(), 3);

  // Ignored signals survive exec; a parent ignoring SIGPIPE must not change the child's
  // behaviour, and an empty mask undoes any blocking done by the caller's thread.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGQUIT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2})
    sigaddset(&defaults, sig);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  rc |= posix_spawnattr_setsigdefault(attr.get(), &defaults);
  rc |= posix_spawnattr_setsigmask(attr.get(), &empty_mask);
  rc |= posix_spawnattr_setflags(attr.get(), POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  if (rc != 0) return Status::Internal("posix_spawn setup failed for: " + Join(argv));

  pid_t pid = 0;
  const int err =
      posix_spawnp(&pid, c_argv[0], actions.get(), attr.get(), c_argv.data(), c_env.data());
  if (err != 0)
    return Status::Internal("cannot start '" + Join(argv) + "': " + Errno(err) +
                            (output_path.empty() ? "" : " (output file " + output_path + ")"));
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid));
}

ChildProcess::~ChildProcess() {
  if (exit_code_ || lost_) return;
  if (TryReap()) return;
  ::kill(pid_, SIGKILL);
  // SIGKILL cannot be caught, so this returns promptly.
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

bool ChildProcess::TryReap() {
  if (exit_code_ || lost_) return true;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exit_code_ = DecodeWaitStatus(status);
    return true;
  }
  if (r < 0) {  // ECHILD: someone else reaped it
    lost_ = true;
    return true;
  }
  return false;
}

bool ChildProcess::Running() { return !TryReap(); }

Status ChildProcess::Kill(int signal) {
  if (exit_code_ || lost_)
    return Status::Internal("process " + std::to_string(pid_) + " has already exited");
  // A zombie (exited, not yet reaped) accepts signals, so this is not racy with a real pid reuse.
  if (::kill(pid_, signal) != 0)
    return Status::Internal("kill(" + std::to_string(pid_) + ", " + std::to_string(signal) +
                            "): " + Errno(errno));
  return Status::Ok();
}

Result<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (!TryReap()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      return Status::Internal("process " + std::to_string(pid_) + " still running after " +
                              std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  if (lost_)
    return Status::Internal("process " + std::to_string(pid_) +
                            " was reaped elsewhere; exit status unknown");
  return *exit_code_;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WaitForFileContains(const std::string& path, const std::string& needle,
                         std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (ReadFile(path).find(needle) != std::string::npos) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace walrelay::devtools
