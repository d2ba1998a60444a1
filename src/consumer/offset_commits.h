// OffsetCommits: when a finished record's offset reaches Kafka, and what a rebalance commits.
//
// A record is "finished" once the store recorded its outcome; only then is its offset (+1)
// stored. Stored offsets are committed asynchronously once `interval` has passed since the
// last commit, and synchronously whenever partitions are about to be given up (a revocation
// in a rebalance, the consumer closing), so a rebalance never hands finished work to another
// member. A crash loses at most `interval` of commits: those records come back and the store
// recognises them. `interval` 0 commits every record synchronously before the next poll.
//
// Rebalance() is the group's rebalance callback: with the cooperative protocol (walrelay's
// default, cooperative-sticky) partitions are added and removed incrementally and the others
// keep being consumed; with an eager assignor every rebalance revokes all of them. Partitions
// *lost* (the member was thrown out of the group) are not committed: their commit would fail.
//
// Records polled before their partition was revoked are stale: another member now owns them.
// Each polled record is stamped with epoch(); Stale() tells whether its partition was revoked
// (or lost) since, so the consumer drops it instead of handling it for a partition it gave up.
// While the consumer waits inside a record (a key held by another member, a retry backoff) it
// keeps polling with every partition paused (Pause/Resume), so the group never evicts it for
// exceeding max.poll.interval.ms; partitions assigned meanwhile are paused as they come.
//
// All calls happen on the thread that polls the consumer (librdkafka serves the rebalance
// callback from rd_kafka_consumer_poll).
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "walrelay/consumer/consumer.h"

namespace walrelay::consumer {

class OffsetCommits {
 public:
  OffsetCommits(std::chrono::milliseconds interval, LogFunction log);

  // The consumer handle, once it exists (the rebalance callback is configured before it).
  void Attach(rd_kafka_t* consumer) { consumer_ = consumer; }

  // The store recorded `message`'s outcome. Its offset is stored with the next commit (or
  // before any poll that may rebalance: Pause, CommitNow), once per partition.
  void Finished(const rd_kafka_message_t* message);
  // Commits the stored offsets if `interval` has passed since the last commit.
  void CommitIfDue();
  // Every outcome of a poll batch is recorded: with `interval` 0, commit them now.
  void BatchDone();

  // The current revocation epoch, to stamp polled records with.
  uint64_t epoch() const { return epoch_; }
  // Whether the record's partition was revoked or lost after it was stamped with `epoch`.
  bool Stale(const std::string& topic, int32_t partition, uint64_t epoch) const;
  // Pauses every assigned partition (and those assigned until Resume), or resumes them.
  void Pause();
  void Resume();
  // Commits the stored offsets now and waits for Kafka's answer; `why` is for the log.
  void CommitNow(const char* why);

  void Rebalance(rd_kafka_resp_err_t event, rd_kafka_topic_partition_list_t* partitions);
  // The answer to a commit. A failed one (coordinator away, e.g. a broker restarting) is
  // tried again at the next chance: the stored offsets are still the latest.
  void Committed(rd_kafka_resp_err_t error, const rd_kafka_topic_partition_list_t* offsets);

  // Partitions assigned and revoked so far, for tests and logs.
  int64_t rebalances() const { return rebalances_; }

 private:
  void Log(LogLevel level, const std::string& line) const;
  // Hands the finished offsets to librdkafka (rd_kafka_offsets_store).
  void StoreFinished();

  const std::chrono::milliseconds interval_;
  const LogFunction log_;
  rd_kafka_t* consumer_ = nullptr;
  bool uncommitted_ = false;  // offsets stored since the last commit
  std::chrono::steady_clock::time_point last_commit_ = std::chrono::steady_clock::now();
  int64_t rebalances_ = 0;
  bool failing_ = false;  // the last commit failed (logged once per run of failures)
  uint64_t epoch_ = 0;    // revocations so far
  std::map<std::pair<std::string, int32_t>, uint64_t> revoked_at_;  // partition -> epoch
  bool paused_ = false;
  std::map<std::pair<std::string, int32_t>, int64_t> finished_;  // next offset per partition
};

}  // namespace walrelay::consumer
