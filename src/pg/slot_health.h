// SlotHealthWatch: the relay's replication slot as operators watch it, read from
// pg_replication_slots on a connection of its own every slot.health.interval.ms.
//
// Contract: Start() runs one thread that, each round, reads the slot's wal_status,
// safe_wal_size, restart_lsn and retained WAL (the server's current position, on a standby its
// last replayed one, minus restart_lsn), invalidation_reason on 17+ (`conflicting` on 16), and
// the wait event of the walsender that holds the slot. Latest() returns the last sample.
//
//  - An invalidated slot (wal_status `lost`) calls `fatal` once, from the watch thread, and the
//    watch stops: a relay must not wait on, or reconnect to, a slot that can no longer give it
//    what was committed. Removed WAL (max_slot_wal_keep_size; `wal_removed` on 17+, every `lost`
//    before 16) is kSlotWalRemoved, naming the setting; any other cause is kSlotInvalidated.
//  - A walsender waiting for synchronized_standby_slots (17+: a failover slot held back until
//    the listed physical standbys confirm) for longer than slot.stall.warn.ms is a stall: one
//    warning naming the setting and its value when the stall starts, Latest().stalled while it
//    lasts, stalls counted. Such a wait never ends by itself when the setting names a slot the
//    server does not have (e.g. a promoted standby that kept the primary's setting).
//  - The watch's own failures (server down, a query refused) are not the relay's: the
//    replication connection decides about those. They leave Latest().read_ok false and are
//    logged at debug; the next round connects again. Passwords never reach the log.
//
// Thread-safety: Latest() and stalls() from any thread; `fatal` runs on the watch thread (post
// it to the relay's loop). The destructor stops and joins the thread.
#pragma once

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/lsn.h"
#include "common/status.h"
#include "pg/pg_handles.h"

namespace walrelay {

struct SlotHealthSample {
  bool read_ok = false;  // false until a read succeeded, or when the last one failed
  bool exists = false;
  bool active = false;
  std::string wal_status;                  // reserved, extended, unreserved, lost; "" when unknown
  std::optional<int64_t> safe_wal_size;    // bytes; NULL when lost or no max_slot_wal_keep_size
  std::optional<uint64_t> retained_bytes;  // current WAL position minus restart_lsn
  Lsn restart_lsn;
  Lsn confirmed_flush;
  // 17+: invalidation_reason (wal_removed, rows_removed, wal_level_insufficient, idle_timeout
  // on 18); 16: "conflict" for a conflicting slot; before: "wal_removed" when lost.
  std::string invalidation_reason;
  std::string wait_event;      // the walsender's, e.g. WaitForStandbyConfirmation
  bool stalled = false;        // waiting for synchronized_standby_slots past the bound
  double stalled_seconds = 0;  // how long the current wait has lasted
  std::chrono::system_clock::time_point read_at;
};

// One read of `slot_name` on `conn` (a plain, non-replication connection).
Result<SlotHealthSample> ReadSlotHealth(PGconn* conn, const std::string& slot_name);

// OK, or the status that stops a relay streaming from the slot (see the contract above).
// `last_confirmed` is the position this relay confirmed last, for the message.
Status SlotVerdict(const SlotHealthSample& sample, const std::string& slot_name,
                   Lsn last_confirmed);

struct SlotHealthOptions {
  // libpq keywords and values of the source database (RelaySettings::pg_params).
  std::vector<std::pair<std::string, std::string>> pg_params;
  std::string slot_name;
  std::chrono::milliseconds interval{10000};    // slot.health.interval.ms
  std::chrono::milliseconds stall_warn{30000};  // slot.stall.warn.ms
};

class SlotHealthWatch {
 public:
  // `last_confirmed` tells the watch what the relay confirmed, for the fatal message.
  static std::unique_ptr<SlotHealthWatch> Start(SlotHealthOptions options,
                                                std::function<Lsn()> last_confirmed,
                                                std::function<void(Status)> fatal);
  SlotHealthWatch(const SlotHealthWatch&) = delete;
  SlotHealthWatch& operator=(const SlotHealthWatch&) = delete;
  ~SlotHealthWatch();

  SlotHealthSample Latest() const;
  uint64_t stalls() const { return stalls_.load(); }

 private:
  SlotHealthWatch(SlotHealthOptions options, std::function<Lsn()> last_confirmed,
                  std::function<void(Status)> fatal);
  void Loop();
  // One round; false when the watch is done (the slot was invalidated).
  bool Round();
  Result<PGconn*> Connection();
  void NoteStall(SlotHealthSample& sample);

  const SlotHealthOptions options_;
  const std::function<Lsn()> last_confirmed_;
  const std::function<void(Status)> fatal_;
  PgConnPtr conn_;  // the watch thread's only
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  SlotHealthSample latest_;
  std::optional<std::chrono::steady_clock::time_point> waiting_since_;
  bool stall_reported_ = false;
  std::atomic<uint64_t> stalls_{0};
  std::thread thread_;  // last: started when everything above is ready
};

}  // namespace walrelay
