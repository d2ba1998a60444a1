#include "pg/slot_health.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "pg/plain_connection.h"

namespace walrelay {
namespace {

constexpr const char* kStandbyWait = "WaitForStandbyConfirmation";

std::string Trimmed(const char* text) {
  std::string s = text != nullptr ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string SlotQuery(int server_version) {
  std::string reason = "NULL::text";
  if (server_version >= 170000) {
    reason = "s.invalidation_reason";
  } else if (server_version >= 160000) {
    reason = "CASE WHEN s.conflicting THEN 'conflict' END";
  }
  // pg_current_wal_lsn() is refused during recovery, where the replayed position stands in.
  return "SELECT s.wal_status, s.safe_wal_size::text, "
         "(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
         "ELSE pg_current_wal_lsn() END - s.restart_lsn)::bigint::text, "
         "s.restart_lsn::text, s.confirmed_flush_lsn::text, s.active::text, " +
         reason +
         ", (SELECT a.wait_event FROM pg_stat_activity a WHERE a.pid = s.active_pid) "
         "FROM pg_replication_slots s WHERE s.slot_name = $1";
}

std::optional<std::string> Field(PGresult* r, int col) {
  if (PQgetisnull(r, 0, col)) return std::nullopt;
  return std::string(PQgetvalue(r, 0, col));
}

}  // namespace

Result<SlotHealthSample> ReadSlotHealth(PGconn* conn, const std::string& slot_name) {
  const std::string sql = SlotQuery(PQserverVersion(conn));
  const char* params[] = {slot_name.c_str()};
  PgResultPtr res(PQexecParams(conn, sql.c_str(), 1, nullptr, params, nullptr, nullptr, 0));
  if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    const std::string why = Trimmed(res ? PQresultErrorMessage(res.get()) : PQerrorMessage(conn));
    return Status::Connection("reading pg_replication_slots for slot '" + slot_name +
                              "' failed: " + why);
  }
  SlotHealthSample s;
  s.read_ok = true;
  s.read_at = std::chrono::system_clock::now();
  if (PQntuples(res.get()) == 0) return s;  // exists = false
  PGresult* r = res.get();
  s.exists = true;
  s.wal_status = Field(r, 0).value_or("");
  if (auto v = Field(r, 1)) s.safe_wal_size = std::strtoll(v->c_str(), nullptr, 10);
  if (auto v = Field(r, 2)) {
    const long long retained = std::strtoll(v->c_str(), nullptr, 10);
    s.retained_bytes = retained > 0 ? static_cast<uint64_t>(retained) : 0;
  }
  if (auto v = Field(r, 3))
    if (auto l = Lsn::Parse(*v); l.ok()) s.restart_lsn = *l;
  if (auto v = Field(r, 4))
    if (auto l = Lsn::Parse(*v); l.ok()) s.confirmed_flush = *l;
  s.active = Field(r, 5).value_or("false") == "true";
  s.invalidation_reason = Field(r, 6).value_or("");
  // Before 16 only removed WAL makes a slot lost; on 16 every invalidation shows as lost, and
  // one that is not a conflict removed WAL.
  if (s.wal_status == "lost" && s.invalidation_reason.empty())
    s.invalidation_reason = "wal_removed";
  s.wait_event = Field(r, 7).value_or("");
  return s;
}

Status SlotVerdict(const SlotHealthSample& sample, const std::string& slot_name,
                   Lsn last_confirmed) {
  if (!sample.read_ok || !sample.exists || sample.wal_status != "lost") return Status::Ok();
  // Before this relay confirmed anything, the slot's own position is the last one known.
  const Lsn from = last_confirmed.valid() ? last_confirmed : sample.confirmed_flush;
  const std::string name = "replication slot '" + slot_name + "'";
  const std::string lost = "rows committed after LSN " + from.ToString() +
                           " (the last confirmed) cannot be read from it: republish them from "
                           "the outbox table or the source of truth, then drop and recreate the "
                           "slot";
  if (sample.invalidation_reason == "wal_removed") {
    return Status(ErrorCode::kSlotWalRemoved,
                  name +
                      " was invalidated (wal_status lost): PostgreSQL removed WAL it still "
                      "needed because it retained more than max_slot_wal_keep_size allows "
                      "(seen by the slot health check); " +
                      lost +
                      "; raise max_slot_wal_keep_size or keep the relay from falling that far "
                      "behind");
  }
  return Status(ErrorCode::kSlotInvalidated, name + " was invalidated (wal_status lost, " +
                                                 sample.invalidation_reason +
                                                 "; seen by the slot health check); " + lost);
}

std::unique_ptr<SlotHealthWatch> SlotHealthWatch::Start(SlotHealthOptions options,
                                                        std::function<Lsn()> last_confirmed,
                                                        std::function<void(Status)> fatal) {
  return std::unique_ptr<SlotHealthWatch>(
      new SlotHealthWatch(std::move(options), std::move(last_confirmed), std::move(fatal)));
}

SlotHealthWatch::SlotHealthWatch(SlotHealthOptions options, std::function<Lsn()> last_confirmed,
                                 std::function<void(Status)> fatal)
    : options_(std::move(options)),
      last_confirmed_(std::move(last_confirmed)),
      fatal_(std::move(fatal)),
      thread_([this] { Loop(); }) {}

SlotHealthWatch::~SlotHealthWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SlotHealthSample SlotHealthWatch::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

void SlotHealthWatch::Loop() {
  while (true) {
    if (!Round()) return;
    std::unique_lock<std::mutex> lock(mu_);
    if (wake_.wait_for(lock, options_.interval, [this] { return stop_; })) return;
  }
}

Result<PGconn*> SlotHealthWatch::Connection() {
  if (conn_ && PQstatus(conn_.get()) == CONNECTION_OK) return conn_.get();
  // Bounded, so a hung server cannot hold the watch (or the relay's stop, which joins it).
  auto conn = ConnectPlain(options_.pg_params,
                           {{"connect_timeout", "10"},
                            {"options", "-c statement_timeout=5000"},
                            {"application_name", "walrelay-slot-health"}},
                           "the slot health watch");
  if (!conn.ok()) return conn.status();
  conn_ = std::move(conn).value();
  return conn_.get();
}

void SlotHealthWatch::NoteStall(SlotHealthSample& sample) {
  const auto now = std::chrono::steady_clock::now();
  if (sample.wait_event != kStandbyWait) {
    if (stall_reported_) {
      spdlog::info("slot '{}': the walsender no longer waits for synchronized_standby_slots",
                   options_.slot_name);
    }
    waiting_since_.reset();
    stall_reported_ = false;
    return;
  }
  if (!waiting_since_) waiting_since_ = now;
  sample.stalled_seconds = std::chrono::duration<double>(now - *waiting_since_).count();
  sample.stalled = now - *waiting_since_ >= options_.stall_warn;
  if (!sample.stalled || stall_reported_) return;
  stall_reported_ = true;
  stalls_.fetch_add(1);
  std::string setting = "?";
  PgResultPtr res(PQexec(conn_.get(), "SHOW synchronized_standby_slots"));
  if (res && PQresultStatus(res.get()) == PGRES_TUPLES_OK && PQntuples(res.get()) == 1)
    setting = PQgetvalue(res.get(), 0, 0);
  spdlog::warn("slot '{}': the server has held the stream back for {:.0f} s (slot.stall.warn.ms): "
               "its walsender waits for the physical standbys of synchronized_standby_slots = "
               "'{}' to confirm WAL. It waits forever if a slot listed there does not exist on "
               "this server or its standby is gone: fix synchronized_standby_slots (e.g. after "
               "a promotion) or bring the standby back",
               options_.slot_name, sample.stalled_seconds, setting);
}

bool SlotHealthWatch::Round() {
  auto conn = Connection();
  Result<SlotHealthSample> sample = conn.ok() ? ReadSlotHealth(*conn, options_.slot_name)
                                              : Result<SlotHealthSample>(conn.status());
  if (!sample.ok()) {
    spdlog::debug("slot health: {}", sample.status().message());
    if (conn.ok()) conn_.reset();  // a fresh connection next round
    std::lock_guard<std::mutex> lock(mu_);
    latest_.read_ok = false;
    return true;
  }
  NoteStall(*sample);
  Status verdict = SlotVerdict(*sample, options_.slot_name, last_confirmed_());
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = *sample;
  }
  if (verdict.ok()) return true;
  fatal_(std::move(verdict));
  return false;
}

}  // namespace walrelay
