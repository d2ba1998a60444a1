#include "delivery/offset_store.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <set>
#include <vector>

#include "common/rdkafka_handles.h"

namespace walrelay {
namespace {

void QuietLog(const rd_kafka_t*, int, const char*, const char*) {}

template <typename Deleter>
Result<std::unique_ptr<rd_kafka_t, Deleter>> NewClient(
    rd_kafka_type_t type, const std::map<std::string, std::string>& properties,
    const std::map<std::string, std::string>& overrides) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  auto set = [&](const std::string& name, const std::string& value) -> Status {
    if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK)
      // The value is not shown: it may be a secret.
      return Status::Config("kafka." + name + ": " + errstr);
    return Status::Ok();
  };
  for (const auto& [name, value] : properties)
    if (!overrides.contains(name))
      if (Status st = set(name, value); !st.ok()) {
        rd_kafka_conf_destroy(conf);
        return st;
      }
  for (const auto& [name, value] : overrides)
    if (Status st = set(name, value); !st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
  rd_kafka_conf_set_log_cb(conf, QuietLog);
  rd_kafka_t* rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
  if (!rk) {
    rd_kafka_conf_destroy(conf);
    return Status::Kafka(std::string("cannot create a Kafka client: ") + errstr);
  }
  return std::unique_ptr<rd_kafka_t, Deleter>(rk);
}

int TimeoutMs(std::chrono::milliseconds timeout) {
  return static_cast<int>(std::max<int64_t>(1, timeout.count()));
}

// The partition count of `topic`; 0 when the topic does not exist.
Result<int32_t> PartitionCount(rd_kafka_t* rk, const std::string& topic,
                               std::chrono::milliseconds timeout) {
  KafkaTopicPtr rkt(rd_kafka_topic_new(rk, topic.c_str(), nullptr));
  if (!rkt)
    return Status::Kafka("offsets topic '" + topic +
                         "': " + rd_kafka_err2str(rd_kafka_last_error()));
  const rd_kafka_metadata_t* raw = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt.get(), &raw, TimeoutMs(timeout));
  if (err)
    return Status::Kafka("metadata of offsets topic '" + topic + "': " + rd_kafka_err2str(err));
  KafkaMetadataPtr metadata(raw);
  if (metadata->topic_cnt != 1) return int32_t{0};
  const rd_kafka_metadata_topic_t& t = metadata->topics[0];
  if (t.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) return int32_t{0};
  if (t.err)
    return Status::Kafka("metadata of offsets topic '" + topic + "': " + rd_kafka_err2str(t.err));
  return static_cast<int32_t>(t.partition_cnt);
}

// The topic's cleanup.policy, as the broker reports it.
Result<std::string> CleanupPolicy(rd_kafka_t* rk, const std::string& topic,
                                  std::chrono::milliseconds timeout) {
  KafkaConfigResourcePtr resource(
      rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str()));
  KafkaAdminOptionsPtr options(rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS));
  char errstr[512];
  rd_kafka_AdminOptions_set_request_timeout(options.get(), TimeoutMs(timeout), errstr,
                                            sizeof errstr);
  KafkaQueuePtr queue(rd_kafka_queue_new(rk));
  rd_kafka_ConfigResource_t* resources[] = {resource.get()};
  rd_kafka_DescribeConfigs(rk, resources, 1, options.get(), queue.get());
  KafkaEventPtr event(rd_kafka_queue_poll(queue.get(), TimeoutMs(timeout) + 1000));
  const std::string what = "describing offsets topic '" + topic + "'";
  if (!event)
    return Status::Kafka(what + " timed out after " + std::to_string(timeout.count()) + " ms");
  if (rd_kafka_event_error(event.get()))
    return Status::Kafka(what + ": " + rd_kafka_event_error_string(event.get()));
  size_t count = 0;
  const rd_kafka_ConfigResource_t** described = rd_kafka_DescribeConfigs_result_resources(
      rd_kafka_event_DescribeConfigs_result(event.get()), &count);
  for (size_t i = 0; i < count; ++i) {
    if (rd_kafka_ConfigResource_error(described[i]))
      return Status::Kafka(what + ": " + rd_kafka_ConfigResource_error_string(described[i]));
    size_t entries = 0;
    const rd_kafka_ConfigEntry_t** configs =
        rd_kafka_ConfigResource_configs(described[i], &entries);
    for (size_t e = 0; e < entries; ++e)
      if (std::string_view(rd_kafka_ConfigEntry_name(configs[e])) == "cleanup.policy") {
        const char* value = rd_kafka_ConfigEntry_value(configs[e]);
        return std::string(value ? value : "");
      }
  }
  return Status::Kafka(what + ": the broker did not report its cleanup.policy");
}

