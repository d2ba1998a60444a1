#include "devtools/kafka_broker.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "common/rdkafka_handles.h"
#include "devtools/free_port.h"
#include "devtools/test_pki.h"

namespace walrelay::devtools {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kSaslUser = "walrelay";
constexpr const char* kKeystorePassword = "walrelay-test-keystore";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding. Like Kafka's own
// Uuid.randomUuid(), never one starting with '-', which a command line takes for an option.
std::string RandomClusterId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::random_device rd;
  unsigned char bytes[16];
  for (auto& b : bytes) b = static_cast<unsigned char>(rd());
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char b : bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += kAlphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
  return out[0] == '-' ? RandomClusterId() : out;
}

std::string RandomSecret() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex << rd() << rd() << rd();
  return out.str();
}

std::string TailOfFile(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(std::move(line));
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string out;
  for (const auto& l : tail) out += l + "\n";
  return out;
}

// A short-lived client handle for metadata and admin requests. Its connection errors while a
// node starts are expected, so it logs nothing.
Result<KafkaHandlePtr> AdminHandle(const std::string& bootstrap) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[256];
  if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), errstr, sizeof errstr) !=
      RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    return Status::Internal(errstr);
  }
  rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk) {
    rd_kafka_conf_destroy(conf);
    return Status::Internal(std::string("cannot create an admin client: ") + errstr);
  }
  return KafkaHandlePtr(rk);
}

}  // namespace

std::string KafkaBroker::Version() { return WALRELAY_KAFKA_VERSION; }

std::string KafkaBroker::LibsDir() {
  if (std::string libs = Env("WALRELAY_KAFKA_LIBS"); !libs.empty()) return libs;
  std::string cache = Env("WALRELAY_CACHE_DIR");
  if (cache.empty()) cache = Env("HOME") + "/.cache/walrelay";
  return cache + "/kafka-" + Version() + "/libs";
}

std::string KafkaBroker::bootstrap_of(int n) const {
  return "127.0.0.1:" + std::to_string(node(n).port);
}

pid_t KafkaBroker::pid_of(int n) const {
  const Node& nd = node(n);
  return nd.process ? nd.process->pid() : 0;
}

bool KafkaBroker::NodeRunning(int n) const {
  const Node& nd = node(n);
  return nd.process && nd.process->Running();
}

std::string KafkaBroker::LogTail(int n, int lines) const {
  const Node& nd = node(n);
  std::string out = TailOfFile(nd.dir + "/broker.log", lines);
  const std::string stdout_tail = TailOfFile(nd.dir + "/stdout", 10);
  if (!stdout_tail.empty()) out += "-- stdout:\n" + stdout_tail;
  return out;
}

std::vector<std::string> KafkaBroker::JavaCommand(const Node& nd,
                                                  const std::string& main_class) const {
  std::vector<std::string> argv;
  // The broker must not outlive the process that owns it, even one killed with SIGKILL.
  if (fs::exists("/usr/bin/setpriv")) argv = {"/usr/bin/setpriv", "--pdeathsig", "KILL", "--"};
  argv.insert(argv.end(), {java_, "-Xms128m", "-Xmx" + max_heap_, "-XX:+UseG1GC",
                           "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
                           "-Dlog4j.configuration=file:" + nd.dir + "/log4j.properties", "-cp",
                           libs_dir_ + "/*", main_class});
  return argv;
}

