// SlotVerdict (pg/slot_health.h): which slot states stop the relay, with which code and words.
#include <doctest/doctest.h>

#include "pg/slot_health.h"

using namespace walrelay;

namespace {

SlotHealthSample Sample(const std::string& wal_status, const std::string& reason) {
  SlotHealthSample s;
  s.read_ok = true;
  s.exists = true;
  s.wal_status = wal_status;
  s.invalidation_reason = reason;
  s.confirmed_flush = Lsn(0x3000000);
  return s;
}

}  // namespace

TEST_CASE("SlotVerdict: a healthy, unread or missing slot does not stop the relay") {
  for (const char* status : {"reserved", "extended", "unreserved"})
    CHECK(SlotVerdict(Sample(status, ""), "s", Lsn(1)).ok());
  CHECK(SlotVerdict(SlotHealthSample{}, "s", Lsn(1)).ok());  // not read yet
  SlotHealthSample missing;
  missing.read_ok = true;  // exists = false: exit 16 is the replication path's to decide
  CHECK(SlotVerdict(missing, "s", Lsn(1)).ok());
}

TEST_CASE("SlotVerdict: removed WAL is its own code, naming the setting, slot and LSN") {
  const Status st = SlotVerdict(Sample("lost", "wal_removed"), "outbox_slot", Lsn(0x1000028));
  CHECK(st.code() == ErrorCode::kSlotWalRemoved);
  CHECK(st.message().find("max_slot_wal_keep_size") != std::string::npos);
  CHECK(st.message().find("'outbox_slot'") != std::string::npos);
  CHECK(st.message().find("0/1000028") != std::string::npos);
  // Before this relay confirmed anything, the slot's own position is the one named.
  const Status fresh = SlotVerdict(Sample("lost", "wal_removed"), "s", Lsn());
  CHECK(fresh.message().find("0/3000000") != std::string::npos);
}

TEST_CASE("SlotVerdict: other invalidations are exit 14's code, naming the cause") {
  const Status st = SlotVerdict(Sample("lost", "rows_removed"), "s", Lsn(1));
  CHECK(st.code() == ErrorCode::kSlotInvalidated);
  CHECK(st.message().find("rows_removed") != std::string::npos);
  CHECK(st.message().find("max_slot_wal_keep_size") == std::string::npos);
}
