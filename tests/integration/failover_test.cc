// Failover slots (slot.failover, PostgreSQL 17) against real PostgreSQL: a primary and a
// physical standby made by PgSandbox (sync_replication_slots, hot_standby_feedback,
// primary_slot_name; synchronized_standby_slots on the primary), and the mock cluster. kill -9
// of the primary while the relay has unconfirmed rows, promotion of the standby, the relay
// pointed at the new primary: every row committed on the surviving server arrives, in key
// order, duplicates counted. On 15, slot.failover=true is refused naming the key.
#include <csignal>
#include <set>

#include "outbox_events.h"
#include "relay_fixture.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

std::string Val(const Result<int>& r) {
  return r.ok() ? std::to_string(*r) : r.status().ToString();
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string Batch(int first, int n) {
  std::string sql;
  for (int seq = first; seq < first + n; ++seq) {
    sql += (seq % 10 == 1 ? "BEGIN;" : "") + InsertEvent(seq) + (seq % 10 == 0 ? "COMMIT;" : "");
  }
  if ((first + n - 1) % 10 != 0) sql += "COMMIT;";
  return sql;
}

}  // namespace

namespace {

// How the relay reaches the promoted server: restarted against its address (as a supervisor
// does when a DNS name or virtual IP moves), or on its own through libpq's multi-host
// database.hostname, which takes the first server that accepts writes at every reconnect.
enum class Follow { kRestart, kMultiHost };

void FailOver(Follow follow) {
  devtools::PgSandboxOptions po;
  po.major = 17;
  RelayFixture fx(po);
  fx.UsePlugin("pgoutput");
  devtools::PgStandbyOptions so;
  so.slot_name = "standby1";
  so.extra_settings = {"sync_replication_slots=on", "hot_standby_feedback=on"};
  auto standby_r = fx.pg().StartStandby(so);
  REQUIRE_MESSAGE(standby_r.ok(), standby_r.status().ToString());
  devtools::PgSandbox& standby = **standby_r;
  // Failover slots wait for this standby: the relay never gets a row the standby lacks.
  fx.Exec("ALTER SYSTEM SET synchronized_standby_slots = 'standby1'");
  fx.Exec("SELECT pg_reload_conf()");

  std::map<std::string, std::string> config = {
      {"slot.failover", "true"}, {"slot.health.interval.ms", "500"}, {"kafka.linger.ms", "200"}};
  if (follow == Follow::kMultiHost) {
    config["database.hostname"] = "127.0.0.1,127.0.0.1";
    config["database.port"] = std::to_string(fx.pg().port()) + "," + std::to_string(standby.port());
  }
  auto relay = fx.StartRelay(fx.WriteConfig("fo", config));
  CHECK(fx.Value("SELECT failover::text FROM pg_replication_slots WHERE slot_name = 'fo'") ==
        "true");
  fx.Exec(Batch(1, 500));
  const Lsn first_half = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("fo", first_half, 20s) >= first_half);
  // The standby's copy becomes a persistent synchronized slot once the primary's has moved on.
  std::string synced;
  CHECK(Eventually(
      [&] {
        (void)fx.pg().Exec("SELECT pg_log_standby_snapshot()");
        auto v = standby.QueryValue("SELECT synced::text || '/' || temporary::text FROM "
                                    "pg_replication_slots WHERE slot_name = 'fo'");
        synced = v.ok() ? *v : v.status().ToString();
        return synced == "true/false";
      },
      30s));
  CHECK(synced == "true/false");

  // Rows committed and not yet confirmed to the slot when the primary dies (Kafka lingers).
  fx.Exec(Batch(501, 200));
  const Lsn committed = fx.CurrentWal();
  const Lsn confirmed_at_kill = fx.ConfirmedFlush("fo");
  const auto killed = std::chrono::steady_clock::now();
  REQUIRE(fx.pg().KillServer().ok());
  CHECK(confirmed_at_kill < committed);
  REQUIRE(standby.Promote().ok());
  CHECK(Val(standby.Timeline()) == "2");
  std::unique_ptr<devtools::ChildProcess> child;
  if (follow == Follow::kRestart) {
    REQUIRE(relay->Kill(SIGKILL).ok());
    (void)relay->Wait(10s);
    config["database.port"] = std::to_string(standby.port());
    const std::string moved = fx.WriteConfig("fo", config);
    child = fx.SpawnRelay(moved);
    REQUIRE(devtools::WaitForFileContains(fx.log_path(), "streaming slot", 30s));
  } else {
    // The same process reconnects with backoff and finds the promoted standby.
    child = std::move(relay);
    REQUIRE_MESSAGE(Eventually([&] { return Count(Log(fx), "streaming slot") >= 2; }, 60s),
                    Log(fx));
  }
  const double kill_to_streaming = SecondsSince(killed);
  REQUIRE(standby.Exec(Batch(701, 300)).ok());

  // Every row the new primary has (what the primary committed and the standby received, plus
  // the rows written after promotion) arrives; nothing else can.
  auto rows = standby.Query("SELECT (payload->>'seq')::int FROM outbox ORDER BY 1");
  REQUIRE(rows.ok());
  std::set<int> expected;
  for (const auto& r : *rows) expected.insert(std::stoi(*r[0]));
  CHECK(expected.size() >= 800);  // at least all confirmed before the kill and all after
  auto records = ReadEverySeq(*fx.Reader(), expected, 60s);
  auto seen = CheckRecords(records);
  int missing = 0;
  int duplicates = 0;
  for (int seq : expected) {
    auto it = seen.find(seq);
    if (it == seen.end()) ++missing;
    else duplicates += it->second - 1;
  }
  CHECK(missing == 0);
  CHECK(duplicates <= 200);  // at most what was unconfirmed at the kill
  CHECK(child->Running());
  CHECK(Log(fx).find(" error ") == std::string::npos);
  const std::string how =
      follow == Follow::kRestart ? "relay restarted" : "multi-host, same process";
  MESSAGE("failover on 17 (" << how << "): " << expected.size() << " rows on the promoted server, "
                             << missing << " missing, " << duplicates
                             << " duplicates; kill -9 of the "
                             << "primary to streaming from the promoted standby "
                             << kill_to_streaming << " s");
}

}  // namespace

TEST_CASE("failover (PostgreSQL 17): slot.failover survives kill -9 of the primary and "
          "promotion; every row on the new primary arrives") {
  FailOver(Follow::kRestart);
}

TEST_CASE("failover (PostgreSQL 17): with the primary and standby in database.hostname the "
          "running relay follows the promotion") {
  FailOver(Follow::kMultiHost);
}

TEST_CASE("failover: slot.failover=true on PostgreSQL 15 stops at once naming the key") {
  RelayFixture fx;  // Debian's 15
  fx.UsePlugin("pgoutput");
  auto relay = fx.SpawnRelay(fx.WriteConfig("nofo", {{"slot.failover", "true"}}));
  auto code = relay->Wait(30s);
  REQUIRE(code.ok());
  const std::string log = Log(fx);
  CHECK_MESSAGE(*code == 2, log);
  CHECK_MESSAGE(log.find("'slot.failover'=true needs PostgreSQL 17") != std::string::npos, log);
  CHECK(fx.Value("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'nofo'") == "0");
}
