#include "consumer/kafka_handles.h"

namespace walrelay::consumer {
namespace {

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void*) {
  if (m->_private == nullptr) return;
  auto* slot = static_cast<DeliverySlot*>(m->_private);
  slot->error = m->err;
  slot->done = true;
}

bool Secret(const std::string& key) {
  for (const char* word : {"password", "secret", "jaas", "token", "key.pem"})
    if (key.find(word) != std::string::npos) return true;
  return false;
}

}  // namespace

Result<KafkaHandlePtr> MakeKafkaHandle(rd_kafka_type_t type,
                                       const std::map<std::string, std::string>& properties,
                                       const std::string& key_prefix, const GroupCallbacks& group) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  for (const auto& [key, value] : properties) {
    if (rd_kafka_conf_set(conf, key.c_str(), value.c_str(), errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return Status::Config(key_prefix + key + ": " +
                            (Secret(key) ? std::string("invalid value") : std::string(errstr)));
    }
  }
  if (type == RD_KAFKA_PRODUCER) rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
  if (group.rebalance != nullptr) rd_kafka_conf_set_rebalance_cb(conf, group.rebalance);
  if (group.offset_commit != nullptr) rd_kafka_conf_set_offset_commit_cb(conf, group.offset_commit);
  if (group.opaque != nullptr) rd_kafka_conf_set_opaque(conf, group.opaque);
  // rd_kafka_new takes ownership of conf only on success.
  KafkaHandlePtr rk(rd_kafka_new(type, conf, errstr, sizeof(errstr)));
  if (!rk) {
    rd_kafka_conf_destroy(conf);
    return Status::Config(std::string("cannot create the Kafka ") +
                          (type == RD_KAFKA_PRODUCER ? "producer" : "consumer") + ": " + errstr);
  }
  return rk;
}

}  // namespace walrelay::consumer
