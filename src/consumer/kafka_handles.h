// Kafka handle creation from a property map, and the callbacks' opaque types.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/rdkafka_handles.h"
#include "common/status.h"

namespace walrelay::consumer {

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
