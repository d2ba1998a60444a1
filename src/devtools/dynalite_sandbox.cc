#include "devtools/dynalite_sandbox.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "devtools/free_port.h"

namespace walrelay::devtools {
namespace {

namespace fs = std::filesystem;

bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string Tail(const std::string& s, size_t n) {
  return s.size() > n ? s.substr(s.size() - n) : s;
}

}  // namespace

std::string FindDynalite() {
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("WALRELAY_DYNALITE"); dir != nullptr && *dir)
    candidates.emplace_back(dir);
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (cache != nullptr && *cache)
    candidates.push_back(std::string(cache) + "/walrelay/dynalite/node_modules/dynalite");
  else if (home != nullptr && *home)
    candidates.push_back(std::string(home) + "/.cache/walrelay/dynalite/node_modules/dynalite");
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::exists(c + "/cli.js", ec)) return c;
  }
  return "";
}

Result<std::unique_ptr<DynaliteSandbox>> DynaliteSandbox::Start() {
  const std::string package = FindDynalite();
  if (package.empty())
    return Status::Precondition(
        "dynalite is not installed (scripts/install-deps.sh puts it under "
        "~/.cache/walrelay/dynalite; or set WALRELAY_DYNALITE to its package directory)");
  std::unique_ptr<DynaliteSandbox> sb(new DynaliteSandbox());
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/walrelay-dynalite-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    return Status::Internal("cannot create a temporary directory from " + pattern);
  sb->base_dir_ = pattern;
  sb->log_path_ = sb->base_dir_ + "/dynalite.log";

  // Another process can take the port between PickFreePort and dynalite's listen: try anew.
  std::string last_problem;
  for (int round = 0; round < 3; ++round) {
    auto port = PickFreePort();
    if (!port.ok()) return port.status();
    auto child = ChildProcess::Spawn(
        {"node", package + "/cli.js", "--host", "127.0.0.1", "--port", std::to_string(*port),
         "--createTableMs", "0", "--deleteTableMs", "0", "--updateTableMs", "0"},
        sb->log_path_);
    if (!child.ok())
      return Status::Precondition(child.status().message() +
                                  " (install nodejs: scripts/install-deps.sh)");
    sb->server_ = std::move(child).value();
    sb->port_ = *port;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline && sb->server_->Running()) {
      if (Accepts(*port)) return sb;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    last_problem = "log: " + Tail(ReadFile(sb->log_path_), 1000);
    sb->server_.reset();  // SIGKILLs it if it still runs
  }
  return Status::Internal("dynalite did not start: " + last_problem);
}

DynaliteSandbox::~DynaliteSandbox() {
  if (server_ && server_->Running()) {
    (void)server_->Kill(SIGTERM);
    (void)server_->Wait(std::chrono::seconds(5));
  }
  server_.reset();
  if (!base_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(base_dir_, ec);
  }
}

}  // namespace walrelay::devtools
