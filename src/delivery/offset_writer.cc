#include "delivery/offset_writer.h"

#include <librdkafka/rdkafka.h>
#include <spdlog/spdlog.h>

namespace walrelay {

Result<std::unique_ptr<OffsetWriter>> OffsetWriter::Create(
    const std::map<std::string, std::string>& kafka_properties, const OffsetStore& store,
    std::chrono::milliseconds interval, const std::set<std::string>& hidden_value_keys) {
  std::map<std::string, std::string> properties = kafka_properties;
  // Its own plain producer: the relay's may be transactional, and a position record must not
  // wait for the data records' delivery reports or share their queue.
  properties.erase("transactional.id");
  properties["enable.idempotence"] = "true";
  properties["acks"] = "all";
  // Where the partition count is not known (OffsetStore::MakeRecord leaves the partition to
  // the producer), Java's partitioner, as Connect's offsets producer uses.
  properties["partitioner"] = "murmur2_random";
  properties.erase("linger.ms");
  properties.erase("batch.size");
  std::unique_ptr<OffsetWriter> writer(new OffsetWriter(store, interval));
  auto producer = KafkaProducer::Create(
      properties, [w = writer.get()](const DeliveryReport& report) { w->OnReport(report); }, {},
      hidden_value_keys);
  if (!producer.ok()) return producer.status().WithContext("the offsets topic's producer");
  writer->producer_ = std::move(producer).value();
  return writer;
}

OffsetWriter::~OffsetWriter() {
  if (!producer_) return;
  if (pending_ && *pending_ != written_position_) Write(*pending_);
  const rd_kafka_resp_err_t err =
      rd_kafka_flush(producer_->native_handle(), static_cast<int>(kFlushOnClose.count()));
  producer_->Poll();
  if (err)
    spdlog::warn("offsets topic '{}': the last position (LSN {}) was not acknowledged within {} "
                 "ms of stopping",
                 store_.topic(), written_position_.ToString(), kFlushOnClose.count());
}

void OffsetWriter::Start(const std::string& system_identifier, uint32_t timeline,
                         const std::string& slot, int32_t partitions) {
  const bool same = started_ && template_.system_identifier == system_identifier &&
                    template_.timeline == timeline && template_.slot == slot;
  if (!same && pending_) {
    // A position the previous stream confirmed and that is not written yet goes out under that
    // stream's server, timeline and slot, which it belongs to: under the new ones it would
    // claim a position on a timeline (or server) that never confirmed it. If the producer
    // refuses it now it is dropped; the new stream's first position is written at once anyway.
    if (started_) Write(*pending_);
    pending_.reset();
  }
  template_.system_identifier = system_identifier;
  template_.timeline = timeline;
  template_.slot = slot;
  partitions_ = partitions;
  started_ = true;
  if (!same) {
    written_position_ = Lsn();
    next_due_ = Clock::now();
  }
}

void OffsetWriter::Confirmed(Lsn position) {
  if (!started_ || position.value() == 0 || position <= written_position_) return;
  pending_ = position;
  Poll();
}

std::optional<OffsetWriter::Clock::time_point> OffsetWriter::Due() const {
  if (!pending_) return std::nullopt;
  return next_due_;
}

void OffsetWriter::Poll() {
  producer_->Poll();
  if (!pending_ || Clock::now() < next_due_) return;
  Write(*pending_);
}

void OffsetWriter::Write(Lsn position) {
  SourceOffset offset = template_;
  offset.lsn = position;
  offset.lsn_commit = position;
  offset.ts_usec = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  Status sent = producer_->Produce(store_.MakeRecord(offset, partitions_), position.value());
  if (!sent.ok()) {
    ++failed_;
    next_due_ = Clock::now() + kRetryAfter;
    if (sent.message() != last_failure_) {
      last_failure_ = sent.message();
      spdlog::warn("offsets topic '{}': cannot write position LSN {}: {}; written again with the "
                   "next position",
                   store_.topic(), position.ToString(), sent.message());
    }
    return;
  }
  next_due_ = Clock::now() + interval_;
  written_position_ = position;
  pending_.reset();
}

void OffsetWriter::Forget() {
  Record tombstone = store_.MakeRecord(template_, partitions_);
  tombstone.value.reset();
  pending_.reset();
  written_position_ = Lsn(UINT64_MAX);  // nothing more is written by this process
  if (Status sent = producer_->Produce(tombstone, kTombstoneTicket); !sent.ok())
    spdlog::warn("offsets topic '{}': cannot remove this connector's position: {}", store_.topic(),
                 sent.message());
}

void OffsetWriter::OnReport(const DeliveryReport& report) {
  if (report.error == RD_KAFKA_RESP_ERR_NO_ERROR) {
    ++written_;
    last_failure_.clear();
    return;
  }
  ++failed_;
  if (report.ticket == kTombstoneTicket) {
    spdlog::warn("offsets topic '{}': the broker refused to remove this connector's position: "
                 "{}",
                 store_.topic(), rd_kafka_err2str(report.error));
    return;
  }
  const std::string why = rd_kafka_err2str(report.error);
  if (why != last_failure_) {
    last_failure_ = why;
    spdlog::warn("offsets topic '{}': the broker refused position LSN {}: {}; written again with "
                 "the next position",
                 store_.topic(), Lsn(report.ticket).ToString(), why);
  }
  // Only the newest position handed to the producer since Start() is written again, soon (the
  // newest position by then). An older one is superseded by that newer write, and one written
  // before Start() changed server, timeline or slot (written_position_ was reset then) would be
  // written again under the new ones, which never confirmed it.
  if (written_position_ != Lsn(report.ticket)) return;
  written_position_ = Lsn();
  if (!pending_) pending_ = Lsn(report.ticket);
  next_due_ = Clock::now() + kRetryAfter;
}

}  // namespace walrelay
