// OffsetWriter: keeps the at-least-once relay's confirmed source position in
// offsets.storage.topic (delivery/source_offsets.h's layout), so that every later process (a
// restart, a standby that never streamed) knows that this connector streamed from the slot
// and up to where.
//
// Contract:
// - Confirmed(position) is told every position the relay confirmed to the slot. The first
//   one after Start() and after any change of server is written at once (that the slot was
//   streamed from must be durable before much else happens); later ones at most every
//   `interval` (offset.flush.interval.ms), the newest one then.
// - A position is written only under the server, timeline and slot of the stream that
//   confirmed it: when Start() changes them, the position still pending is written first,
//   under the previous ones.
// - Writes go through a producer of their own (idempotent, acks=all), never waiting: Poll()
//   serves their acknowledgements, and a refused write is logged (once per kind of failure
//   until one succeeds again) and written again with the next position, unless a newer
//   position or a Start() that changed server, timeline or slot came after it. Counts per
//   outcome are in written()/failed().
// - Forget() writes Connect's tombstone: the next start is a first start (slot.drop.on.stop
//   dropped the slot on purpose).
// - Destruction waits up to `kFlushOnClose` for writes still in flight.
// Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/lsn.h"
#include "common/status.h"
#include "delivery/offset_store.h"
#include "delivery/producer.h"
#include "delivery/source_offsets.h"

namespace walrelay {

class OffsetWriter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFlushOnClose{5000};
  // How soon a refused write is tried again.
  static constexpr std::chrono::milliseconds kRetryAfter{1000};

  // `store` names the topic and key and places the record; `kafka_properties` are the relay's
  // librdkafka client properties.
  static Result<std::unique_ptr<OffsetWriter>> Create(
      const std::map<std::string, std::string>& kafka_properties, const OffsetStore& store,
      std::chrono::milliseconds interval, const std::set<std::string>& hidden_value_keys = {});
  ~OffsetWriter();
  OffsetWriter(const OffsetWriter&) = delete;
  OffsetWriter& operator=(const OffsetWriter&) = delete;

  // The server, timeline and slot the positions belong to, and the topic's partition count;
  // the next Confirmed() writes at once. A change of server, timeline or slot first writes the
  // position still pending under the previous ones.
  void Start(const std::string& system_identifier, uint32_t timeline, const std::string& slot,
             int32_t partitions);
  void Confirmed(Lsn position);
  // When the newest position not yet written is due; nullopt when there is none.
  std::optional<Clock::time_point> Due() const;
  // Writes the newest position if it is due; serves acknowledgements.
  void Poll();
  void Forget();

  uint64_t written() const { return written_; }
  uint64_t failed() const { return failed_; }

 private:
  OffsetWriter(const OffsetStore& store, std::chrono::milliseconds interval)
      : store_(store), interval_(interval) {}
  void Write(Lsn position);
  void OnReport(const DeliveryReport& report);
  static constexpr uint64_t kTombstoneTicket = 0;

  const OffsetStore& store_;
  const std::chrono::milliseconds interval_;
  std::unique_ptr<KafkaProducer> producer_;
  SourceOffset template_;  // server, timeline and slot of the positions
  int32_t partitions_ = 0;
  bool started_ = false;
  Lsn written_position_;  // the newest position handed to the producer
  std::optional<Lsn> pending_;
  Clock::time_point next_due_{};
  uint64_t written_ = 0;
  uint64_t failed_ = 0;
  std::string last_failure_;
};

}  // namespace walrelay
