// Slot health as operators watch it (src/pg/slot_health.h), against real PostgreSQL and the
// mock cluster: retained WAL, wal_status and safe_wal_size in /metrics and the connector status;
// a slot invalidated by max_slot_wal_keep_size stops the relay at once (exit 22) naming the
// setting; a walsender held back by synchronized_standby_slots (17) is reported as a stall.
#include <csignal>
#include <optional>
#include <sstream>

#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

// Writes `mb` MB of WAL on a table the relay does not relay, switching WAL files.
void WriteWal(RelayFixture& fx, int mb) {
  for (int i = 0; i < mb / 4; ++i) {
    fx.Exec("INSERT INTO unrelated (filler) SELECT repeat('y', 1000) FROM generate_series(1, "
            "4000)");
    fx.Exec("SELECT pg_switch_wal()");
  }
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("slot health: a slot invalidated by max_slot_wal_keep_size while the relay is paused "
          "stops it at once after resuming (exit 22), naming the setting") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  fx.Exec("ALTER SYSTEM SET max_slot_wal_keep_size = '16MB'");
  fx.Exec("SELECT pg_reload_conf()");
  auto config = std::map<std::string, std::string>{{"slot.health.interval.ms", "200"}};
  auto relay = fx.StartRelay(fx.WriteConfig("keep", config));
  const int port = RestPort(fx);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn first = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("keep", first, 20s) >= first);

  REQUIRE(Http(port, "PUT", "/connectors/itest-keep/pause").status == 202);
  // Healthy and paused: the slot's numbers are exported.
  std::string metrics;
  CHECK(Eventually(
      [&] {
        metrics = Http(port, "GET", "/metrics").body;
        return Metric(metrics, "walrelay_slot_safe_wal_size_bytes").has_value();
      },
      10s));
  CHECK(Metric(metrics, "walrelay_slot_wal_status{status=\"reserved\"}") == 1);
  CHECK(Metric(metrics, "walrelay_slot_invalidated") == 0);
  CHECK(Metric(metrics, "walrelay_slot_retained_wal_bytes").value_or(-1) >= 0);
  const std::string status = Http(port, "GET", "/connectors/itest-keep/status").body;
  CHECK_MESSAGE(status.find("\"slot\":{\"name\":\"keep\",\"exists\":true,\"active\":true,"
                            "\"wal_status\":\"reserved\"") != std::string::npos,
                status);

  fx.Exec("BEGIN;" + InsertEvent(2) + "COMMIT;");  // committed, never to be read
  WriteWal(fx, 48);
  metrics = Http(port, "GET", "/metrics").body;
  CHECK(Eventually(
      [&] {
        metrics = Http(port, "GET", "/metrics").body;
        return Metric(metrics, "walrelay_slot_retained_wal_bytes").value_or(0) > 16 << 20;
      },
      10s));
  // The checkpoint invalidates the slot, after terminating the walsender that holds it; that
  // walsender is stuck sending to the paused relay, so the checkpoint waits for the resume.
  std::thread checkpoint([&fx] { CHECK(fx.pg().Exec("CHECKPOINT").ok()); });
  std::this_thread::sleep_for(1s);
  const auto resumed = std::chrono::steady_clock::now();
  Http(port, "PUT", "/connectors/itest-keep/resume");
  auto code = relay->Wait(20s);
  checkpoint.join();
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  const double seconds = SecondsSince(resumed);
  const std::string log = Log(fx);
  CHECK_MESSAGE(*code == 22, log);
  CHECK_MESSAGE(log.find("max_slot_wal_keep_size") != std::string::npos, log);
  CHECK_MESSAGE(log.find("'keep'") != std::string::npos, log);
  CHECK(seconds < 10);
  CHECK(fx.Value("SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'keep'") == "lost");
  // Nothing past the lost WAL was confirmed.
  CHECK(fx.ConfirmedFlush("keep") < fx.CurrentWal());
  MESSAGE("invalidated slot: exit " << *code << " " << seconds << " s after resuming");

  // A new start names the same cause at once (preflight), with the same exit code.
  auto [again, out] = fx.RunCommand({"run", "--config", fx.WriteConfig("keep", config)});
  CHECK(again == 22);
  CHECK(out.find("max_slot_wal_keep_size") != std::string::npos);
}

TEST_CASE("slot health (PostgreSQL 17): a stream held back by synchronized_standby_slots naming "
          "a slot the server lacks is reported as a stall, and flows when the setting is fixed") {
  devtools::PgSandboxOptions po;
  po.major = 17;
  RelayFixture fx(po);
  fx.UsePlugin("pgoutput");
  // As on a promoted standby that kept the primary's setting: the slot it names is gone. (The
  // setting refuses a slot that does not exist, so it is set first and the slot dropped.)
  fx.Exec("SELECT pg_create_physical_replication_slot('gone_standby')");
  fx.Exec("ALTER SYSTEM SET synchronized_standby_slots = 'gone_standby'");
  fx.Exec("SELECT pg_reload_conf()");
  fx.Exec("SELECT pg_drop_replication_slot('gone_standby')");
  // Only failover slots wait for synchronized_standby_slots.
  fx.Exec("SELECT pg_create_logical_replication_slot('held', 'pgoutput', false, false, true)");
  auto config = std::map<std::string, std::string>{{"slot.health.interval.ms", "200"},
                                                   {"slot.stall.warn.ms", "1000"}};
  auto relay = fx.StartRelay(fx.WriteConfig("held", config));
  const int port = RestPort(fx);
  const auto written = std::chrono::steady_clock::now();
  std::string sql;
  for (int seq = 1; seq <= 10; ++seq) sql += "BEGIN;" + InsertEvent(seq) + "COMMIT;";
  fx.Exec(sql);
  const Lsn end = fx.CurrentWal();

  const bool warned = devtools::WaitForFileContains(
      fx.log_path(), "synchronized_standby_slots = 'gone_standby'", 15s);
  const double warned_after = SecondsSince(written);
  CHECK_MESSAGE(warned, Log(fx));
  CHECK(warned_after < 10);
  std::string metrics = Http(port, "GET", "/metrics").body;
  CHECK(Metric(metrics, "walrelay_slot_stalled") == 1);
  CHECK(Metric(metrics, "walrelay_slot_stalls_total") == 1);
  CHECK(Http(port, "GET", "/connectors/itest-held/status").body.find("\"stalled\":true") !=
        std::string::npos);
  // Held back indeed: nothing confirmed, the relay still running.
  CHECK(fx.ConfirmedFlush("held") < end);
  CHECK(relay->Running());

  fx.Exec("ALTER SYSTEM RESET synchronized_standby_slots");
  fx.Exec("SELECT pg_reload_conf()");
  CHECK(fx.WaitConfirmed("held", end, 20s) >= end);
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), 10, 20s);
  REQUIRE(records.ok());
  CHECK(records->size() == 10);
  CHECK(Eventually(
      [&] { return Metric(Http(port, "GET", "/metrics").body, "walrelay_slot_stalled") == 0; },
      10s));
  MESSAGE("stall reported " << warned_after << " s after the rows were written (bound 1 s)");
}
