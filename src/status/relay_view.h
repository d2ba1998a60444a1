// RelayView: what the REST API and /metrics see of a running relay, and the operations they
// offer (pause, resume, restart), whichever source feeds it. relay/running_relay.h adds what
// the command line needs to run and stop one.
//
// confirmed_lsn() and state() are safe from any thread; everything else belongs to the relay's
// loop thread, where the REST API's handlers run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/lsn.h"
#include "common/status.h"
#include "config/relay_settings.h"
#include "pg/slot_health.h"
#include "status/metrics.h"

namespace walrelay {

// kStandby: another process holds the slot (or the polling lease); this one waits for it.
enum class RelayState { kConnecting, kStandby, kStreaming, kStopping, kStopped };

inline const char* RelayStateName(RelayState state) {
  switch (state) {
    case RelayState::kConnecting: return "CONNECTING";
    case RelayState::kStandby: return "STANDBY";
    case RelayState::kStreaming: return "STREAMING";
    case RelayState::kStopping: return "STOPPING";
    case RelayState::kStopped: return "STOPPED";
  }
  return "?";
}

class RelayView {
 public:
  virtual ~RelayView() = default;

  // The slot's confirmed position (polling: the position of the last rows marked published, a
  // counter of the relay process).
  virtual Lsn confirmed_lsn() const = 0;
  virtual RelayState state() const = 0;

  virtual void Pause() = 0;
  virtual void Resume() = 0;
  // False (and nothing happens) once the relay is stopping.
  virtual bool Restart() = 0;
  virtual bool paused() const = 0;
  // True while the source's connection is open.
  virtual bool connected() const = 0;
  virtual bool producer_ready() const = 0;
  // The error that stopped the relay; OK while it runs or after a graceful stop.
  virtual const Status& failure() const = 0;
  // Why the last connection attempt failed or the connection was lost; "" once streaming.
  virtual const std::string& connection_error() const = 0;
  virtual const RelaySettings& settings() const = 0;
  virtual const RelayCounters& counters() const = 0;
  virtual Lsn received_lsn() const = 0;
  virtual size_t inflight_records() const = 0;
  virtual size_t inflight_bytes() const = 0;
  // Entries of the ack ledger and their memory.
  virtual size_t ack_ledger_entries() const = 0;
  virtual size_t ack_ledger_bytes() const = 0;
  // Records waiting for room in librdkafka's queue.
  virtual size_t held_records() const = 0;
  // Messages librdkafka holds (queued, in flight, or reports not yet served).
  virtual int kafka_queue_length() const = 0;
  // Now minus the commit time of the newest acknowledged record; 0 when idle and caught up.
  virtual double ReplicationLagSeconds() const = 0;
  // The slot as pg_replication_slots last showed it (read_ok false: not read, or no slot).
  virtual SlotHealthSample slot_health() const = 0;
  virtual uint64_t slot_stalls() const = 0;
};

}  // namespace walrelay
