// RedisCluster: routes single-key commands to the master that owns the key's slot in a Redis
// Cluster, over hiredis (which has no cluster support of its own).
//
// Contract:
//  - KeySlot() is Redis Cluster's slot function: CRC16 (XMODEM) of the key, or of the part
//    between the first '{' and the next '}' when that part is not empty, modulo 16384.
//  - Connect() asks the seed nodes, in order, for the slot map (CLUSTER SLOTS) and fails only
//    when none answers. Connections to nodes are opened lazily, one per node, with the same
//    username/password on every node.
//  - Command() sends one command for one key to its slot's master and follows the cluster:
//    MOVED refreshes the slot map and retries on the named node; ASK sends ASKING and the
//    command to the named node, once per ASK; a lost or refused connection, CLUSTERDOWN and
//    TRYAGAIN refresh the map from any reachable node and retry after a short pause. All of
//    it within `timeout` from the call's start: every connect, reply wait, slot map reload and
//    redirection gets only what is left of it, and a call out of time returns the last
//    problem as a kConnection error. Any other error reply is returned as the reply, for the
//    caller. A command whose connection broke after it was sent may have run: callers send only
//    commands whose repetition they can tell (the store's scripts check the claim's owner).
//  - Redirections, refreshes and connection losses are counted (stats()) and reported through
//    `log`, one line each, starting with the event's name (MOVED, ASK, REFRESH, CONNECTION).
//  - Passwords never appear in errors or log lines.
//
// Thread-safety: none; one caller at a time (the store is used from the consumer's thread).
#pragma once

#include <hiredis/hiredis.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/hiredis_handles.h"
#include "common/status.h"

namespace walrelay::consumer {

constexpr int kClusterSlots = 16384;

// CRC16-XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses it.
uint16_t Crc16(std::string_view data);
// The key's slot, honouring a non-empty {hash tag}.
int KeySlot(std::string_view key);
// "host:port" (the last ':' separates, so "[::1]:7000" and "::1:7000" work too).
Result<std::pair<std::string, int>> ParseHostPort(const std::string& node);

// Text of a string, status or error reply; "" otherwise.
std::string ReplyText(const redisReply* r);

struct RedisClusterOptions {
  std::vector<std::string> seeds;  // "host:port"
  std::string username;
  std::string password;
  std::chrono::milliseconds timeout{5000};
  std::function<void(const std::string&)> log;
};

struct RedisClusterStats {
  int64_t moved = 0;              // MOVED replies followed
  int64_t ask = 0;                // ASK replies followed
  int64_t refreshes = 0;          // slot maps loaded (the first one included)
  int64_t connection_errors = 0;  // commands or connects that failed for lack of a connection
};

class RedisCluster {
 public:
  static Result<std::unique_ptr<RedisCluster>> Connect(RedisClusterOptions options);
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // Runs `args` (which must name `key` as its only key) on the master of the key's slot.
  // `node` receives "host:port" of the node that answered.
  Result<RedisReplyPtr> Command(const std::string& key, const std::vector<std::string>& args,
                                std::string* node = nullptr);
  // Runs `args` on one node, no redirections followed (SCRIPT LOAD, WAIT on the node that
  // took a write).
  Result<RedisReplyPtr> CommandOnNode(const std::string& node,
                                      const std::vector<std::string>& args);

  // The master currently mapped to `slot` ("" when unknown).
  std::string MasterOf(int slot) const;
  const RedisClusterStats& stats() const { return stats_; }

 private:
  struct Link;
  explicit RedisCluster(RedisClusterOptions options);

  Status RefreshSlots();
  Result<Link*> LinkTo(const std::string& node);
  void Drop(const std::string& node);
  void Log(const std::string& line) const;
  // What is left of the current Command's time (`timeout` outside a Command).
  std::chrono::milliseconds Left() const;

  RedisClusterOptions options_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::array<std::string, kClusterSlots> slot_master_;
  std::vector<std::string> known_nodes_;  // seeds and every node named by a slot map
  std::map<std::string, std::unique_ptr<Link>> links_;
  RedisClusterStats stats_;
};

}  // namespace walrelay::consumer
