#include "consumer/offset_commits.h"

#include <cstring>
#include <utility>

#include "consumer/kafka_handles.h"

namespace walrelay::consumer {
namespace {

// "outbox.event.order[0,3,5]" per topic, for the log.
std::string Describe(const rd_kafka_topic_partition_list_t* partitions) {
  // librdkafka reports some failed commits (the member left the group) without a list.
  if (partitions == nullptr) return "the stored offsets";
  std::string out;
  std::string topic;
  for (int i = 0; i < partitions->cnt; ++i) {
    const rd_kafka_topic_partition_t& p = partitions->elems[i];
    if (topic != p.topic) {
      if (!topic.empty()) out += "] ";
      topic = p.topic;
      out += topic + "[";
    } else {
      out += ",";
    }
    out += std::to_string(p.partition);
  }
  return out.empty() ? "none" : out + "]";
}

}  // namespace

OffsetCommits::OffsetCommits(std::chrono::milliseconds interval, LogFunction log)
    : interval_(interval), log_(std::move(log)) {}

void OffsetCommits::Log(LogLevel level, const std::string& line) const {
  if (log_) log_(level, line);
}

void OffsetCommits::Finished(const rd_kafka_message_t* message) {
  finished_[{rd_kafka_topic_name(message->rkt), message->partition}] = message->offset + 1;
  // While commits fail (a coordinator moving or restarting) every record waits for its
  // commit, as with interval 0: work done meanwhile would all be redelivered if the
  // partitions are lost before a commit gets through.
  if (failing_) CommitNow("after a failed commit");
}

void OffsetCommits::StoreFinished() {
  if (finished_.empty()) return;
  KafkaPartitionListPtr list(rd_kafka_topic_partition_list_new(static_cast<int>(finished_.size())));
  for (const auto& [tp, offset] : finished_)
    rd_kafka_topic_partition_list_add(list.get(), tp.first.c_str(), tp.second)->offset = offset;
  finished_.clear();
  // Refused only for a partition no longer assigned: its new owner gets the records again.
  rd_kafka_offsets_store(consumer_, list.get());
  for (int i = 0; i < list->cnt; ++i)
    if (list->elems[i].err == RD_KAFKA_RESP_ERR_NO_ERROR) uncommitted_ = true;
}

void OffsetCommits::BatchDone() {
  // Asynchronous, so the next batch's work overlaps the broker's round trip; Committed()
  // gets the answer, and while commits fail every record waits for its own (Finished). A
  // failed commit only means a redelivery that the store recognises.
  StoreFinished();
  if (interval_.count() != 0 || !uncommitted_) return;
  uncommitted_ = false;
  if (rd_kafka_commit(consumer_, nullptr, 1) != RD_KAFKA_RESP_ERR_NO_ERROR) uncommitted_ = true;
  last_commit_ = std::chrono::steady_clock::now();
}

bool OffsetCommits::Stale(const std::string& topic, int32_t partition, uint64_t epoch) const {
  auto it = revoked_at_.find({topic, partition});
  return it != revoked_at_.end() && it->second > epoch;
}

void OffsetCommits::Pause() {
  StoreFinished();  // a rebalance served by the polls that follow commits them
  paused_ = true;
  rd_kafka_topic_partition_list_t* raw = nullptr;
  if (rd_kafka_assignment(consumer_, &raw) != RD_KAFKA_RESP_ERR_NO_ERROR) return;
  KafkaPartitionListPtr assigned(raw);
  if (assigned->cnt > 0) rd_kafka_pause_partitions(consumer_, assigned.get());
}

void OffsetCommits::Resume() {
  paused_ = false;
  rd_kafka_topic_partition_list_t* raw = nullptr;
  if (rd_kafka_assignment(consumer_, &raw) != RD_KAFKA_RESP_ERR_NO_ERROR) return;
  KafkaPartitionListPtr assigned(raw);
  if (assigned->cnt > 0) rd_kafka_resume_partitions(consumer_, assigned.get());
}

void OffsetCommits::CommitIfDue() {
  StoreFinished();
  if (!uncommitted_ || std::chrono::steady_clock::now() - last_commit_ < interval_) return;
  // Asynchronous: Committed() gets the answer and asks for another try if it failed.
  uncommitted_ = false;
  if (rd_kafka_commit(consumer_, nullptr, 1) != RD_KAFKA_RESP_ERR_NO_ERROR) uncommitted_ = true;
  last_commit_ = std::chrono::steady_clock::now();
}

void OffsetCommits::CommitNow(const char* why) {
  StoreFinished();
  if (!uncommitted_) return;
  uncommitted_ = false;
  last_commit_ = std::chrono::steady_clock::now();
  const rd_kafka_resp_err_t err = rd_kafka_commit(consumer_, nullptr, 0);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
    Log(LogLevel::kWarn, std::string("offset commit (") + why +
                             ") failed: " + rd_kafka_err2str(err) +
                             "; records finished since the last commit "
                             "are delivered again, and skipped by the store");
  }
}