Status KafkaBroker::WriteNodeFiles(const Node& nd, const KafkaBrokerOptions& options,
                                   const std::string& voters) const {
  std::error_code ec;
  fs::create_directories(nd.dir, ec);
  if (ec) return Status::Internal("cannot create " + nd.dir + ": " + ec.message());
  const int replication = static_cast<int>(nodes_.size());
  const int min_isr = replication >= 3 ? 2 : 1;
  std::ostringstream p;
  p << "process.roles=broker,controller\n"
    << "node.id=" << nd.id << "\n"
    << "controller.quorum.voters=" << voters << "\n"
    << "controller.listener.names=CONTROLLER\n"
    << "inter.broker.listener.name=PLAINTEXT\n"
    << "log.dirs=" << nd.dir << "/data\n"
    << "num.partitions=1\n"
    << "default.replication.factor=" << replication << "\n"
    << "min.insync.replicas=" << min_isr << "\n"
    << "offsets.topic.replication.factor=" << replication << "\n"
    << "offsets.topic.num.partitions=5\n"
    << "transaction.state.log.replication.factor=" << replication << "\n"
    << "transaction.state.log.min.isr=" << min_isr << "\n"
    << "transaction.state.log.num.partitions=5\n"
    << "group.initial.rebalance.delay.ms=0\n"
    << "auto.create.topics.enable=true\n"
    << "unclean.leader.election.enable=false\n"
    // Tests kill nodes and wait for a new leader; a quick session timeout keeps that short.
    << "broker.session.timeout.ms=6000\n"
    << "broker.heartbeat.interval.ms=500\n"
    << "controlled.shutdown.enable=true\n";
  std::string listeners = "PLAINTEXT://127.0.0.1:" + std::to_string(nd.port) +
                          ",CONTROLLER://127.0.0.1:" + std::to_string(nd.controller_port);
  std::string advertised = "PLAINTEXT://127.0.0.1:" + std::to_string(nd.port);
  std::string protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT";
  if (nd.sasl_ssl_port) {
    listeners += ",SASL_SSL://127.0.0.1:" + std::to_string(nd.sasl_ssl_port) +
                 ",MTLS://127.0.0.1:" + std::to_string(nd.mtls_port);
    advertised += ",SASL_SSL://127.0.0.1:" + std::to_string(nd.sasl_ssl_port) +
                  ",MTLS://127.0.0.1:" + std::to_string(nd.mtls_port);
    protocols += ",SASL_SSL:SASL_SSL,MTLS:SSL";
    p << "sasl.enabled.mechanisms=SCRAM-SHA-512\n"
      << "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
         "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
      << "listener.name.mtls.ssl.client.auth=required\n"
      << "ssl.keystore.type=PKCS12\n"
      << "ssl.keystore.location=" << base_dir_ << "/pki/broker.p12\n"
      << "ssl.keystore.password=" << kKeystorePassword << "\n"
      << "ssl.key.password=" << kKeystorePassword << "\n"
      << "ssl.truststore.type=PEM\n"
      << "ssl.truststore.location=" << security_.ca_pem << "\n";
  }
  p << "listeners=" << listeners << "\n"
    << "advertised.listeners=" << advertised << "\n"
    << "listener.security.protocol.map=" << protocols << "\n";
  for (const auto& line : options.extra_properties) p << line << "\n";
  if (!(std::ofstream(nd.dir + "/server.properties") << p.str()))
    return Status::Internal("cannot write " + nd.dir + "/server.properties");

  std::ofstream(nd.dir + "/log4j.properties")
      << "log4j.rootLogger=INFO, file\n"
      << "log4j.appender.file=org.apache.log4j.FileAppender\n"
      << "log4j.appender.file.File=" << nd.dir << "/broker.log\n"
      << "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
      << "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
      // The request and state-change chatter would bury what a failure message needs.
      << "log4j.logger.kafka.request.logger=WARN\n"
      << "log4j.logger.state.change.logger=WARN\n"
      << "log4j.logger.org.apache.kafka.clients=WARN\n";
  return Status::Ok();
}

