// AcknowledgedOnly: the delivery guarantee (delivery/delivery_guarantee.h) of a source that keeps
// its own position: a record Kafka acknowledged is delivered, and nothing is stored outside
// the process. The polling outbox (polling/polling_relay.h) uses it: its position is the table
// itself, whose rows are marked once the ledger says their records are acknowledged.
#pragma once

#include <optional>

#include "delivery/delivery_guarantee.h"

namespace walrelay {

class AcknowledgedOnly final : public DeliveryGuarantee {
 public:
  Result<std::optional<SourceOffset>> StoredPosition(const SourceIdentity&, bool) override {
    return std::optional<SourceOffset>();
  }
  Result<StoredReread> SlotTaken(const SourceIdentity&) override { return StoredReread{}; }
  Status StreamStarts(const SourceIdentity&, Lsn, bool) override { return Status::Ok(); }
  Status BeforeRecord(size_t) override { return Status::Ok(); }
  void SourceBegan() override {}
  Status SourceCommitted(const TxnCommit&, bool) override { return Status::Ok(); }
  Status Tick(bool) override { return Status::Ok(); }
  std::optional<Clock::time_point> TickDeadline() const override { return std::nullopt; }
  Status EndStream(bool) override { return Status::Ok(); }
  Lsn Confirmable(Lsn acknowledged) const override { return acknowledged; }
  void ServerPosition(Lsn) override {}
  void Confirmed(Lsn) override {}
  void ForgetPosition() override {}
  // A refused record's fate is its own: errors.tolerance decides it.
  Status RecordRefused(const std::string&) override { return Status::Ok(); }
};

}  // namespace walrelay
