// RunningRelay: what the command line and the REST API see of a relay, whichever source feeds
// it: a replication slot (relay/relay.h) or the polled outbox table (polling/polling_relay.h).
//
// Run() runs the loop until a graceful stop or the first fatal error; RequestStop() may be
// called from any thread; confirmed_lsn(), streaming() and state() are safe from any thread;
// everything else belongs to the loop thread (the REST API's handlers run there).
#pragma once

#include <cstddef>
#include <string>

#include "common/lsn.h"
#include "common/status.h"
#include "config/relay_settings.h"
#include "delivery/producer.h"
#include "delivery/record_pipeline.h"
#include "pg/slot_health.h"
#include "status/metrics.h"

namespace walrelay {

// kStandby: another process holds the slot (or the polling lease); this one waits for it.
enum class RelayState { kConnecting, kStandby, kStreaming, kStopping, kStopped };
const char* RelayStateName(RelayState state);

class RunningRelay {
 public:
  virtual ~RunningRelay() = default;

  virtual Status Run() = 0;
  virtual void RequestStop() = 0;

  // Safe from any thread. confirmed_lsn: the slot's confirmed position (polling: the position
  // of the last rows marked published, a counter of this process).
  virtual Lsn confirmed_lsn() const = 0;
  virtual RelayState state() const = 0;
  // For a stop that ends without the relay's own: what stays confirmed at the source, e.g.
  // "slot 'x' stays confirmed at LSN 0/16B3748".
  virtual std::string StaysConfirmed() const = 0;

  virtual void Pause() = 0;
  virtual void Resume() = 0;
  // False (and nothing happens) once the relay is stopping.
  virtual bool Restart() = 0;
  virtual bool paused() const = 0;
  virtual bool connected() const = 0;
  virtual bool producer_ready() const = 0;
  virtual const Status& failure() const = 0;
  virtual const std::string& connection_error() const = 0;
  virtual const RelaySettings& settings() const = 0;
  virtual const RelayCounters& counters() const = 0;
  virtual Lsn received_lsn() const = 0;
  virtual const RecordPipeline& pipeline() const = 0;
  virtual const KafkaProducer& producer() const = 0;

  // What both kinds read from their pipeline and producer.
  size_t inflight_records() const { return pipeline().inflight_records(); }
  size_t inflight_bytes() const { return pipeline().inflight_bytes(); }
  // Entries of the ack ledger and their memory, for /metrics.
  size_t ack_ledger_entries() const { return pipeline().ledger_entries(); }
  size_t ack_ledger_bytes() const { return pipeline().ledger_bytes(); }
  // Records waiting for room in librdkafka's queue.
  size_t held_records() const { return pipeline().held_records(); }
  // Messages librdkafka holds (queued, in flight, or reports not yet served).
  int kafka_queue_length() const { return producer().OutstandingMessages(); }
  // Now minus the commit time of the newest acknowledged record; 0 when idle and caught up.
  double ReplicationLagSeconds() const;
  // The slot as pg_replication_slots last showed it (read_ok false: not read, or no slot).
  virtual SlotHealthSample slot_health() const = 0;
  virtual uint64_t slot_stalls() const = 0;
};

}  // namespace walrelay