Status KafkaBroker::MakeCertificates() {
  TestPki pki(base_dir_ + "/pki");
  std::error_code ec;
  fs::create_directories(pki.dir(), ec);
  if (ec) return Status::Internal("cannot create " + pki.dir() + ": " + ec.message());
  WALRELAY_RETURN_IF_ERROR(pki.MakeCa("ca", "walrelay test Kafka CA"));
  WALRELAY_RETURN_IF_ERROR(pki.MakeCa("untrusted-ca", "unrelated CA"));
  // librdkafka checks the broker's name (ssl.endpoint.identification.algorithm=https).
  WALRELAY_RETURN_IF_ERROR(pki.MakeSigned("broker", "localhost", "ca",
                                          "subjectAltName = IP:127.0.0.1, DNS:localhost\n"
                                          "extendedKeyUsage = serverAuth, clientAuth"));
  WALRELAY_RETURN_IF_ERROR(
      pki.MakeSigned("client", "walrelay-client", "ca", "extendedKeyUsage = clientAuth"));
  WALRELAY_RETURN_IF_ERROR(pki.MakeSigned("untrusted-client", "walrelay-client", "untrusted-ca",
                                          "extendedKeyUsage = clientAuth"));
  WALRELAY_RETURN_IF_ERROR(pki.MakePkcs12("broker", "ca", kKeystorePassword));
  security_.ca_pem = pki.CertPath("ca");
  security_.client_cert_pem = pki.CertPath("client");
  security_.client_key_pem = pki.KeyPath("client");
  security_.untrusted_ca_pem = pki.CertPath("untrusted-ca");
  security_.untrusted_client_cert_pem = pki.CertPath("untrusted-client");
  security_.untrusted_client_key_pem = pki.KeyPath("untrusted-client");
  security_.sasl_username = kSaslUser;
  security_.sasl_password = RandomSecret();
  return Status::Ok();
}

Status KafkaBroker::Format(const std::string& cluster_id, bool with_scram) {
  // One JVM per node, all at once: each takes ~2.5 s, mostly JVM start.
  std::vector<std::unique_ptr<ChildProcess>> formats;
  for (const Node& nd : nodes_) {
    auto argv = JavaCommand(nd, "kafka.tools.StorageTool");
    argv.insert(argv.end(), {"format", "-t", cluster_id, "-c", nd.dir + "/server.properties"});
    if (with_scram)
      argv.insert(argv.end(), {"--add-scram", std::string("SCRAM-SHA-512=[name=") + kSaslUser +
                                                  ",password=" + security_.sasl_password + "]"});
    auto child = ChildProcess::Spawn(argv, nd.dir + "/format.log");
    if (!child.ok()) return child.status();
    formats.push_back(std::move(child).value());
  }
  for (size_t i = 0; i < formats.size(); ++i) {
    auto code = formats[i]->Wait(std::chrono::seconds(120));
    if (!code.ok()) return code.status();
    if (*code != 0)
      return Status::Internal("formatting Kafka node " + std::to_string(i + 1) +
                              "'s storage failed (exit " + std::to_string(*code) +
                              "): " + TailOfFile(nodes_[i].dir + "/format.log", 20));
  }
  return Status::Ok();
}

Status KafkaBroker::Launch(Node& nd) {
  auto argv = JavaCommand(nd, "kafka.Kafka");
  argv.push_back(nd.dir + "/server.properties");
  auto child = ChildProcess::Spawn(argv, nd.dir + "/stdout");
  if (!child.ok()) return child.status();
  nd.process = std::move(child).value();
  return Status::Ok();
}

