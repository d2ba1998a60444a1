// The Apache Kafka sandbox (src/devtools/kafka_broker.h) on its own: it starts, answers,
// keeps acknowledged records across a kill -9 and restart, creates topics with configs,
// stops its JVMs by pid, and its security listeners admit the right clients only.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <thread>

#include "common/rdkafka_handles.h"
#include "devtools/kafka_broker.h"
#include "devtools/topic_reader.h"

namespace walrelay::devtools {
namespace {

using namespace std::chrono_literals;

// Produces `count` records to `topic` with acks=all and waits for every report; returns how
// many were acknowledged, or -1 if the client could not be made.
int ProduceAcked(const std::map<std::string, std::string>& conf_values, const std::string& topic,
                 int count, std::string* first_error = nullptr) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [k, v] : conf_values)
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      if (first_error) *first_error = err;
      return -1;
    }
  struct Counts {
    int acked = 0;
    int failed = 0;
    std::string error;
  } counts;
  rd_kafka_conf_set_opaque(conf, &counts);
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* c = static_cast<Counts*>(opaque);
    if (m->err) {
      ++c->failed;
      if (c->error.empty()) c->error = rd_kafka_err2str(m->err);
    } else {
      ++c->acked;
    }
  });
  rd_kafka_conf_set_error_cb(conf, [](rd_kafka_t*, int e, const char* reason, void* opaque) {
    auto* c = static_cast<Counts*>(opaque);
    if (c->error.empty())
      c->error =
          std::string(rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(e))) + ": " + reason;
  });
  KafkaHandlePtr rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err));
  REQUIRE_MESSAGE(rk, err);
  for (int i = 0; i < count; ++i) {
    const std::string value = "value-" + std::to_string(i);
    REQUIRE(rd_kafka_producev(rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  rd_kafka_flush(rk.get(), 20000);
  if (first_error) *first_error = counts.error;
  return counts.acked;
}

}  // namespace

TEST_CASE("one node: starts, acknowledges with acks=all, survives kill -9, stops by pid") {
  auto started = KafkaBroker::Start();
  REQUIRE_MESSAGE(started.ok(), started.status().ToString());
  auto& broker = **started;
  MESSAGE("Apache Kafka " << KafkaBroker::Version() << " started in " << broker.start_seconds()
                          << " s (storage format included)");
  CHECK(broker.nodes() == 1);
  CHECK(broker.start_seconds() > 0);
  const std::map<std::string, std::string> conf = {
      {"bootstrap.servers", broker.bootstrap_servers()},
      {"acks", "all"},
      {"enable.idempotence", "true"}};
  REQUIRE(ProduceAcked(conf, "sandbox.first", 100) == 100);

  // Acknowledged records live through a crash of the JVM (they are in the OS page cache).
  const pid_t pid = broker.pid_of(1);
  REQUIRE(broker.Kill(1).ok());
  CHECK(!broker.NodeRunning(1));
  CHECK((::kill(pid, 0) != 0 && errno == ESRCH));
  REQUIRE(broker.StartNode(1).ok());
  REQUIRE(ProduceAcked(conf, "sandbox.first", 10) == 10);
  auto reader = TopicReader::Create(broker.bootstrap_servers());
  REQUIRE(reader.ok());
  auto records = (*reader)->ReadAtLeast({"sandbox.first"}, 110, 30s);
  REQUIRE(records.ok());
  CHECK(records->size() == 110);

  const std::string dir = broker.base_dir();
  started->reset();
  CHECK(!std::filesystem::exists(dir));
  CHECK((::kill(pid, 0) != 0 && errno == ESRCH));
}

TEST_CASE("topics are created with their configs; the broker enforces them") {
  auto started = KafkaBroker::Start();
  REQUIRE_MESSAGE(started.ok(), started.status().ToString());
  auto& broker = **started;
  REQUIRE(broker.CreateTopic("sandbox.small", 3, 1, {{"max.message.bytes", "2000"}}).ok());
  for (int p = 0; p < 3; ++p) CHECK(broker.LeaderOf("sandbox.small", p).value() == 1);
  // A value over the topic's limit is refused by the broker, not by the client.
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[256];
  rd_kafka_conf_set(conf, "bootstrap.servers", broker.bootstrap_servers().c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "message.max.bytes", "1000000", err, sizeof err);
  rd_kafka_resp_err_t delivery = RD_KAFKA_RESP_ERR_NO_ERROR;
  rd_kafka_conf_set_opaque(conf, &delivery);
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    *static_cast<rd_kafka_resp_err_t*>(opaque) = m->err;
  });
  KafkaHandlePtr rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err));
  REQUIRE(rk);
  std::string big(5000, 'x');
  REQUIRE(rd_kafka_producev(rk.get(), RD_KAFKA_V_TOPIC("sandbox.small"),
                            RD_KAFKA_V_VALUE(big.data(), big.size()),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END) == 0);
  rd_kafka_flush(rk.get(), 20000);
  CHECK(delivery == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  CHECK(!broker.CreateTopic("sandbox.small", 1, 1).ok());  // exists already
}

TEST_CASE("security listeners: SCRAM-SHA-512 over TLS and mutual TLS admit the right clients") {
  KafkaBrokerOptions options;
  options.security = true;
  auto started = KafkaBroker::Start(options);
  REQUIRE_MESSAGE(started.ok(), started.status().ToString());
  const KafkaSecurity& sec = (*started)->security();
  std::map<std::string, std::string> sasl = {{"bootstrap.servers", sec.sasl_ssl_bootstrap},
                                             {"security.protocol", "SASL_SSL"},
                                             {"sasl.mechanisms", "SCRAM-SHA-512"},
                                             {"sasl.username", sec.sasl_username},
                                             {"sasl.password", sec.sasl_password},
                                             {"ssl.ca.location", sec.ca_pem},
                                             {"message.timeout.ms", "8000"}};
  std::string error;
  CHECK_MESSAGE(ProduceAcked(sasl, "sandbox.sasl", 5, &error) == 5, error);
  sasl["sasl.password"] = "wrong";
  CHECK(ProduceAcked(sasl, "sandbox.sasl", 1, &error) == 0);
  CHECK_MESSAGE(error.find("uthentication") != std::string::npos, error);

  std::map<std::string, std::string> mtls = {
      {"bootstrap.servers", sec.mtls_bootstrap}, {"security.protocol", "SSL"},
      {"ssl.ca.location", sec.ca_pem},           {"ssl.certificate.location", sec.client_cert_pem},
      {"ssl.key.location", sec.client_key_pem},  {"message.timeout.ms", "8000"}};
  CHECK_MESSAGE(ProduceAcked(mtls, "sandbox.mtls", 5, &error) == 5, error);
  auto untrusted = mtls;
  untrusted["ssl.certificate.location"] = sec.untrusted_client_cert_pem;
  untrusted["ssl.key.location"] = sec.untrusted_client_key_pem;
  CHECK(ProduceAcked(untrusted, "sandbox.mtls", 1, &error) == 0);
  MESSAGE("untrusted client certificate: " << error);
  auto wrong_ca = mtls;
  wrong_ca["ssl.ca.location"] = sec.untrusted_ca_pem;
  CHECK(ProduceAcked(wrong_ca, "sandbox.mtls", 1, &error) == 0);
  CHECK_MESSAGE(error.find("certificate verify failed") != std::string::npos, error);
}

}  // namespace walrelay::devtools