// Connect refuses an offsets topic that is not compacted, and so does walrelay: deleting old
// segments by time or size would delete the only copy of a connector's position.
Status RequireCompacted(rd_kafka_t* rk, const std::string& topic,
                        std::chrono::milliseconds timeout) {
  auto policy = CleanupPolicy(rk, topic, timeout);
  if (!policy.ok()) return policy.status();
  if (*policy == "compact") return Status::Ok();
  return Status::Config(
      "offsets.storage.topic '" + topic + "' has cleanup.policy=" + *policy +
      "; an offsets topic must have cleanup.policy=compact alone, or its records are "
      "deleted by age or size (alter the topic, or name another one)");
}

// Creating a topic and describing its configuration go to the cluster's controller. A cluster
// that names none of its brokers as controller (librdkafka's mock cluster) never answers those
// requests: say so at once instead of waiting out the timeout.
Status RequireController(rd_kafka_t* rk, const std::string& topic,
                         std::chrono::milliseconds timeout) {
  const int32_t controller = rd_kafka_controllerid(rk, TimeoutMs(timeout));
  const rd_kafka_metadata_t* raw = nullptr;
  if (rd_kafka_metadata(rk, 0, nullptr, &raw, TimeoutMs(timeout)) != RD_KAFKA_RESP_ERR_NO_ERROR)
    return Status::Ok();  // the admin request itself will say what is wrong
  KafkaMetadataPtr metadata(raw);
  for (int i = 0; i < metadata->broker_cnt; ++i)
    if (metadata->brokers[i].id == controller) return Status::Ok();
  return Status::Precondition("offsets topic '" + topic +
                              "' cannot be created or checked: the "
                              "cluster names no broker as its controller (librdkafka's mock "
                              "cluster does not)");
}

struct Found {
  std::optional<SourceOffset> offset;  // nullopt after a tombstone
  int64_t timestamp = -1;              // the record's, ms since the epoch
};

}  // namespace

OffsetStore::OffsetStore(std::map<std::string, std::string> kafka_properties, std::string topic,
                         std::string key)
    : kafka_properties_(std::move(kafka_properties)),
      topic_(std::move(topic)),
      key_(std::move(key)) {}

Result<int32_t> OffsetStore::EnsureTopic(int32_t partitions, int16_t replication_factor,
                                         std::chrono::milliseconds timeout) const {
  if (partitions < 1)
    return Status::Config("offsets.storage.partitions must be at least 1, not " +
                          std::to_string(partitions));
  // A consumer-type handle: a producer's metadata request for a missing topic would have the
  // broker auto-create it, uncompacted, with the broker's partition count.
  auto client = NewClient<KafkaHandleDeleter>(RD_KAFKA_CONSUMER, kafka_properties_,
                                              {{"allow.auto.create.topics", "false"}});
  if (!client.ok()) return client.status();
  rd_kafka_t* rk = client->get();
  auto existing = PartitionCount(rk, topic_, timeout);
  if (!existing.ok()) return existing.status();
  WALRELAY_RETURN_IF_ERROR(RequireController(rk, topic_, timeout));
  if (*existing > 0) {
    WALRELAY_RETURN_IF_ERROR(RequireCompacted(rk, topic_, timeout));
    return *existing;
  }

  char errstr[512];
  KafkaNewTopicPtr new_topic(
      rd_kafka_NewTopic_new(topic_.c_str(), partitions, replication_factor, errstr, sizeof errstr));
  if (!new_topic) return Status::Config("offsets topic '" + topic_ + "': " + errstr);
  // Compacted like Connect's offsets topic: only the last offset of each key must survive.
  rd_kafka_NewTopic_set_config(new_topic.get(), "cleanup.policy", "compact");
  KafkaAdminOptionsPtr options(rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS));
  rd_kafka_AdminOptions_set_request_timeout(options.get(), TimeoutMs(timeout), errstr,
                                            sizeof errstr);
  KafkaQueuePtr queue(rd_kafka_queue_new(rk));
  rd_kafka_NewTopic_t* topics[] = {new_topic.get()};
  rd_kafka_CreateTopics(rk, topics, 1, options.get(), queue.get());
  KafkaEventPtr event(rd_kafka_queue_poll(queue.get(), TimeoutMs(timeout) + 1000));
  if (!event)
    return Status::Kafka("creating offsets topic '" + topic_ + "' timed out after " +
                         std::to_string(timeout.count()) + " ms");
  if (rd_kafka_event_error(event.get()))
    return Status::Kafka("creating offsets topic '" + topic_ +
                         "': " + rd_kafka_event_error_string(event.get()));
  size_t count = 0;
  const rd_kafka_topic_result_t** results =
      rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(event.get()), &count);
  for (size_t i = 0; i < count; ++i) {
    const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
    // Another process created it between the lookup and here: as good as ours.
    if (err && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
      const char* why = rd_kafka_topic_result_error_string(results[i]);
      return Status::Kafka("creating offsets topic '" + topic_ + "' (offsets.storage.partitions=" +
                           std::to_string(partitions) + ", offsets.storage.replication.factor=" +
                           std::to_string(replication_factor) +
                           "): " + (why ? why : rd_kafka_err2str(err)));
    }
  }
  return partitions;
}

