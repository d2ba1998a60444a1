// OffsetStore: reads walrelay's source position back from `offsets.storage.topic` and creates
// that topic the way Kafka Connect does. The format of the records is source_offsets.h's.
//
// Contract:
// - EnsureTopic() creates the topic when missing: compacted (cleanup.policy=compact), with
//   `offsets.storage.partitions` partitions and `offsets.storage.replication.factor` replicas
//   (-1: the broker's default). It returns the topic's partition count, existing or new. An
//   existing topic whose cleanup.policy is not `compact` is a kConfig error, as in Connect.
//   It never makes the broker auto-create the topic with the broker's defaults.
// - ReadLast() reads with a read_committed consumer that joins no group and commits nothing:
//   every partition from the beginning up to its end (the last stable offset: records of open
//   transactions are not read), bounded by `timeout`. It returns the last offset stored under
//   the key, or nullopt when there is none (no topic, no record, or a tombstone last). If the
//   key appears in several partitions (the partition count changed), the highest `lsn_commit`
//   wins. A record under the key that does not parse is an error naming topic, partition and
//   offset; records of other keys are not parsed.
// - ReadLastFrom() adds CheckOffsetOrigin(): an offset of another server or slot is an error.
// - Call ReadLast() after the relay's TransactionalProducer::InitTransactions(): that completes
//   a transaction a previous incarnation left committing, whose markers would otherwise hold
//   the last stable offset before its offset record.
// - MakeRecord() places the record in the partition Kafka Connect's producer would choose
//   (murmur2 of the key), so Connect's tooling finds it.
// Not thread-safe; each call makes and closes its own librdkafka handle.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"
#include "delivery/source_offsets.h"
#include "transform/record.h"

namespace walrelay {

class OffsetStore {
 public:
  // `kafka_properties` are librdkafka client properties (bootstrap.servers, security); `key`
  // is SourceOffsetKey() of the connector.
  OffsetStore(std::map<std::string, std::string> kafka_properties, std::string topic, std::string key);

  Result<int32_t> EnsureTopic(int32_t partitions, int16_t replication_factor,
                              std::chrono::milliseconds timeout) const;
  Result<std::optional<SourceOffset>> ReadLast(std::chrono::milliseconds timeout) const;
  Result<std::optional<SourceOffset>> ReadLastFrom(const std::string& system_identifier,
                                                   const std::string& slot,
                                                   std::chrono::milliseconds timeout) const;
  Record MakeRecord(const SourceOffset& offset, int32_t partition_count) const;

  const std::string& topic() const { return topic_; }
  const std::string& key() const { return key_; }

 private:
  std::map<std::string, std::string> kafka_properties_;
  std::string topic_;
  std::string key_;
};

}  // namespace walrelay
