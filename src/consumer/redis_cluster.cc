#include "consumer/redis_cluster.h"

#include <algorithm>
#include <thread>

namespace walrelay::consumer {
namespace {

timeval ToTimeval(std::chrono::milliseconds d) {
  timeval tv{};
  tv.tv_sec = d.count() / 1000;
  tv.tv_usec = (d.count() % 1000) * 1000;
  return tv;
}

bool StartsWith(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381": the node.
std::string RedirectTarget(const std::string& error) {
  const size_t last_space = error.rfind(' ');
  return last_space == std::string::npos ? "" : error.substr(last_space + 1);
}

}  // namespace

uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char byte : data) {
    crc ^= static_cast<uint16_t>(byte) << 8;
    for (int bit = 0; bit < 8; ++bit)
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key) & (kClusterSlots - 1);
}

Result<std::pair<std::string, int>> ParseHostPort(const std::string& node) {
  const size_t colon = node.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == node.size())
    return Status::Config("Redis Cluster node '" + node + "' is not host:port");
  std::string host = node.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  int port = 0;
  for (char c : node.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535)
      return Status::Config("Redis Cluster node '" + node + "' has no valid port");
    port = port * 10 + (c - '0');
  }
  if (port < 1 || port > 65535)
    return Status::Config("Redis Cluster node '" + node + "' has no valid port");
  return std::pair{host, port};
}

std::string ReplyText(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
                          r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : "";
}

// One authenticated connection to one node.
struct RedisCluster::Link {
  std::string node;
  RedisContextPtr ctx;
  std::chrono::milliseconds timeout{0};  // the socket's current send/receive timeout

  // Bounds the next replies' wait by what is left of the call.
  void Bound(std::chrono::milliseconds left) {
    left = std::max(left, std::chrono::milliseconds(1));
    if (left == timeout) return;
    if (redisSetTimeout(ctx.get(), ToTimeval(left)) == REDIS_OK) timeout = left;
  }

  // Sends the commands pipelined and returns the last reply (ASKING + command needs two).
  Result<RedisReplyPtr> Send(const std::vector<std::vector<std::string>>& commands) {
    for (const auto& args : commands) {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      if (redisAppendCommandArgv(ctx.get(), static_cast<int>(argv.size()), argv.data(),
                                 lens.data()) != REDIS_OK)
        return Status::Connection("cannot send to Redis node " + node + ": " + ctx->errstr);
    }
    RedisReplyPtr last;
    for (size_t i = 0; i < commands.size(); ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx.get(), &raw) != REDIS_OK || raw == nullptr)
        return Status::Connection("lost connection to Redis node " + node + ": " + ctx->errstr);
      last.reset(static_cast<redisReply*>(raw));
    }
    return last;
  }
};

RedisCluster::RedisCluster(RedisClusterOptions options) : options_(std::move(options)) {}
RedisCluster::~RedisCluster() = default;

Result<std::unique_ptr<RedisCluster>> RedisCluster::Connect(RedisClusterOptions options) {
  if (options.seeds.empty()) return Status::Config("RedisStoreOptions.cluster_nodes is empty");
  for (const auto& seed : options.seeds) WALRELAY_RETURN_IF_ERROR(ParseHostPort(seed).status());
  std::unique_ptr<RedisCluster> cluster(new RedisCluster(std::move(options)));
  cluster->known_nodes_ = cluster->options_.seeds;
  WALRELAY_RETURN_IF_ERROR(cluster->RefreshSlots());
  return cluster;
}

std::chrono::milliseconds RedisCluster::Left() const {
  if (!deadline_) return options_.timeout;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ -
                                                               std::chrono::steady_clock::now());
}

