// RAII owners for librdkafka objects: client handles, topics, queues, configurations, partition
// lists, headers, messages, errors, metadata, admin requests and events, and the mock cluster.
//
// Ownership rules the types cannot express: rd_kafka_new() takes a configuration only when it
// succeeds (release() a KafkaConfPtr after a successful call, keep it otherwise);
// rd_kafka_producev() takes headers only when it succeeds; metadata, events and errors returned
// by librdkafka belong to the caller.
#pragma once

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <memory>

namespace walrelay {

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
// A consumer that leaves its group (and stops its fetchers) before it is destroyed.
struct KafkaConsumerDeleter {
  void operator()(rd_kafka_t* rk) const {
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
  }
};
struct KafkaTopicDeleter {
  void operator()(rd_kafka_topic_t* t) const { rd_kafka_topic_destroy(t); }
};
struct KafkaQueueDeleter {
  void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
};
struct KafkaConfDeleter {
  void operator()(rd_kafka_conf_t* c) const { rd_kafka_conf_destroy(c); }
};
struct KafkaPartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
struct KafkaHeadersDeleter {
  void operator()(rd_kafka_headers_t* h) const { rd_kafka_headers_destroy(h); }
};
struct KafkaMessageDeleter {
  void operator()(rd_kafka_message_t* m) const { rd_kafka_message_destroy(m); }
};
struct KafkaErrorDeleter {
  void operator()(rd_kafka_error_t* e) const { rd_kafka_error_destroy(e); }
};
struct KafkaMetadataDeleter {
  void operator()(const rd_kafka_metadata_t* m) const { rd_kafka_metadata_destroy(m); }
};
struct KafkaEventDeleter {
  void operator()(rd_kafka_event_t* e) const { rd_kafka_event_destroy(e); }
};
struct KafkaAdminOptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
};
struct KafkaNewTopicDeleter {
  void operator()(rd_kafka_NewTopic_t* t) const { rd_kafka_NewTopic_destroy(t); }
};
struct KafkaNewPartitionsDeleter {
  void operator()(rd_kafka_NewPartitions_t* p) const { rd_kafka_NewPartitions_destroy(p); }
};
struct KafkaConfigResourceDeleter {
  void operator()(rd_kafka_ConfigResource_t* r) const { rd_kafka_ConfigResource_destroy(r); }
};
struct KafkaMockClusterDeleter {
  void operator()(rd_kafka_mock_cluster_t* c) const { rd_kafka_mock_cluster_destroy(c); }
};

using KafkaHandlePtr = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;
using KafkaConsumerPtr = std::unique_ptr<rd_kafka_t, KafkaConsumerDeleter>;
using KafkaTopicPtr = std::unique_ptr<rd_kafka_topic_t, KafkaTopicDeleter>;
using KafkaQueuePtr = std::unique_ptr<rd_kafka_queue_t, KafkaQueueDeleter>;
using KafkaConfPtr = std::unique_ptr<rd_kafka_conf_t, KafkaConfDeleter>;
using KafkaPartitionListPtr =
    std::unique_ptr<rd_kafka_topic_partition_list_t, KafkaPartitionListDeleter>;
using KafkaHeadersPtr = std::unique_ptr<rd_kafka_headers_t, KafkaHeadersDeleter>;
using KafkaMessagePtr = std::unique_ptr<rd_kafka_message_t, KafkaMessageDeleter>;
using KafkaErrorPtr = std::unique_ptr<rd_kafka_error_t, KafkaErrorDeleter>;
using KafkaMetadataPtr = std::unique_ptr<const rd_kafka_metadata_t, KafkaMetadataDeleter>;
using KafkaEventPtr = std::unique_ptr<rd_kafka_event_t, KafkaEventDeleter>;
using KafkaAdminOptionsPtr = std::unique_ptr<rd_kafka_AdminOptions_t, KafkaAdminOptionsDeleter>;
using KafkaNewTopicPtr = std::unique_ptr<rd_kafka_NewTopic_t, KafkaNewTopicDeleter>;
using KafkaNewPartitionsPtr = std::unique_ptr<rd_kafka_NewPartitions_t, KafkaNewPartitionsDeleter>;
using KafkaConfigResourcePtr =
    std::unique_ptr<rd_kafka_ConfigResource_t, KafkaConfigResourceDeleter>;
using KafkaMockClusterPtr = std::unique_ptr<rd_kafka_mock_cluster_t, KafkaMockClusterDeleter>;

}  // namespace walrelay
