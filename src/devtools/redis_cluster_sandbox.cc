#include "devtools/redis_cluster_sandbox.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "devtools/free_port.h"
#include "devtools/redis_sandbox.h"

namespace walrelay::devtools {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kNodes = 6;
const char* const kHost = "127.0.0.1";

std::string Tail(const std::string& s, size_t n) {
  return s.size() > n ? s.substr(s.size() - n) : s;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// "127.0.0.1:7000@17000" -> 7000.
int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
}

bool HasFlag(const std::vector<std::string>& line, const std::string& flag) {
  if (line.size() < 3) return false;
  for (const auto& f : Split(line[2], ','))
    if (f == flag) return true;
  return false;
}

bool ServesSlot(const std::vector<std::string>& line, int slot) {
  for (size_t i = 8; i < line.size(); ++i) {
    if (line[i].front() == '[') continue;  // a migration in progress, not ownership
    const size_t dash = line[i].find('-');
    const int first = std::atoi(line[i].c_str());
    const int last = dash == std::string::npos ? first : std::atoi(line[i].c_str() + dash + 1);
    if (slot >= first && slot <= last) return true;
  }
  return false;
}

}  // namespace

Status RedisClusterSandbox::StartNode(Node& node) {
  std::string last_problem;
  // Another process can take a port between PickFreePort and redis-server's bind: try anew.
  for (int round = 0; round < 3; ++round) {
    auto port = PickFreePort();
    auto bus = PickFreePort();
    if (!port.ok()) return port.status();
    if (!bus.ok()) return bus.status();
    if (*port == *bus) continue;
    std::vector<std::string> argv = {"redis-server",
                                     "--port",
                                     std::to_string(*port),
                                     "--bind",
                                     kHost,
                                     "--cluster-enabled",
                                     "yes",
                                     "--cluster-port",
                                     std::to_string(*bus),
                                     "--cluster-config-file",
                                     node.dir + "/nodes.conf",
                                     "--cluster-node-timeout",
                                     "1000",
                                     "--cluster-replica-validity-factor",
                                     "0",
                                     "--dir",
                                     node.dir,
                                     "--logfile",
                                     node.dir + "/redis.log",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--daemonize",
                                     "no"};
    if (!password_.empty())
      argv.insert(argv.end(), {"--requirepass", password_, "--masterauth", password_});
    auto child = ChildProcess::Spawn(argv, node.dir + "/stdout.log");
    if (!child.ok())
      return Status::Precondition(child.status().message() +
                                  " (install redis-server: scripts/install-deps.sh)");
    node.process = std::move(child).value();
    node.port = *port;
    node.bus_port = *bus;
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline && node.process->Running()) {
      auto pong = Command(node.port, {"PING"});
      if (pong.ok()) return Status::Ok();
      last_problem = pong.status().message();
      std::this_thread::sleep_for(20ms);
    }
    last_problem += "; log: " + Tail(ReadFile(node.dir + "/redis.log"), 1000);
    node.process.reset();
  }
  return Status::Internal("redis-server (cluster node) did not start: " + last_problem);
}

Result<std::unique_ptr<RedisClusterSandbox>> RedisClusterSandbox::Start(
    const std::string& password) {
  std::unique_ptr<RedisClusterSandbox> sb(new RedisClusterSandbox());
  sb->password_ = password;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/walrelay-redis-cluster-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    return Status::Internal("cannot create a temporary directory from " + pattern);
  sb->base_dir_ = pattern;
  sb->nodes_.resize(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    Node& node = sb->nodes_[static_cast<size_t>(i)];
    node.dir = sb->base_dir_ + "/node" + std::to_string(i);
    fs::create_directories(node.dir);
    WALRELAY_RETURN_IF_ERROR(sb->StartNode(node));
  }

  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (const auto& s : sb->seeds()) create.push_back(s);
  for (const char* a : {"--cluster-replicas", "1", "--cluster-yes"}) create.push_back(a);
  const std::string create_log = sb->base_dir_ + "/cluster-create.log";
  // REDISCLI_AUTH keeps the password off redis-cli's command line.
  std::vector<std::string> env;
  if (!password.empty()) env.push_back("REDISCLI_AUTH=" + password);
  auto cli = ChildProcess::Spawn(create, create_log, env);
  if (!cli.ok()) return cli.status();
  auto code = (*cli)->Wait(60s);
  if (!code.ok() || *code != 0)
    return Status::Internal("redis-cli --cluster create failed: " +
                            Tail(ReadFile(create_log), 1500));
  WALRELAY_RETURN_IF_ERROR(sb->WaitHealthy(30s));
  return sb;
}