void RedisCluster::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Result<RedisCluster::Link*> RedisCluster::LinkTo(const std::string& node) {
  if (auto it = links_.find(node); it != links_.end()) return it->second.get();
  auto hp = ParseHostPort(node);
  if (!hp.ok()) return hp.status();
  const timeval tv = ToTimeval(std::max(Left(), std::chrono::milliseconds(1)));
  RedisContextPtr c(redisConnectWithTimeout(hp->first.c_str(), hp->second, tv));
  if (!c) return Status::Connection("out of memory connecting to Redis node " + node);
  if (c->err != 0)
    return Status::Connection("cannot connect to Redis node " + node + ": " + c->errstr);
  if (redisSetTimeout(c.get(), tv) != REDIS_OK)
    return Status::Connection("cannot set the command timeout for Redis node " + node);
  auto link = std::make_unique<Link>();
  link->node = node;
  link->ctx = std::move(c);
  link->timeout = std::max(Left(), std::chrono::milliseconds(1));
  if (!options_.password.empty()) {
    std::vector<std::string> auth = {"AUTH"};
    if (!options_.username.empty()) auth.push_back(options_.username);
    auth.push_back(options_.password);
    auto r = link->Send({auth});
    if (!r.ok()) return r.status();
    // The server's words ("WRONGPASS invalid username-password pair") hold no secret.
    if ((*r)->type == REDIS_REPLY_ERROR)
      return Status::Connection("Redis node " + node + " refused AUTH: " + ReplyText(r->get()));
  }
  Link* raw = link.get();
  links_[node] = std::move(link);
  return raw;
}

void RedisCluster::Drop(const std::string& node) { links_.erase(node); }

Result<RedisReplyPtr> RedisCluster::CommandOnNode(const std::string& node,
                                                  const std::vector<std::string>& args) {
  auto link = LinkTo(node);
  if (!link.ok()) {
    ++stats_.connection_errors;
    return link.status();
  }
  (*link)->Bound(Left());
  auto r = (*link)->Send({args});
  if (!r.ok()) {
    ++stats_.connection_errors;
    Drop(node);
  }
  return r;
}

Status RedisCluster::RefreshSlots() {
  std::string problems;
  // Copy: a slot map may add nodes while this loop walks the list.
  const std::vector<std::string> candidates = known_nodes_;
  for (const auto& node : candidates) {
    if (Left().count() <= 0) {
      problems += (problems.empty() ? "" : "; ") + std::string("out of time");
      break;
    }
    auto r = CommandOnNode(node, {"CLUSTER", "SLOTS"});
    if (!r.ok()) {
      problems += (problems.empty() ? "" : "; ") + r.status().message();
      continue;
    }
    const redisReply* reply = r->get();
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) {
      // An error (cluster support disabled) or an empty map (cluster not yet formed).
      problems += (problems.empty() ? "" : "; ") + std::string("Redis node ") + node +
                  " has no slot map" +
                  (reply->type == REDIS_REPLY_ERROR ? ": " + ReplyText(reply) : "");
      continue;
    }
    const std::string asked_host = ParseHostPort(node)->first;
    std::array<std::string, kClusterSlots> map;
    for (size_t i = 0; i < reply->elements; ++i) {
      const redisReply* range = reply->element[i];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
          range->element[2]->type != REDIS_REPLY_ARRAY || range->element[2]->elements < 2)
        continue;
      const redisReply* master = range->element[2];
      std::string host = ReplyText(master->element[0]);
      if (host.empty() || host == "?") host = asked_host;  // the node does not know its address
      const std::string name = host + ":" + std::to_string(master->element[1]->integer);
      const long long first = std::max(0LL, range->element[0]->integer);
      const long long last = std::min<long long>(kClusterSlots - 1, range->element[1]->integer);
      for (long long s = first; s <= last; ++s) map[static_cast<size_t>(s)] = name;
      if (std::find(known_nodes_.begin(), known_nodes_.end(), name) == known_nodes_.end())
        known_nodes_.push_back(name);
    }
    slot_master_ = map;
    ++stats_.refreshes;
    Log("REFRESH slot map from " + node);
    return Status::Ok();
  }
  return Status::Connection("no Redis Cluster node gave a slot map: " + problems);
}

