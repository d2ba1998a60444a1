#include "consumer/offset_commits.h"

#include <cstring>
#include <utility>

#include "consumer/kafka_handles.h"

namespace walrelay::consumer {
namespace {

// "outbox.event.order[0,3,5]" per topic, for the log.
std::string Describe(const rd_kafka_topic_partition_list_t* partitions) {
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
  if (interval_.count() == 0) {
    // A failed commit (e.g. the partition moved to another member) only means a redelivery
    // that the store recognises.
    if (rd_kafka_resp_err_t err = rd_kafka_commit_message(consumer_, message, 0); err != 0)
      Log(LogLevel::kWarn, std::string("offset commit failed: ") + rd_kafka_err2str(err));
    return;
  }
  PartitionListPtr list(rd_kafka_topic_partition_list_new(1));
  rd_kafka_topic_partition_list_add(list.get(), rd_kafka_topic_name(message->rkt),
                                    message->partition)
      ->offset = message->offset + 1;
  // Refused only for a partition no longer assigned: its new owner gets the record again.
  if (rd_kafka_offsets_store(consumer_, list.get()) == RD_KAFKA_RESP_ERR_NO_ERROR)
    uncommitted_ = true;
  // While commits fail (a coordinator moving or restarting) every record waits for its
  // commit, as with interval 0: work done meanwhile would all be redelivered if the
  // partitions are lost before a commit gets through.
  if (failing_) CommitNow("after a failed commit");
}

void OffsetCommits::CommitIfDue() {
  if (!uncommitted_ || std::chrono::steady_clock::now() - last_commit_ < interval_) return;
  // Asynchronous: Committed() gets the answer and asks for another try if it failed.
  uncommitted_ = false;
  if (rd_kafka_commit(consumer_, nullptr, 1) != RD_KAFKA_RESP_ERR_NO_ERROR) uncommitted_ = true;
  last_commit_ = std::chrono::steady_clock::now();
}

void OffsetCommits::CommitNow(const char* why) {
  if (!uncommitted_) return;
  uncommitted_ = false;
  last_commit_ = std::chrono::steady_clock::now();
  const rd_kafka_resp_err_t err = rd_kafka_commit(consumer_, nullptr, 0);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
    Log(LogLevel::kWarn, std::string("offset commit (") + why + ") failed: " +
                             rd_kafka_err2str(err) + "; records finished since the last commit "
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
    Log(LogLevel::kWarn, std::string("offset commit of ") + Describe(offsets) + " failed: " +
                             rd_kafka_err2str(error) + "; trying again");
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
      Log(LogLevel::kError, std::string("incremental assign failed: ") + rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    }
    return;
  }
  if (event == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS) {
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
  rd_kafka_assign(consumer_, nullptr);
}

}  // namespace walrelay::consumer
