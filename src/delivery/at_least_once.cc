#include "delivery/at_least_once.h"

#include <spdlog/spdlog.h>

namespace walrelay {

Result<std::unique_ptr<AtLeastOnce>> AtLeastOnce::Create(const RelaySettings& settings,
                                                         RelayCounters& counters) {
  std::unique_ptr<AtLeastOnce> guarantee(new AtLeastOnce(settings, counters));
  auto writer = OffsetWriter::Create(settings.kafka, guarantee->store_,
                                     settings.offsets.flush_interval, settings.ProvidedKafkaKeys());
  if (!writer.ok()) return writer.status();
  guarantee->writer_ = std::move(writer).value();
  return guarantee;
}

AtLeastOnce::AtLeastOnce(const RelaySettings& settings, RelayCounters& counters)
    : counters_(counters),
      slot_(settings.slot_name),
      options_(settings.offsets),
      store_(settings.kafka, settings.offsets.topic,
             SourceOffsetKey(settings.name, settings.topic_prefix)) {}

Result<std::optional<SourceOffset>> AtLeastOnce::StoredPosition(const SourceIdentity& server,
                                                                bool slot_missing) {
  bool timeline_changed = false;
  {
    std::lock_guard lock(mutex_);
    timeline_changed = server.timeline > 1 && !(last_read_server_ == server);
  }
  const bool deciding = slot_missing;
  const auto timeout = deciding ? kDecidingTimeout : kQuickTimeout;
  auto unreachable = [&](const Status& why) -> Result<std::optional<SourceOffset>> {
    if (deciding)
      return Status::Connection("replication slot '" + slot_ +
                                "' is missing, and whether this connector streamed "
                                "from it before cannot be read from offsets topic '" +
                                store_.topic() + "' (" + why.message() +
                                "); the slot is created only once that is known");
    if (!why.ok() && why.code() != ErrorCode::kKafka) return why;
    if (!warned_unreachable_) {
      spdlog::warn("offsets topic '{}' cannot be reached ({}); streaming goes on, and this "
                   "connector's position is recorded from the next connect that reaches it",
                   store_.topic(), why.message());
      warned_unreachable_ = true;
    }
    return std::optional<SourceOffset>();
  };
  int32_t partition_count = 0;  // 0: left to the producer's partitioner
  if (!topic_checked_) {
    auto partitions = store_.EnsureTopic(options_.partitions, options_.replication_factor, timeout);
    if (partitions.ok()) {
      topic_checked_ = true;
      partition_count = *partitions;
    } else if (partitions.status().code() == ErrorCode::kPrecondition) {
      // Nothing to wait for: such a cluster creates the topic on the first write.
      topic_checked_ = true;
      spdlog::warn("{}; the first position written creates it with the broker's defaults",
                   partitions.status().message());
    } else {
      return unreachable(partitions.status());
    }
  } else {
    partition_count = -1;  // as found at the last check
  }
  warned_unreachable_ = false;
  {
    std::lock_guard lock(mutex_);
    if (partition_count >= 0) partitions_ = partition_count;
    next_start_ = WriterStart{server, partitions_};
  }
  if (!deciding && !timeline_changed) return std::optional<SourceOffset>();
  auto stored = store_.ReadLast(timeout);
  if (!stored.ok()) return unreachable(stored.status());
  {
    std::lock_guard lock(mutex_);
    last_read_server_ = server;
  }
  // Whatever server and slot it names: the start decision (relay/start_decision.h) tells.
  return stored;
}

void AtLeastOnce::ApplyWriterStart() {
  std::optional<WriterStart> start;
  {
    std::lock_guard lock(mutex_);
    start = std::exchange(next_start_, std::nullopt);
  }
  if (start)
    writer_->Start(start->server.system_id, static_cast<uint32_t>(start->server.timeline), slot_,
                   start->partitions);
}

void AtLeastOnce::CountWrites() {
  counters_.offset_writes["written"] = writer_->written();
  counters_.offset_writes["failed"] = writer_->failed();
}

void AtLeastOnce::Confirmed(Lsn position) {
  ApplyWriterStart();
  writer_->Confirmed(position);
  CountWrites();
}

Status AtLeastOnce::Tick(bool) {
  ApplyWriterStart();
  writer_->Poll();
  CountWrites();
  return Status::Ok();
}

std::optional<DeliveryGuarantee::Clock::time_point> AtLeastOnce::TickDeadline() const {
  return writer_->Due();
}

void AtLeastOnce::ForgetPosition() {
  ApplyWriterStart();
  writer_->Forget();
}

}  // namespace walrelay
