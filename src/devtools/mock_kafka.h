// MockKafka: librdkafka's in-process mock Kafka cluster (rdkafka_mock.h), for `walrelay demo`,
// `walrelay dev-kafka` and tests that need a broker without a JVM.
//
// Contract: Start() brings up `brokers` mock brokers listening on 127.0.0.1 ephemeral ports;
// bootstrap_servers() is the list to give any librdkafka client (other processes included,
// while this object lives). Broker ids are 1..brokers. The destructor shuts the cluster down;
// clients still connected then see broker transport errors.
//
// Mock behaviour worth knowing (librdkafka 2.0.2):
//  - A topic first seen in a produce/metadata request is auto-created with 4 partitions
//    (replication factor min(3, brokers)); create topics explicitly with CreateTopic() when a
//    test depends on the partition count. Consumers do not auto-create topics.
//  - Data lives in memory only; there is no retention, compaction or persistence.
//  - SetBrokerDown() closes the broker's connections and refuses new ones, but partition
//    leadership does not move, so with one broker clients just retry until SetBrokerUp().
//
// Thread-safety: all methods may be called from any thread; the mock cluster runs on its own
// thread and librdkafka serialises the control calls onto it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/rdkafka_handles.h"
#include "common/status.h"

namespace walrelay::devtools {

class MockKafka {
 public:
  static Result<std::unique_ptr<MockKafka>> Start(int brokers = 1);

  MockKafka(const MockKafka&) = delete;
  MockKafka& operator=(const MockKafka&) = delete;
  ~MockKafka();

  // "127.0.0.1:port,..." for bootstrap.servers.
  const std::string& bootstrap_servers() const { return bootstrap_servers_; }
  // For rdkafka_mock.h calls not wrapped here. Owned by this object.
  rd_kafka_mock_cluster_t* cluster() const { return cluster_.get(); }
  int broker_count() const { return brokers_; }

  Status SetBrokerDown(int32_t broker_id);
  Status SetBrokerUp(int32_t broker_id);
  // Adds `rtt_ms` latency to every response from the broker (0 = none).
  Status SetBrokerRtt(int32_t broker_id, int rtt_ms);
  Status CreateTopic(const std::string& topic, int partitions, int replication_factor);
  // The next `count` Produce requests (to any broker) fail with `err`; retriable errors are
  // retried by the producer, others fail the batch's messages.
  void PushProduceErrors(int count, rd_kafka_resp_err_t err);

 private:
  MockKafka() = default;

  // Declared before cluster_ so it is destroyed after it: the cluster runs on this handle.
  KafkaHandlePtr handle_;
  KafkaMockClusterPtr cluster_;
  std::string bootstrap_servers_;
  int brokers_ = 0;
};

}  // namespace walrelay::devtools
