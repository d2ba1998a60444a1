#include "devtools/mock_kafka.h"

#include <cstdio>
#include <vector>

namespace walrelay::devtools {
namespace {

// rdkafka_mock.h takes protocol ApiKeys but does not define them (RD_KAFKAP_Produce = 0).
constexpr int16_t kProduceApiKey = 0;

// The mock's own handle never talks to a real broker, so it only logs noise ("no
// bootstrap.servers configured"). Keep real errors visible.
void QuietLog(const rd_kafka_t*, int level, const char* fac, const char* buf) {
  if (level <= 3) std::fprintf(stderr, "mock-kafka: %s: %s\n", fac, buf);
}

Status CheckErr(rd_kafka_resp_err_t err, const std::string& what) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return Status::Ok();
  return Status::Kafka("mock cluster: " + what + ": " + rd_kafka_err2str(err));
}

}  // namespace

Result<std::unique_ptr<MockKafka>> MockKafka::Start(int brokers) {
  if (brokers < 1)
    return Status::Config("MockKafka needs at least one broker, got " + std::to_string(brokers));

  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  if (rd_kafka_conf_set(conf, "client.id", "walrelay-mock-kafka", errstr, sizeof(errstr)) !=
      RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    return Status::Kafka(std::string("mock cluster config: ") + errstr);
  }
  rd_kafka_conf_set_log_cb(conf, QuietLog);

  std::unique_ptr<MockKafka> mk(new MockKafka());
  // rd_kafka_new takes ownership of conf only on success.
  mk->handle_.reset(rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr)));
  if (!mk->handle_) {
    rd_kafka_conf_destroy(conf);
    return Status::Kafka(std::string("cannot create mock cluster handle: ") + errstr);
  }
  mk->cluster_.reset(rd_kafka_mock_cluster_new(mk->handle_.get(), brokers));
  if (!mk->cluster_) return Status::Kafka("rd_kafka_mock_cluster_new failed");
  const char* bootstraps = rd_kafka_mock_cluster_bootstraps(mk->cluster_.get());
  mk->bootstrap_servers_ = bootstraps != nullptr ? bootstraps : "";
  mk->brokers_ = brokers;
  return mk;
}

MockKafka::~MockKafka() = default;

Status MockKafka::SetBrokerDown(int32_t broker_id) {
  return CheckErr(rd_kafka_mock_broker_set_down(cluster_.get(), broker_id),
                  "set broker " + std::to_string(broker_id) + " down");
}

Status MockKafka::SetBrokerUp(int32_t broker_id) {
  return CheckErr(rd_kafka_mock_broker_set_up(cluster_.get(), broker_id),
                  "set broker " + std::to_string(broker_id) + " up");
}

Status MockKafka::SetBrokerRtt(int32_t broker_id, int rtt_ms) {
  return CheckErr(rd_kafka_mock_broker_set_rtt(cluster_.get(), broker_id, rtt_ms),
                  "set broker " + std::to_string(broker_id) + " rtt");
}

Status MockKafka::CreateTopic(const std::string& topic, int partitions, int replication_factor) {
  return CheckErr(
      rd_kafka_mock_topic_create(cluster_.get(), topic.c_str(), partitions, replication_factor),
      "create topic " + topic);
}

void MockKafka::PushProduceErrors(int count, rd_kafka_resp_err_t err) {
  if (count <= 0) return;
  const std::vector<rd_kafka_resp_err_t> errors(static_cast<size_t>(count), err);
  rd_kafka_mock_push_request_errors_array(cluster_.get(), kProduceApiKey, errors.size(),
                                          errors.data());
}

}  // namespace walrelay::devtools