Status KafkaBroker::WaitReady(const std::vector<int>& ids, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (int id : ids) {
    auto rk = AdminHandle(bootstrap_of(id));
    if (!rk.ok()) return rk.status();
    std::string last_error = "no answer yet";
    while (true) {
      if (!NodeRunning(id))
        return Status::Connection("Kafka node " + std::to_string(id) +
                                  " exited while starting; its log ends:\n" + LogTail(id));
      const rd_kafka_metadata_t* md = nullptr;
      const rd_kafka_resp_err_t err = rd_kafka_metadata(rk->get(), 0, nullptr, &md, 1000);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        KafkaMetadataPtr owned(md);
        // Ready when the node answers and sees every node of the cluster registered.
        bool self_listed = false;
        for (int b = 0; b < md->broker_cnt; ++b) self_listed |= md->brokers[b].id == id;
        if (self_listed && (ids.size() == 1 || md->broker_cnt >= static_cast<int>(ids.size())))
          break;
        last_error = std::to_string(md->broker_cnt) + " of " + std::to_string(ids.size()) +
                     " nodes registered";
      } else {
        last_error = rd_kafka_err2str(err);
      }
      if (Clock::now() >= deadline)
        return Status::Connection("Kafka node " + std::to_string(id) + " did not answer a " +
                                  "metadata request within " + std::to_string(timeout.count()) +
                                  " s (" + last_error + "); its log ends:\n" + LogTail(id));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<KafkaBroker>> KafkaBroker::Start(const KafkaBrokerOptions& options) {
  if (options.nodes != 1 && options.nodes != 3)
    return Status::Config("KafkaBroker: nodes must be 1 or 3, not " +
                          std::to_string(options.nodes));
  const auto started = Clock::now();
  std::unique_ptr<KafkaBroker> broker(new KafkaBroker());
  broker->libs_dir_ = LibsDir();
  if (!fs::exists(broker->libs_dir_ + "/kafka_2.13-" + Version() + ".jar"))
    return Status::Precondition("Apache Kafka " + Version() + " is not in " + broker->libs_dir_ +
                                "; run scripts/fetch-kafka.sh (it fetches the broker with Maven)");
  const std::string java_home = Env("JAVA_HOME");
  broker->java_ = java_home.empty() ? "java" : java_home + "/bin/java";
  broker->max_heap_ = options.max_heap;

  std::string tmp = Env("TMPDIR");
  if (tmp.empty()) tmp = "/tmp";
  std::string pattern = tmp + "/walrelay-kafka-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    return Status::Internal("cannot create a temporary directory under " + tmp);
  broker->base_dir_ = pattern;

  if (options.security) WALRELAY_RETURN_IF_ERROR(broker->MakeCertificates());
  std::string voters;
  for (int id = 1; id <= options.nodes; ++id) {
    Node nd;
    nd.id = id;
    nd.dir = broker->base_dir_ + "/node" + std::to_string(id);
    for (int* port : {&nd.port, &nd.controller_port}) {
      auto p = PickFreePort();
      if (!p.ok()) return p.status();
      *port = *p;
    }
    if (options.security && id == 1) {
      for (int* port : {&nd.sasl_ssl_port, &nd.mtls_port}) {
        auto p = PickFreePort();
        if (!p.ok()) return p.status();
        *port = *p;
      }
      broker->security_.sasl_ssl_bootstrap = "127.0.0.1:" + std::to_string(nd.sasl_ssl_port);
      broker->security_.mtls_bootstrap = "127.0.0.1:" + std::to_string(nd.mtls_port);
    }
    voters += (voters.empty() ? "" : ",") + std::to_string(id) +
              "@127.0.0.1:" + std::to_string(nd.controller_port);
    broker->bootstrap_servers_ += (broker->bootstrap_servers_.empty() ? "" : ",") +
                                  std::string("127.0.0.1:") + std::to_string(nd.port);
    broker->nodes_.push_back(std::move(nd));
  }
  for (const Node& nd : broker->nodes_)
    WALRELAY_RETURN_IF_ERROR(broker->WriteNodeFiles(nd, options, voters));
  WALRELAY_RETURN_IF_ERROR(broker->Format(RandomClusterId(), options.security));
  std::vector<int> ids;
  for (Node& nd : broker->nodes_) {
    WALRELAY_RETURN_IF_ERROR(broker->Launch(nd));
    ids.push_back(nd.id);
  }
  WALRELAY_RETURN_IF_ERROR(broker->WaitReady(ids, std::chrono::seconds(90)));
  broker->start_seconds_ = std::chrono::duration<double>(Clock::now() - started).count();
  return broker;
}

KafkaBroker::~KafkaBroker() {
  for (Node& nd : nodes_) nd.process.reset();  // SIGKILL and reap
  if (!base_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(base_dir_, ec);
  }
}

Status KafkaBroker::Kill(int n, int signal) {
  Node& nd = node(n);
  if (!nd.process || !nd.process->Running())
    return Status::Internal("Kafka node " + std::to_string(n) + " is not running");
  WALRELAY_RETURN_IF_ERROR(nd.process->Kill(signal));
  if (signal == SIGKILL || signal == SIGTERM) {
    auto code = nd.process->Wait(std::chrono::seconds(60));
    if (!code.ok()) return code.status();
  }
  return Status::Ok();
}

Status KafkaBroker::StartNode(int n) {
  Node& nd = node(n);
  if (nd.process && nd.process->Running())
    return Status::Internal("Kafka node " + std::to_string(n) + " is already running");
  WALRELAY_RETURN_IF_ERROR(Launch(nd));
  return WaitReady({n}, std::chrono::seconds(90));
}

Status KafkaBroker::CreateTopic(const std::string& topic, int partitions, int replication_factor,
                                const std::map<std::string, std::string>& configs) {
  auto rk = AdminHandle(bootstrap_servers_);
  if (!rk.ok()) return rk.status();
  char errstr[256];
  rd_kafka_NewTopic_t* new_topic =
      rd_kafka_NewTopic_new(topic.c_str(), partitions, replication_factor, errstr, sizeof errstr);
  if (!new_topic) return Status::Internal("topic '" + topic + "': " + errstr);
  KafkaNewTopicPtr owned_topic(new_topic);
  for (const auto& [key, value] : configs)
    rd_kafka_NewTopic_set_config(new_topic, key.c_str(), value.c_str());
  KafkaQueuePtr queue(rd_kafka_queue_new(rk->get()));
  rd_kafka_CreateTopics(rk->get(), &new_topic, 1, nullptr, queue.get());
  KafkaEventPtr event(rd_kafka_queue_poll(queue.get(), 30000));
  if (!event) return Status::Kafka("CreateTopics for '" + topic + "' got no answer in 30 s");
  if (rd_kafka_event_error(event.get()))
    return Status::Kafka("CreateTopics '" + topic +
                         "': " + rd_kafka_event_error_string(event.get()));
  const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event.get());
  size_t count = 0;
  const rd_kafka_topic_result_t** results = rd_kafka_CreateTopics_result_topics(result, &count);
  for (size_t i = 0; i < count; ++i) {
    if (rd_kafka_topic_result_error(results[i]))
      return Status::Kafka("CreateTopics '" + topic +
                           "': " + rd_kafka_topic_result_error_string(results[i]));
  }
  // Leaders are elected right after creation; wait so the first produce finds them.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (int p = 0; p < partitions; ++p) {
    while (!LeaderOf(topic, p).ok()) {
      if (Clock::now() >= deadline)
        return Status::Kafka("topic '" + topic + "' partition " + std::to_string(p) +
                             " has no leader 30 s after creation");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return Status::Ok();
}

Result<int> KafkaBroker::LeaderOf(const std::string& topic, int partition) const {
  auto rk = AdminHandle(bootstrap_servers_);
  if (!rk.ok()) return rk.status();
  KafkaTopicPtr rkt(rd_kafka_topic_new(rk->get(), topic.c_str(), nullptr));
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk->get(), 0, rkt.get(), &md, 5000);
  if (err) return Status::Kafka("metadata for '" + topic + "': " + rd_kafka_err2str(err));
  KafkaMetadataPtr owned(md);
  for (int t = 0; t < md->topic_cnt; ++t) {
    const auto& tm = md->topics[t];
    if (topic != tm.topic) continue;
    if (tm.err) return Status::Kafka("topic '" + topic + "': " + rd_kafka_err2str(tm.err));
    for (int p = 0; p < tm.partition_cnt; ++p) {
      if (tm.partitions[p].id == partition && tm.partitions[p].leader >= 0 &&
          tm.partitions[p].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        return tm.partitions[p].leader;
    }
  }
  return Status::Kafka("topic '" + topic + "' partition " + std::to_string(partition) +
                       " has no leader");
}

}  // namespace walrelay::devtools
