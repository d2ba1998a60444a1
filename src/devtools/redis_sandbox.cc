#include "devtools/redis_sandbox.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "common/hiredis_handles.h"
#include "devtools/free_port.h"

namespace walrelay::devtools {
namespace {

namespace fs = std::filesystem;

std::string Render(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR: return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
    case REDIS_REPLY_NIL: return "(nil)";
    case REDIS_REPLY_ARRAY: {
      std::string out;
      for (size_t i = 0; i < r->elements; ++i) out += (i ? "\n" : "") + Render(r->element[i]);
      return out;
    }
  }
  return "?";
}

std::string Tail(const std::string& s, size_t n) {
  return s.size() > n ? s.substr(s.size() - n) : s;
}

}  // namespace

Result<std::unique_ptr<RedisSandbox>> RedisSandbox::Start(
    const std::vector<std::string>& extra_args) {
  std::unique_ptr<RedisSandbox> sb(new RedisSandbox());
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/walrelay-redis-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    return Status::Internal("cannot create a temporary directory from " + pattern);
  sb->base_dir_ = pattern;
  sb->log_path_ = sb->base_dir_ + "/redis.log";

  // Another process can take the port between PickFreePort and redis-server's bind: try anew.
  std::string last_problem;
  for (int round = 0; round < 3; ++round) {
    auto port = PickFreePort();
    if (!port.ok()) return port.status();
    std::vector<std::string> argv = {"redis-server",
                                     "--port",
                                     std::to_string(*port),
                                     "--bind",
                                     "127.0.0.1",
                                     "--dir",
                                     sb->base_dir_,
                                     "--logfile",
                                     sb->log_path_,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no"};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    auto child = ChildProcess::Spawn(argv, sb->base_dir_ + "/stdout.log");
    if (!child.ok())
      return Status::Precondition(child.status().message() +
                                  " (install redis-server: scripts/install-deps.sh)");
    sb->server_ = std::move(child).value();
    sb->port_ = *port;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline && sb->server_->Running()) {
      auto pong = sb->Command({"PING"});
      // A password-protected server answers NOAUTH: it is up all the same.
      if (pong.ok() || pong.status().message().find("NOAUTH") != std::string::npos) return sb;
      last_problem = pong.status().message();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    last_problem += "; log: " + Tail(ReadFile(sb->log_path_), 1000);
    sb->server_.reset();  // SIGKILLs it if it still runs
  }
  return Status::Internal("redis-server did not start: " + last_problem);
}

RedisSandbox::~RedisSandbox() {
  if (server_ && server_->Running()) {
    (void)server_->Kill(SIGTERM);
    (void)server_->Wait(std::chrono::seconds(5));
  }
  server_.reset();  // SIGKILL and reap if SIGTERM was not enough
  if (!base_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(base_dir_, ec);
  }
}

Result<std::string> RedisSandbox::Command(const std::vector<std::string>& args) const {
  return RedisCommandAt(host_, port_, args);
}

Result<std::string> RedisCommandAt(const std::string& host, int port,
                                   const std::vector<std::string>& args,
                                   const std::string& password) {
  timeval tv{2, 0};
  RedisContextPtr c(redisConnectWithTimeout(host.c_str(), port, tv));
  if (!c || c->err != 0)
    return Status::Connection("cannot connect to redis-server at " + host + ":" +
                              std::to_string(port) + (c ? std::string(": ") + c->errstr : ""));
  redisSetTimeout(c.get(), tv);
  if (!password.empty()) {
    const char* auth_argv[] = {"AUTH", password.c_str()};
    const size_t auth_lens[] = {4, password.size()};
    RedisReplyPtr auth(
        static_cast<redisReply*>(redisCommandArgv(c.get(), 2, auth_argv, auth_lens)));
    if (!auth) return Status::Connection(std::string("redis-server: ") + c->errstr);
    if (auth->type == REDIS_REPLY_ERROR) return Status::Precondition(Render(auth.get()));
  }
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  RedisReplyPtr r(static_cast<redisReply*>(
      redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (!r) return Status::Connection(std::string("redis-server: ") + c->errstr);
  if (r->type == REDIS_REPLY_ERROR) return Status::Precondition(Render(r.get()));
  return Render(r.get());
}

}  // namespace walrelay::devtools