RedisClusterSandbox::~RedisClusterSandbox() {
  for (auto& node : nodes_)
    if (node.process && node.process->Running()) (void)node.process->Kill(SIGTERM);
  for (auto& node : nodes_) {
    if (node.process && node.process->Running()) (void)node.process->Wait(5s);
    node.process.reset();  // SIGKILL and reap if SIGTERM was not enough
  }
  if (!base_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(base_dir_, ec);
  }
}

std::vector<std::string> RedisClusterSandbox::seeds() const {
  std::vector<std::string> out;
  for (const auto& node : nodes_)
    out.push_back(std::string(kHost) + ":" + std::to_string(node.port));
  return out;
}

Result<std::string> RedisClusterSandbox::Command(int port,
                                                 const std::vector<std::string>& args) const {
  return RedisCommandAt(kHost, port, args, password_);
}

Result<std::string> RedisClusterSandbox::Command(const std::vector<std::string>& args) const {
  Status last = Status::Connection("no Redis Cluster node is running");
  for (const auto& node : nodes_) {
    if (!node.process || !node.process->Running()) continue;
    auto r = Command(node.port, args);
    if (r.ok() || r.status().code() != ErrorCode::kConnection) return r;
    last = r.status();
  }
  return last;
}

Status RedisClusterSandbox::WaitHealthy(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string problem;
  while (std::chrono::steady_clock::now() < deadline) {
    problem.clear();
    for (auto& node : nodes_) {
      if (!node.process || !node.process->Running()) continue;
      const std::string name = "node " + std::to_string(node.port);
      auto info = Command(node.port, {"CLUSTER", "INFO"});
      if (!info.ok() || info->find("cluster_state:ok") == std::string::npos) {
        problem = name + " is not cluster_state:ok";
        break;
      }
      auto repl = Command(node.port, {"INFO", "replication"});
      if (!repl.ok()) {
        problem = name + ": " + repl.status().message();
        break;
      }
      if (repl->find("role:slave") != std::string::npos &&
          repl->find("master_link_status:up") == std::string::npos) {
        problem = name + "'s replication link is not up";
        break;
      }
    }
    if (problem.empty()) return Status::Ok();
    std::this_thread::sleep_for(50ms);
  }
  return Status::Internal("the Redis Cluster did not become healthy within " +
                          std::to_string(timeout.count()) + " ms: " + problem);
}

Result<std::vector<std::vector<std::string>>> RedisClusterSandbox::ClusterNodes() const {
  auto text = Command({"CLUSTER", "NODES"});
  if (!text.ok()) return text.status();
  std::vector<std::vector<std::string>> lines;
  for (const auto& line : Split(*text, '\n')) lines.push_back(Split(line, ' '));
  return lines;
}

Result<int> RedisClusterSandbox::KeySlot(const std::string& key) const {
  auto r = Command({"CLUSTER", "KEYSLOT", key});
  if (!r.ok()) return r.status();
  return std::stoi(*r);
}

Result<int> RedisClusterSandbox::MasterOf(int slot) const {
  auto lines = ClusterNodes();
  if (!lines.ok()) return lines.status();
  for (const auto& line : *lines)
    if (HasFlag(line, "master") && !HasFlag(line, "fail") && ServesSlot(line, slot))
      return PortOf(line[1]);
  return Status::Precondition("no live master serves slot " + std::to_string(slot));
}

