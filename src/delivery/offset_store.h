// OffsetStore: reads walrelay's source position back from `offsets.storage.topic` and creates
// that topic the way Kafka Connect does. The format of the records is source_offsets.h's.
//
// Contract:
// - EnsureTopic() creates the topic when missing: compacted (cleanup.policy=compact), with
//   `offsets.storage.partitions` partitions and `offsets.storage.replication.factor` replicas
//   (-1: the broker's default). It returns the topic's partition count, existing or new. An
//   existing topic whose cleanup.policy is not `compact` is a kConfig error, as in Connect.
//   It never makes the broker auto-create the topic with the broker's defaults. A cluster
//   without a controller to send those requests to is kPrecondition at once.
// - ReadLast() reads with a read_committed consumer that joins no group and commits nothing:
//   every partition from the beginning up to the end (high watermark) it had when the read
//   began, bounded by `timeout`. A transaction open on the topic holds read_committed readers
//   at its first record; the read then waits for it to end and fails after `timeout` (kKafka,
//   naming the partitions and offsets) rather than returning an older position. It returns
//   the last offset stored under the key, or nullopt when there is none (no topic, no record,
//   or a tombstone last). If the key appears in several partitions (the partition count
//   changed), the newest record by its timestamp wins, a tombstone included. A record under
//   the key that does not parse is an error naming topic, partition and offset; records of
//   other keys are not parsed, and their keys are named in one warning per store (one offsets
//   topic per connector is the supported layout).
// - ReadLastFrom() adds CheckOffsetOrigin(): an offset of another server or slot is an error.
// - Call ReadLast() after the relay's TransactionalProducer::InitTransactions(): that completes
//   a transaction a previous incarnation left committing, whose markers would otherwise hold
//   the last stable offset before its offset record.
// - MakeRecord() places the record in the partition Kafka Connect's producer would choose
//   (murmur2 of the key), so Connect's tooling finds it.
// Not thread-safe; each call makes and closes its own librdkafka handle.
#pragma once

#include <atomic>
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
  OffsetStore(std::map<std::string, std::string> kafka_properties, std::string topic,
              std::string key);

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
  mutable std::atomic<bool> warned_foreign_keys_{false};
};

}  // namespace walrelay