void OffsetCommits::Committed(rd_kafka_resp_err_t error,
                              const rd_kafka_topic_partition_list_t* offsets) {
  if (error == RD_KAFKA_RESP_ERR_NO_ERROR || error == RD_KAFKA_RESP_ERR__NO_OFFSET) {
    if (failing_) Log(LogLevel::kInfo, "offset commits succeed again");
    failing_ = false;
    return;
  }
  uncommitted_ = true;
  if (!failing_) {
    Log(LogLevel::kWarn, std::string("offset commit of ") + Describe(offsets) +
                             " failed: " + rd_kafka_err2str(error) + "; trying again");
  }
  failing_ = true;
}

void OffsetCommits::Rebalance(rd_kafka_resp_err_t event,
                              rd_kafka_topic_partition_list_t* partitions) {
  ++rebalances_;
  const bool cooperative = std::strcmp(rd_kafka_rebalance_protocol(consumer_), "COOPERATIVE") == 0;
  if (event == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    Log(LogLevel::kInfo, std::string("assigned ") + Describe(partitions));
    if (!cooperative) {
      rd_kafka_assign(consumer_, partitions);
    } else if (rd_kafka_error_t* error = rd_kafka_incremental_assign(consumer_, partitions)) {
      Log(LogLevel::kError,
          std::string("incremental assign failed: ") + rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    }
    // Assigned while the consumer waits inside a record: held back like the others. Otherwise
    // resumed explicitly: librdkafka keeps a partition's pause across its revocation, so one
    // revoked during a wait (and not resumed with the rest, being no longer assigned) would
    // come back paused and never be fetched again.
    if (paused_) rd_kafka_pause_partitions(consumer_, partitions);
    else rd_kafka_resume_partitions(consumer_, partitions);
    return;
  }
  if (event == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
    ++epoch_;
    for (int i = 0; i < partitions->cnt; ++i)
      revoked_at_[{partitions->elems[i].topic, partitions->elems[i].partition}] = epoch_;
    const bool lost = rd_kafka_assignment_lost(consumer_);
    // Finished work is committed before another member takes the partitions.
    if (!lost) CommitNow("partitions revoked");
    Log(LogLevel::kInfo, std::string(lost ? "lost " : "revoked ") + Describe(partitions));
    if (!cooperative) {
      rd_kafka_assign(consumer_, nullptr);
    } else if (rd_kafka_error_t* error = rd_kafka_incremental_unassign(consumer_, partitions)) {
      Log(LogLevel::kError,
          std::string("incremental unassign failed: ") + rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    }
    return;
  }
  Log(LogLevel::kWarn, std::string("rebalance error: ") + rd_kafka_err2str(event));
  ++epoch_;
  for (int i = 0; i < partitions->cnt; ++i)
    revoked_at_[{partitions->elems[i].topic, partitions->elems[i].partition}] = epoch_;
  rd_kafka_assign(consumer_, nullptr);
}

}  // namespace walrelay::consumer
