// KafkaBroker: a throwaway Apache Kafka cluster (KRaft, combined broker+controller nodes) run
// from the jars scripts/fetch-kafka.sh puts in its cache, for the tests, the benchmark and
// `walrelay dev-kafka --broker apache`.
//
// Contract: Start() makes a new temporary directory ($TMPDIR or /tmp, walrelay-kafka-*), picks
// free loopback ports, writes each node's server.properties, formats its storage and starts one
// JVM per node. It returns once a metadata request to every node succeeds and lists all of them
// (not after a fixed sleep). The object owns the JVMs: the destructor stops them by pid
// (SIGKILL: the directory is deleted next, so a clean shutdown would buy nothing) and deletes
// the directory, also while unwinding from a failed test. The JVMs are started under
// `setpriv --pdeathsig KILL`, so they die with the process that started them even if it is
// killed without unwinding. Errors carry the tail of the failing node's log.
//
// Nodes are numbered 1..nodes; every node is a voter and a broker. With 3 nodes the defaults
// are replication factor 3 and min.insync.replicas=2 for every topic, including the internal
// ones, so a partition leader can be killed without losing acknowledged records.
//
// With `security` set, node 1 also listens with SASL_SSL (SCRAM-SHA-512, one user) and with
// mutual TLS (client certificate required); security() names the files and credentials a
// client needs, and a CA that signed nothing, for "untrusted certificate" cases.
//
// Jars: $WALRELAY_KAFKA_LIBS, else <$WALRELAY_CACHE_DIR or ~/.cache/walrelay>/kafka-<version>/libs
// for the version pinned in scripts/kafka/pom.xml (Version()). java comes from $JAVA_HOME/bin,
// else PATH.
//
// Thread-safety: accessors may be called from any thread; Kill/StartNode/CreateTopic must not
// race with each other or with destruction.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "devtools/child_process.h"

namespace walrelay::devtools {

struct KafkaBrokerOptions {
  int nodes = 1;  // 1 or 3
  bool security = false;
  // "key=value" lines appended to every node's server.properties; they win over the defaults.
  std::vector<std::string> extra_properties;
  // Per node. The broker idles at ~250 MB; 768 MB leaves room for the benchmark's bursts on a
  // 2-core, 24 GiB machine without the JVM reserving a gigabyte per node.
  std::string max_heap = "768m";
};

// What a client needs for the security listeners (paths are inside the broker's directory).
struct KafkaSecurity {
  std::string sasl_ssl_bootstrap;  // SASL_SSL with SCRAM-SHA-512
  std::string mtls_bootstrap;      // SSL with a client certificate required
  std::string ca_pem;              // CA that signed the broker's and the client's certificates
  std::string client_cert_pem;
  std::string client_key_pem;             // unencrypted
  std::string untrusted_ca_pem;           // a CA that signed nothing here
  std::string untrusted_client_cert_pem;  // signed by untrusted_ca_pem
  std::string untrusted_client_key_pem;
  std::string sasl_username;
  std::string sasl_password;
};

class KafkaBroker {
 public:
  static Result<std::unique_ptr<KafkaBroker>> Start(const KafkaBrokerOptions& options = {});

  KafkaBroker(const KafkaBroker&) = delete;
  KafkaBroker& operator=(const KafkaBroker&) = delete;
  ~KafkaBroker();

  // The pinned Apache Kafka version (scripts/kafka/pom.xml).
  static std::string Version();
  // The directory of jars Start() uses, whether or not it exists yet.
  static std::string LibsDir();

  // "127.0.0.1:port,..." of every node's PLAINTEXT listener.
  const std::string& bootstrap_servers() const { return bootstrap_servers_; }
  const KafkaSecurity& security() const { return security_; }
  int nodes() const { return static_cast<int>(nodes_.size()); }
  const std::string& base_dir() const { return base_dir_; }
  // Seconds from Start() until the cluster answered metadata with every node (format included).
  double start_seconds() const { return start_seconds_; }
  std::string bootstrap_of(int node) const;
  pid_t pid_of(int node) const;
  bool NodeRunning(int node) const;

  // Sends `signal` to node's JVM (SIGKILL: a crash, its log dir stays) and, for SIGKILL and
  // SIGTERM, waits until the process is gone.
  Status Kill(int node, int signal = 9);
  // Starts a stopped node again on its log dir and ports; returns once it answers metadata.
  Status StartNode(int node);

  // Creates a topic through the Admin API; `configs` are topic configs (max.message.bytes, ...).
  // Returns once the topic's partitions all have a leader.
  Status CreateTopic(const std::string& topic, int partitions, int replication_factor,
                     const std::map<std::string, std::string>& configs = {});
  // The node that leads the partition now, per a metadata request.
  Result<int> LeaderOf(const std::string& topic, int partition) const;

  // The last `lines` lines of the node's broker log, for failure messages.
  std::string LogTail(int node, int lines = 40) const;

 private:
  struct Node {
    int id = 0;
    int port = 0;
    int controller_port = 0;
    int sasl_ssl_port = 0;
    int mtls_port = 0;
    std::string dir;  // server.properties, log4j.properties, data/, broker.log, stdout
    std::unique_ptr<ChildProcess> process;
  };

  KafkaBroker() = default;
  Status WriteNodeFiles(const Node& node, const KafkaBrokerOptions& options,
                        const std::string& voters) const;
  Status Format(const std::string& cluster_id, bool with_scram);
  Status Launch(Node& node);
  Status WaitReady(const std::vector<int>& nodes, std::chrono::seconds timeout);
  Status MakeCertificates();
  Node& node(int id) { return nodes_.at(static_cast<size_t>(id - 1)); }
  const Node& node(int id) const { return nodes_.at(static_cast<size_t>(id - 1)); }
  std::vector<std::string> JavaCommand(const Node& node, const std::string& main_class) const;

  std::string base_dir_;
  std::string libs_dir_;
  std::string java_;
  std::string max_heap_;
  std::vector<Node> nodes_;
  std::string bootstrap_servers_;
  KafkaSecurity security_;
  double start_seconds_ = 0;
};

}  // namespace walrelay::devtools
