// AtLeastOnce: the default delivery guarantee (delivery/delivery_guarantee.h). A record Kafka
// acknowledged is delivered; the ledger's confirmable position is confirmed as it is, and a
// stream starts at the slot's position, so a crash may repeat records but never lose one.
//
// The position confirmed to the slot is also written to offsets.storage.topic
// (delivery/offset_writer.h), so a later process knows this connector streamed from the slot.
// StoredPosition reads it back only when the answer changes something: the slot is missing
// (created only when nothing is stored for this server and slot), or the server's timeline
// is past the first and differs from the last one streamed (to report positions streamed from
// an abandoned timeline). Then a Kafka that cannot be read fails the attempt (kConnection,
// retried): a slot is never created on hope. Otherwise an unreachable offsets topic delays the
// stream by at most kQuickTimeout, with a warning, and positions are not written until a later
// connect reaches it. What it reads is returned whatever server and slot it names: a position
// of another server means this connector streamed before, elsewhere (relay/start_decision.h),
// and with the slot present it is overwritten by this slot's.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>

#include "delivery/delivery_guarantee.h"
#include "delivery/offset_store.h"
#include "delivery/offset_writer.h"

namespace walrelay {

class AtLeastOnce final : public DeliveryGuarantee {
 public:
  // Bounds for reading or creating the offsets topic when the answer decides (a missing slot)
  // and when it only informs.
  static constexpr std::chrono::milliseconds kDecidingTimeout{30000};
  static constexpr std::chrono::milliseconds kQuickTimeout{5000};

  static Result<std::unique_ptr<AtLeastOnce>> Create(const RelaySettings& settings,
                                                     RelayCounters& counters);

  Result<std::optional<SourceOffset>> StoredPosition(const SourceIdentity& server,
                                                     bool slot_missing) override;
  Result<StoredReread> SlotTaken(const SourceIdentity&) override { return StoredReread{}; }
  Status StreamStarts(const SourceIdentity&, Lsn, bool) override { return Status::Ok(); }
  Status BeforeRecord(size_t) override { return Status::Ok(); }
  void SourceBegan() override {}
  Status SourceCommitted(const TxnCommit&, bool) override { return Status::Ok(); }
  Status Tick(bool) override;
  std::optional<Clock::time_point> TickDeadline() const override;
  Status EndStream(bool) override { return Status::Ok(); }
  Lsn Confirmable(Lsn acknowledged) const override { return acknowledged; }
  void ServerPosition(Lsn) override {}
  void Confirmed(Lsn position) override;
  void ForgetPosition() override;
  // A refused record's fate is its own: errors.tolerance decides it.
  Status RecordRefused(const std::string&) override { return Status::Ok(); }

 private:
  AtLeastOnce(const RelaySettings& settings, RelayCounters& counters);
  // The writer's next stream, as the connector's worker found it; applied on the loop thread.
  struct WriterStart {
    SourceIdentity server;
    int32_t partitions = 0;
  };
  void ApplyWriterStart();
  void CountWrites();

  RelayCounters& counters_;
  const std::string slot_;
  const OffsetStorageSettings options_;
  OffsetStore store_;
  std::unique_ptr<OffsetWriter> writer_;
  std::mutex mutex_;  // guards the two below, shared with the connector's worker
  std::optional<WriterStart> next_start_;
  std::optional<SourceIdentity> last_read_server_;
  bool warned_unreachable_ = false;  // worker thread only
  // Whether EnsureTopic succeeded (or cannot work on this cluster): once per process. Worker
  // thread only.
  bool topic_checked_ = false;
  int32_t partitions_ = 0;  // guarded by mutex_
};

}  // namespace walrelay
