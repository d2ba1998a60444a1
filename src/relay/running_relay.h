// RunningRelay: a relay as the command line runs it, whichever source feeds it: a replication
// slot (relay/relay.h) or the polled outbox table (polling/polling_relay.h). Both produce
// through a KafkaOutput and a RecordPipeline, from which the observers of RelayView
// (status/relay_view.h) that the two share are answered here, once.
//
// Run() runs the loop until a graceful stop or the first fatal error; RequestStop() and
// StaysConfirmed() may be called from any thread.
#pragma once

#include <string>

#include "common/status.h"
#include "delivery/kafka_output.h"
#include "delivery/record_pipeline.h"
#include "status/relay_view.h"

namespace walrelay {

class RunningRelay : public RelayView {
 public:
  virtual Status Run() = 0;
  virtual void RequestStop() = 0;
  // For a stop that ends without the relay's own: what stays confirmed at the source, e.g.
  // "slot 'x' stays confirmed at LSN 0/16B3748".
  virtual std::string StaysConfirmed() const = 0;

  virtual const RecordPipeline& pipeline() const = 0;
  virtual const KafkaOutput& output() const = 0;

  size_t inflight_records() const final { return pipeline().inflight_records(); }
  size_t inflight_bytes() const final { return pipeline().inflight_bytes(); }
  size_t ack_ledger_entries() const final { return pipeline().ledger_entries(); }
  size_t ack_ledger_bytes() const final { return pipeline().ledger_bytes(); }
  size_t held_records() const final { return pipeline().held_records(); }
  int kafka_queue_length() const final { return output().OutstandingMessages(); }
  double ReplicationLagSeconds() const final;
};

}  // namespace walrelay
