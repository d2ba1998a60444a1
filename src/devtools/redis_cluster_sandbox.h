// RedisClusterSandbox: a throwaway Redis Cluster of three masters and three replicas (Debian's
// redis-server and redis-cli) for the consumer tests.
//
// Contract: Start() runs six redis-server processes as children, bound to 127.0.0.1 on free
// ports (client and cluster-bus port each picked free), each in its own directory under a new
// temporary directory ($TMPDIR or /tmp, walrelay-redis-cluster-*), with cluster-enabled yes,
// a short cluster-node-timeout, no persistence and replica-validity-factor 0 (a replica may
// always take over). It forms the cluster with `redis-cli --cluster create ...
// --cluster-replicas 1 --cluster-yes` and returns once every node reports cluster_state:ok and
// every replica's link to its master is up. The destructor stops every server by its pid
// (SIGTERM, SIGKILL after 5 s) and deletes the directory.
//
// The slot helpers read CLUSTER NODES from a live node. KillMasterOf() SIGKILLs the master of a
// slot and waits for its replica's promotion. The migration helpers move one slot by hand
// (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), in steps, so a test can act while the
// slot is half moved (ASK) and after (MOVED for a client with the old map).
//
// Thread-safety: Command() may be called from any thread; the rest from one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "devtools/child_process.h"

namespace walrelay::devtools {

class RedisClusterSandbox {
 public:
  // `password`: requirepass and masterauth on every node; the helpers below AUTH with it.
  static Result<std::unique_ptr<RedisClusterSandbox>> Start(const std::string& password = "");

  RedisClusterSandbox(const RedisClusterSandbox&) = delete;
  RedisClusterSandbox& operator=(const RedisClusterSandbox&) = delete;
  ~RedisClusterSandbox();

  // "127.0.0.1:<port>" of every node, for RedisStoreOptions::cluster_nodes.
  std::vector<std::string> seeds() const;
  // Runs one command on the node at `port` (rendered as RedisSandbox::Command does).
  Result<std::string> Command(int port, const std::vector<std::string>& args) const;
  // Runs one command on any live node.
  Result<std::string> Command(const std::vector<std::string>& args) const;

  Result<int> KeySlot(const std::string& key) const;  // CLUSTER KEYSLOT
  Result<int> MasterOf(int slot) const;               // the port of the slot's master
  Result<std::string> NodeId(int port) const;         // CLUSTER MYID
  // Ports of the masters, ascending.
  Result<std::vector<int>> Masters() const;

  // SIGKILLs the master serving `slot`, then waits until its replica is master and every live
  // node reports cluster_state:ok. Returns the promoted replica's port.
  Result<int> KillMasterOf(int slot, std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Sends `signal` to the node at `port` (SIGSTOP/SIGCONT to hold a replica back).
  Status Signal(int port, int signal);
  // The port of a live replica of the master at `master_port`.
  Result<int> ReplicaOf(int master_port) const;

  // Marks `slot` IMPORTING on `to_port` and MIGRATING on its current master.
  Status BeginSlotMigration(int slot, int to_port);
  // MIGRATEs every key of `slot` from the slot's current master to `to_port`; returns how many.
  Result<int> MigrateKeys(int slot, int to_port);
  // SETSLOT NODE on every master: `to_port` owns `slot` from now on.
  Status FinishSlotMigration(int slot, int to_port);

 private:
  struct Node {
    int port = 0;
    int bus_port = 0;
    std::string dir;
    std::unique_ptr<ChildProcess> process;
  };
  RedisClusterSandbox() = default;
  Status StartNode(Node& node);
  Status WaitHealthy(std::chrono::milliseconds timeout);
  // CLUSTER NODES from a live node, one line per node.
  Result<std::vector<std::vector<std::string>>> ClusterNodes() const;

  std::string base_dir_;
  std::string password_;
  std::vector<Node> nodes_;
};

}  // namespace walrelay::devtools