std::string RedisCluster::MasterOf(int slot) const {
  return slot >= 0 && slot < kClusterSlots ? slot_master_[static_cast<size_t>(slot)] : "";
}

Result<RedisReplyPtr> RedisCluster::Command(const std::string& key,
                                            const std::vector<std::string>& args,
                                            std::string* answered_by) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  // Every step of the call (connects, replies, slot map reloads, redirections) shares it.
  deadline_ = deadline;
  struct EndCall {
    RedisCluster* cluster;
    ~EndCall() { cluster->deadline_.reset(); }
  } end_call{this};
  const int slot = KeySlot(key);
  std::string target = slot_master_[static_cast<size_t>(slot)];
  bool asking = false;
  int redirects = 0;
  std::chrono::milliseconds pause{20};
  std::string problem;

  bool first = true;
  while (true) {
    // A redirection to a slow node, or a chain of them, must not outlast the call's time.
    if (!first && std::chrono::steady_clock::now() >= deadline)
      return Status::Connection(
          (problem.empty() ? "redirected for slot " + std::to_string(slot) : problem) +
          " (gave up after " + std::to_string(options_.timeout.count()) + " ms)");
    first = false;
    bool transient = false;
    if (target.empty()) {
      problem = "no master serves slot " + std::to_string(slot);
      transient = true;
    } else {
      Result<RedisReplyPtr> r = Status::Internal("not sent");
      auto link = LinkTo(target);
      if (link.ok()) {
        (*link)->Bound(Left());
        r = asking ? (*link)->Send({{"ASKING"}, args}) : (*link)->Send({args});
        if (!r.ok()) Drop(target);
      } else {
        r = link.status();
      }
      asking = false;
      if (!r.ok()) {
        ++stats_.connection_errors;
        problem = r.status().message();
        Log("CONNECTION " + problem);
        transient = true;
      } else if ((*r)->type != REDIS_REPLY_ERROR) {
        if (answered_by != nullptr) *answered_by = target;
        return r;
      } else {
        const std::string error = ReplyText(r->get());
        if (StartsWith(error, "MOVED ") || StartsWith(error, "ASK ")) {
          const bool moved = StartsWith(error, "MOVED ");
          const std::string to = RedirectTarget(error);
          Log(error + " (key slot " + std::to_string(slot) + ", asked " + target + ")");
          if (moved) {
            ++stats_.moved;
            // The whole map is likely stale (a resharding or a failover): reload it, but
            // trust the redirection for this slot even if the node asked lags behind.
            (void)RefreshSlots();
            slot_master_[static_cast<size_t>(slot)] = to;
          } else {
            ++stats_.ask;
            asking = true;
          }
          target = to;
          problem = "the last reply was " + error;
          if (++redirects <= 16) continue;
          problem = "too many redirections for slot " + std::to_string(slot) + ", last: " + error;
          transient = true;
        } else if (StartsWith(error, "CLUSTERDOWN") || StartsWith(error, "TRYAGAIN") ||
                   StartsWith(error, "LOADING") || StartsWith(error, "MASTERDOWN")) {
          problem = "Redis node " + target + ": " + error;
          transient = true;
        } else {
          if (answered_by != nullptr) *answered_by = target;
          return r;  // the caller's error (a script error, NOSCRIPT, WRONGTYPE)
        }
      }
    }
    if (!transient) continue;
    if (std::chrono::steady_clock::now() + pause > deadline)
      return Status::Connection(problem + " (gave up after " +
                                std::to_string(options_.timeout.count()) + " ms)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
    redirects = 0;
    // A failover or resharding moves slots: ask the nodes that still answer.
    if (RefreshSlots().ok()) target = slot_master_[static_cast<size_t>(slot)];
  }
}

}  // namespace walrelay::consumer