Result<std::vector<int>> RedisClusterSandbox::Masters() const {
  auto lines = ClusterNodes();
  if (!lines.ok()) return lines.status();
  std::vector<int> out;
  for (const auto& line : *lines)
    if (HasFlag(line, "master") && !HasFlag(line, "fail") && line.size() > 8)
      out.push_back(PortOf(line[1]));
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> RedisClusterSandbox::NodeId(int port) const {
  return Command(port, {"CLUSTER", "MYID"});
}

Status RedisClusterSandbox::Signal(int port, int signal) {
  for (auto& node : nodes_)
    if (node.port == port && node.process) return node.process->Kill(signal);
  return Status::Precondition("no Redis Cluster node on port " + std::to_string(port));
}

Result<int> RedisClusterSandbox::ReplicaOf(int master_port) const {
  auto master_id = NodeId(master_port);
  if (!master_id.ok()) return master_id.status();
  auto lines = ClusterNodes();
  if (!lines.ok()) return lines.status();
  for (const auto& line : *lines)
    if (line.size() > 3 && line[3] == *master_id && !HasFlag(line, "fail")) return PortOf(line[1]);
  return Status::Precondition("the master on port " + std::to_string(master_port) +
                              " has no replica");
}

Result<int> RedisClusterSandbox::KillMasterOf(int slot, std::chrono::milliseconds timeout) {
  auto master = MasterOf(slot);
  if (!master.ok()) return master.status();
  auto replica_port = ReplicaOf(*master);
  if (!replica_port.ok()) return replica_port.status();
  const int replica = *replica_port;

  for (auto& node : nodes_)
    if (node.port == *master && node.process) {
      WALRELAY_RETURN_IF_ERROR(node.process->Kill(SIGKILL));
      (void)node.process->Wait(5s);
    }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto role = Command(replica, {"ROLE"});
    if (role.ok() && role->rfind("master", 0) == 0) break;
    std::this_thread::sleep_for(50ms);
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0)
    return Status::Internal("replica " + std::to_string(replica) + " was not promoted within " +
                            std::to_string(timeout.count()) + " ms");
  WALRELAY_RETURN_IF_ERROR(WaitHealthy(left));
  return replica;
}

Status RedisClusterSandbox::BeginSlotMigration(int slot, int to_port) {
  auto from = MasterOf(slot);
  if (!from.ok()) return from.status();
  auto from_id = NodeId(*from);
  auto to_id = NodeId(to_port);
  if (!from_id.ok()) return from_id.status();
  if (!to_id.ok()) return to_id.status();
  const std::string s = std::to_string(slot);
  WALRELAY_RETURN_IF_ERROR(
      Command(to_port, {"CLUSTER", "SETSLOT", s, "IMPORTING", *from_id}).status());
  return Command(*from, {"CLUSTER", "SETSLOT", s, "MIGRATING", *to_id}).status();
}

Result<int> RedisClusterSandbox::MigrateKeys(int slot, int to_port) {
  auto from = MasterOf(slot);
  if (!from.ok()) return from.status();
  auto keys = Command(*from, {"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100000"});
  if (!keys.ok()) return keys.status();
  const std::vector<std::string> names = Split(*keys, '\n');
  if (names.empty()) return 0;
  std::vector<std::string> migrate = {"MIGRATE", kHost, std::to_string(to_port), "", "0",
                                      "5000",    "KEYS"};
  migrate.insert(migrate.end(), names.begin(), names.end());
  WALRELAY_RETURN_IF_ERROR(Command(*from, migrate).status());
  return static_cast<int>(names.size());
}

Status RedisClusterSandbox::FinishSlotMigration(int slot, int to_port) {
  auto to_id = NodeId(to_port);
  if (!to_id.ok()) return to_id.status();
  auto masters = Masters();
  if (!masters.ok()) return masters.status();
  // The new owner first, so the slot is never without one (the documented order).
  std::vector<int> order = {to_port};
  for (int m : *masters)
    if (m != to_port) order.push_back(m);
  for (int port : order)
    WALRELAY_RETURN_IF_ERROR(
        Command(port, {"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", *to_id}).status());
  return Status::Ok();
}

}  // namespace walrelay::devtools