Result<std::optional<SourceOffset>> OffsetStore::ReadLast(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  static std::atomic<int> readers{0};
  // librdkafka only assigns on a handle with a group.id; the group is never joined and
  // nothing is committed, so the name only has to be unique.
  const std::string group =
      "walrelay-offsets-reader-" + std::to_string(::getpid()) + "-" + std::to_string(readers++);
  auto client = NewClient<KafkaConsumerDeleter>(RD_KAFKA_CONSUMER, kafka_properties_,
                                                {{"group.id", group},
                                                 {"isolation.level", "read_committed"},
                                                 {"enable.auto.commit", "false"},
                                                 {"enable.auto.offset.store", "false"},
                                                 {"enable.partition.eof", "true"},
                                                 // The end shows as an empty fetch, which the
                                                 // broker would hold 500 ms by default: the
                                                 // relay's start would wait for it.
                                                 {"fetch.wait.max.ms", "10"},
                                                 {"allow.auto.create.topics", "false"},
                                                 {"auto.offset.reset", "earliest"}});
  if (!client.ok()) return client.status();
  rd_kafka_t* rk = client->get();
  auto partitions = PartitionCount(rk, topic_, timeout);
  if (!partitions.ok()) return partitions.status();
  if (*partitions == 0) return std::optional<SourceOffset>();

  // The end of every partition as it is now. read_committed alone would report the end of a
  // partition at its last stable offset, below the records of any transaction still open on
  // it (another connector sharing the topic, a hung producer), and this relay's own newest
  // offset record may lie past such a transaction: the read is complete only at these ends.
  // They are asked for by a read_uncommitted client: a read_committed one is told the last
  // stable offset again.
  auto end_client = NewClient<KafkaHandleDeleter>(
      RD_KAFKA_CONSUMER, kafka_properties_,
      {{"isolation.level", "read_uncommitted"}, {"allow.auto.create.topics", "false"}});
  if (!end_client.ok()) return end_client.status();
  std::map<int32_t, int64_t> end_at_start;
  for (int32_t p = 0; p < *partitions; ++p) {
    int64_t low = 0, high = 0;
    const rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
        end_client->get(), topic_.c_str(), p, &low, &high, TimeoutMs(timeout));
    if (err)
      return Status::Kafka("reading the end of offsets topic '" + topic_ + "' partition " +
                           std::to_string(p) + ": " + rd_kafka_err2str(err));
    if (high > low) end_at_start[p] = high;
  }
  if (end_at_start.empty()) return std::optional<SourceOffset>();

  KafkaPartitionListPtr list(
      rd_kafka_topic_partition_list_new(static_cast<int>(end_at_start.size())));
  for (const auto& [p, end] : end_at_start)
    rd_kafka_topic_partition_list_add(list.get(), topic_.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  if (const rd_kafka_resp_err_t err = rd_kafka_assign(rk, list.get()))
    return Status::Kafka("assigning offsets topic '" + topic_ + "': " + rd_kafka_err2str(err));

  std::map<int32_t, Found> last;        // per partition
  std::map<int32_t, int64_t> position;  // per partition: the next offset to read
  std::set<std::string> foreign_keys;
  auto complete = [&](int32_t p) { return position[p] >= end_at_start[p]; };
  auto all_complete = [&] {
    for (const auto& [p, end] : end_at_start)
      if (!complete(p)) return false;
    return true;
  };
  while (!all_complete()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::string behind;
      for (const auto& [p, end] : end_at_start)
        if (!complete(p))
          behind += (behind.empty() ? "" : ", ") + std::string("partition ") + std::to_string(p) +
                    " at offset " + std::to_string(position[p]) + " of " + std::to_string(end);
      return Status::Kafka(
          "reading offsets topic '" + topic_ + "' to its end timed out after " +
          std::to_string(timeout.count()) + " ms (" + behind +
          "): a transaction that another "
          "producer keeps open on the topic hides the records after it from read_committed "
          "readers, so this relay's newest position may not be readable yet; it is not started "
          "from an older one. Give each connector its own offsets.storage.topic");
    }
    KafkaMessagePtr m(
        rd_kafka_consumer_poll(rk, static_cast<int>(std::min<int64_t>(left.count(), 200))));
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      // The offset of an end-of-partition event is the next one to fetch; it may still stop
      // below the end noted at start (an open transaction): then keep reading.
      position[m->partition] = std::max(position[m->partition], m->offset);
      continue;
    }
    if (m->err)
      return Status::Kafka("reading offsets topic '" + topic_ + "' partition " +
                           std::to_string(m->partition) + ": " + rd_kafka_message_errstr(m.get()));
    position[m->partition] = std::max(position[m->partition], m->offset + 1);
    const std::string_view key =
        m->key ? std::string_view(static_cast<const char*>(m->key), m->key_len)
               : std::string_view();
    if (key != key_) {
      if (foreign_keys.size() < 5) foreign_keys.emplace(key);
      continue;
    }
    Found& found = last[m->partition];
    rd_kafka_timestamp_type_t timestamp_type;
    found.timestamp = rd_kafka_message_timestamp(m.get(), &timestamp_type);
    if (!m->payload) {
      found.offset.reset();
      continue;
    }
    auto parsed = ParseSourceOffset(std::string_view(static_cast<const char*>(m->payload), m->len));
    if (!parsed.ok())
      return parsed.status().WithContext("offsets topic '" + topic_ + "' partition " +
                                         std::to_string(m->partition) + " offset " +
                                         std::to_string(m->offset));
    found.offset = std::move(parsed).value();
  }
  if (!foreign_keys.empty() && !warned_foreign_keys_.exchange(true)) {
    std::string keys;
    for (const auto& k : foreign_keys) keys += (keys.empty() ? "" : ", ") + k;
    spdlog::warn("offsets topic '{}' also holds positions of other connectors (keys {}); share "
                 "no offsets topic between connectors: a transaction another producer keeps open "
                 "on it delays this relay's start",
                 topic_, keys);
  }
  // One partition holds the key unless the partition count changed: then the newest record
  // wins, a tombstone included (the documented way to reset a connector's position), and of
  // two written in the same millisecond the further position.
  const Found* newest = nullptr;
  for (const auto& [partition, found] : last) {
    if (!newest || found.timestamp > newest->timestamp ||
        (found.timestamp == newest->timestamp && found.offset &&
         (!newest->offset || found.offset->lsn_commit > newest->offset->lsn_commit)))
      newest = &found;
  }
  if (!newest) return std::optional<SourceOffset>();
  return newest->offset;
}

Result<std::optional<SourceOffset>> OffsetStore::ReadLastFrom(
    const std::string& system_identifier, const std::string& slot,
    std::chrono::milliseconds timeout) const {
  auto last = ReadLast(timeout);
  if (!last.ok() || !*last) return last;
  if (Status foreign = CheckOffsetOrigin(**last, system_identifier, slot); !foreign.ok())
    return foreign.WithContext("offsets topic '" + topic_ + "', key " + key_);
  return last;
}

Record OffsetStore::MakeRecord(const SourceOffset& offset, int32_t partition_count) const {
  Record record;
  record.topic = topic_;
  record.key = key_;
  record.value = SerializeSourceOffset(offset);
  // Java's default partitioner, which Connect's offsets producer uses: murmur2 of the key.
  record.partition = partition_count > 0
                         ? rd_kafka_msg_partitioner_murmur2(nullptr, key_.data(), key_.size(),
                                                            partition_count, nullptr, nullptr)
                         : kAnyPartition;
  return record;
}

}  // namespace walrelay
