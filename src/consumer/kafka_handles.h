// RAII owners for the librdkafka objects the consumer uses, and handle creation from a
// property map.
#pragma once

#include <librdkafka/rdkafka.h>

#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace walrelay::consumer {

struct KafkaHandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
struct MessageDeleter {
  void operator()(rd_kafka_message_t* m) const { rd_kafka_message_destroy(m); }
};
struct PartitionListDeleter {
  void operator()(rd_kafka_topic_partition_list_t* l) const {
    rd_kafka_topic_partition_list_destroy(l);
  }
};
struct HeadersDeleter {
  void operator()(rd_kafka_headers_t* h) const { rd_kafka_headers_destroy(h); }
};
using KafkaHandlePtr = std::unique_ptr<rd_kafka_t, KafkaHandleDeleter>;
using MessagePtr = std::unique_ptr<rd_kafka_message_t, MessageDeleter>;
using PartitionListPtr = std::unique_ptr<rd_kafka_topic_partition_list_t, PartitionListDeleter>;
using HeadersPtr = std::unique_ptr<rd_kafka_headers_t, HeadersDeleter>;

// Filled by the delivery report of the one message whose opaque points at it.
struct DeliverySlot {
  bool done = false;
  rd_kafka_resp_err_t error = RD_KAFKA_RESP_ERR_NO_ERROR;
};

// A consumer group member's callbacks (served from rd_kafka_consumer_poll) and their opaque.
struct GroupCallbacks {
  void (*rebalance)(rd_kafka_t*, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t*,
                    void* opaque) = nullptr;
  void (*offset_commit)(rd_kafka_t*, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t*,
                        void* opaque) = nullptr;
  void* opaque = nullptr;
};

// A consumer or producer with `properties`. Producers report deliveries into the message's
// DeliverySlot opaque. A consumer gets `group`'s callbacks. Errors name the property as
// `key_prefix` + key and never show the value of a secret one.
Result<KafkaHandlePtr> MakeKafkaHandle(rd_kafka_type_t type,
                                       const std::map<std::string, std::string>& properties,
                                       const std::string& key_prefix,
                                       const GroupCallbacks& group = {});

}  // namespace walrelay::consumer
