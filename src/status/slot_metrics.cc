#include "status/slot_metrics.h"

#include <ctime>

namespace walrelay {

void WriteSlotHealthMetrics(PrometheusText& m, const SlotHealthSample& s, uint64_t stalls) {
  m.Single("walrelay_slot_stalls_total", "counter",
           "Times the server held the slot's stream back for synchronized_standby_slots longer "
           "than slot.stall.warn.ms.",
           stalls);
  if (!s.read_ok || !s.exists) return;
  if (s.retained_bytes) {
    m.Single("walrelay_slot_retained_wal_bytes", "gauge",
             "WAL the slot keeps on the server: current WAL position minus restart_lsn.",
             *s.retained_bytes);
  }
  if (s.safe_wal_size) {
    m.Single("walrelay_slot_safe_wal_size_bytes", "gauge",
             "WAL that can still be written before max_slot_wal_keep_size invalidates the slot "
             "(pg_replication_slots.safe_wal_size).",
             static_cast<double>(*s.safe_wal_size));
  }
  m.Family("walrelay_slot_wal_status", "gauge",
           "1 for the slot's wal_status in pg_replication_slots, 0 for the others.");
  for (const char* status : {"reserved", "extended", "unreserved", "lost"}) {
    m.Sample({{"status", status}}, uint64_t{s.wal_status == status ? 1u : 0u});
  }
  m.Single("walrelay_slot_invalidated", "gauge",
           "1 once PostgreSQL invalidated the slot (wal_status lost); the relay stops.",
           uint64_t{s.wal_status == "lost" ? 1u : 0u});
  m.Single("walrelay_slot_stalled", "gauge",
           "1 while the server holds the stream back for synchronized_standby_slots longer "
           "than slot.stall.warn.ms.",
           uint64_t{s.stalled ? 1u : 0u});
}

void WriteSlotHealthJson(rapidjson::Writer<rapidjson::StringBuffer>& w,
                         const std::string& slot_name, const SlotHealthSample& s) {
  w.Key("slot");
  w.StartObject();
  w.Key("name");
  w.String(slot_name.c_str());
  if (s.read_ok) {
    w.Key("exists");
    w.Bool(s.exists);
  }
  if (s.read_ok && s.exists) {
    w.Key("active");
    w.Bool(s.active);
    w.Key("wal_status");
    w.String(s.wal_status.c_str());
    if (s.retained_bytes) {
      w.Key("retained_wal_bytes");
      w.Uint64(*s.retained_bytes);
    }
    if (s.safe_wal_size) {
      w.Key("safe_wal_size_bytes");
      w.Int64(*s.safe_wal_size);
    }
    w.Key("restart_lsn");
    w.String(s.restart_lsn.ToString().c_str());
    w.Key("confirmed_flush_lsn");
    w.String(s.confirmed_flush.ToString().c_str());
    if (!s.invalidation_reason.empty()) {
      w.Key("invalidation_reason");
      w.String(s.invalidation_reason.c_str());
    }
    w.Key("stalled");
    w.Bool(s.stalled);
  }
  if (s.read_ok) {
    const std::time_t t = std::chrono::system_clock::to_time_t(s.read_at);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    w.Key("read_at");
    w.String(buf);
  }
  w.EndObject();
}

}  // namespace walrelay
