// AtLeastOnce: the default delivery guarantee (relay/delivery_guarantee.h). A record Kafka
// acknowledged is delivered; the ledger's confirmable position is confirmed as it is, and a
// stream starts at the slot's position, so a crash may repeat records but never lose one.
#pragma once

#include "relay/delivery_guarantee.h"

namespace walrelay {

class AtLeastOnce final : public DeliveryGuarantee {
 public:
  Result<Lsn> StartPosition(const SourceIdentity&, Lsn) override { return Lsn(); }
  Status BeforeRecord(size_t) override { return Status::Ok(); }
  void SourceBegan() override {}
  Status SourceCommitted(const TxnCommit&, bool) override { return Status::Ok(); }
  Status Tick(bool) override { return Status::Ok(); }
  std::optional<Clock::time_point> TickDeadline() const override { return std::nullopt; }
  Status EndStream(bool) override { return Status::Ok(); }
  Lsn Confirmable(Lsn acknowledged) const override { return acknowledged; }
  void ServerPosition(Lsn) override {}
  bool RefusalsFollowErrorPolicy() const override { return true; }
  bool Discarding() const override { return false; }
  bool TakeDropped() override { return false; }
};

}  // namespace walrelay
