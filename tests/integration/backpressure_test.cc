// The relay while Kafka holds records back, against a real PostgreSQL and the mock Kafka
// cluster: a partition without a leader keeps one record pending while the rest of the stream
// goes on (the ack ledger stays bounded, the slot stays before the record), and a full
// librdkafka queue pauses the stream without blocking the event loop.
//
// The ledger case is sized for CI; bench/ledger_memory.sh runs it at full size through
// WALRELAY_LEDGER_OUTBOX_ROWS, WALRELAY_LEDGER_OTHER_TRANSACTIONS and
// WALRELAY_LEDGER_RSS_LIMIT_MIB.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>

#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

long EnvLong(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atol(v) : fallback;
}

std::string StuckEvent() {
  return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
         "('00000000-0000-4000-8000-00000000beef', 'Stuck', 'stuck-1', 'StuckHappened', "
         "'{\"seq\": 0}');";
}

}  // namespace

TEST_CASE("a partition without a leader: the ack ledger stays bounded while the stream goes on "
          "behind its record") {
  const long outbox_rows = EnvLong("WALRELAY_LEDGER_OUTBOX_ROWS", 10000);
  const long other_transactions = EnvLong("WALRELAY_LEDGER_OTHER_TRANSACTIONS", 100000);
  const long rss_limit_mib = EnvLong("WALRELAY_LEDGER_RSS_LIMIT_MIB", 0);  // 0: not checked
  REQUIRE(outbox_rows > 0);
  REQUIRE(other_transactions >= outbox_rows);
  RelayFixture fx;
  REQUIRE(fx.kafka().CreateTopic("outbox.event.Stuck", 1, 1).ok());
  auto relay = fx.StartRelay(fx.WriteConfig("ledger", {}));
  const int port = RestPort(fx);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");  // outbox.event.Customer
  const Lsn warm = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("ledger", warm, 20s) >= warm);

  REQUIRE(rd_kafka_mock_partition_set_leader(fx.kafka().cluster(), "outbox.event.Stuck", 0, -1) ==
          RD_KAFKA_RESP_ERR_NO_ERROR);
  const Lsn before_stuck = fx.CurrentWal();
  fx.Exec("BEGIN;" + StuckEvent() + "COMMIT;");
  // Transactions of a table that is not relayed, one in every `ratio` also writing an outbox
  // row for a healthy topic: each commits on its own, as an application's would.
  const long ratio = other_transactions / outbox_rows;
  const auto generate_start = std::chrono::steady_clock::now();
  fx.Exec(
      "DO $$ BEGIN PERFORM set_config('synchronous_commit', 'off', false); "
      "FOR i IN 1.." +
      std::to_string(outbox_rows * ratio) +
      " LOOP "
      "INSERT INTO unrelated (filler) VALUES ('x'); "
      "IF i % " +
      std::to_string(ratio) +
      " = 0 THEN "
      "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
      "(gen_random_uuid(), 'Customer', 'k' || (i % 100), 'Bulk', jsonb_build_object('seq', i)); "
      "END IF; COMMIT; END LOOP; END $$");
  const double generate_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - generate_start).count();

  // Until every healthy record is acknowledged, watch the ledger, the slot and the memory.
  const long expected_customer = 1 + outbox_rows;
  long peak_entries = 0;
  long entries = -1;
  long inflight = -1;
  long peak_kib = 0;
  long acked = 0;
  std::string metrics;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60 + outbox_rows / 500);
  while (std::chrono::steady_clock::now() < deadline) {
    peak_kib = std::max(peak_kib, ProcKib(relay->pid(), "VmHWM"));
    metrics = Http(port, "GET", "/metrics", {}, 5s).body;
    entries = static_cast<long>(Metric(metrics, "walrelay_ack_ledger_entries").value_or(-1));
    inflight = static_cast<long>(Metric(metrics, "walrelay_inflight_records").value_or(-1));
    peak_entries = std::max(peak_entries, entries);
    CHECK(fx.ConfirmedFlush("ledger") <= before_stuck);
    acked = static_cast<long>(
        Metric(metrics, "walrelay_records_acked_total{topic=\"outbox.event.Customer\"}")
            .value_or(-1));
    if (acked >= expected_customer) break;
    std::this_thread::sleep_for(200ms);
  }
  peak_kib = std::max(peak_kib, ProcKib(relay->pid(), "VmHWM"));
  MESSAGE(outbox_rows << " outbox rows and " << outbox_rows * ratio
                      << " transactions of another table (written in " << generate_seconds
                      << " s) behind a record for a partition without a leader: peak RSS "
                      << peak_kib / 1024 << " MiB, ledger peak " << peak_entries
                      << " entries, at the end " << entries << " entries with " << inflight
                      << " record(s) in flight");
  REQUIRE_MESSAGE(acked == expected_customer, metrics);
  CHECK(relay->Running());
  CHECK(Metric(metrics, "walrelay_up") == 1);
  // Held: the one record for the leaderless partition.
  CHECK(inflight == 1);
  // O(records in flight), not O(transactions): at most 4 entries per record in flight + 64.
  CHECK(entries <= 4 * inflight + 65);
  CHECK(peak_entries <= 4 * 8192 + 65);  // max.queue.size
  CHECK(fx.ConfirmedFlush("ledger") <= before_stuck);
  if (rss_limit_mib > 0) CHECK(peak_kib <= rss_limit_mib * 1024);

  // With a leader again the record is delivered and the slot moves on to the end.
  REQUIRE(rd_kafka_mock_partition_set_leader(fx.kafka().cluster(), "outbox.event.Stuck", 0, 1) ==
          RD_KAFKA_RESP_ERR_NO_ERROR);
  const Lsn end = fx.CurrentWal();
  CHECK(fx.WaitConfirmed("ledger", end, 30s) >= end);
  auto reader = fx.Reader();
  auto stuck = reader->ReadAtLeast({"outbox.event.Stuck"}, 1, 20s);
  REQUIRE(stuck.ok());
  CHECK(stuck->size() == 1);
  CHECK(relay->Running());
}

TEST_CASE("a full librdkafka queue pauses the stream; status updates, REST and delivery go on") {
  RelayFixture fx;
  // A walsender that hears nothing for 2 s drops the connection: only status updates from a
  // loop that is not blocked keep it.
  fx.Exec("ALTER SYSTEM SET wal_sender_timeout = '2s'");
  fx.Exec("SELECT pg_reload_conf()");
  // librdkafka's queue far below max.queue.size (8192), so it is the one that fills.
  auto relay =
      fx.StartRelay(fx.WriteConfig("qfull", {{"kafka.queue.buffering.max.messages", "5"}}));
  const int port = RestPort(fx);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn warm = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("qfull", warm, 20s) >= warm);
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  constexpr int kRows = 60;
  std::string sql;
  for (int s = 2; s <= kRows; ++s) sql += "BEGIN;" + InsertEvent(s) + "COMMIT;";
  fx.Exec(sql);
  const Lsn end = fx.CurrentWal();

  // The relay holds the record that did not fit; its loop still answers.
  std::string metrics;
  const auto held_deadline = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < held_deadline) {
    metrics = Http(port, "GET", "/metrics", {}, 2s).body;
    if (Metric(metrics, "walrelay_held_records") >= 1) break;
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE_MESSAGE(Metric(metrics, "walrelay_held_records") >= 1, metrics);
  CHECK(Metric(metrics, "walrelay_kafka_queue_full_total") >= 1);
  CHECK(Metric(metrics, "walrelay_inflight_records") == 6);  // 5 in librdkafka, 1 held

  // Over two walsender timeouts: status updates keep coming and /status answers at once.
  std::set<std::string> reply_times;
  const auto watch_end = std::chrono::steady_clock::now() + 4500ms;
  while (std::chrono::steady_clock::now() < watch_end) {
    auto reply_time =
        fx.pg().QueryValue("SELECT coalesce(reply_time::text, '') FROM pg_stat_replication WHERE "
                           "application_name = 'walrelay'");
    if (reply_time.ok() && !reply_time->empty()) reply_times.insert(*reply_time);
    const auto asked = std::chrono::steady_clock::now();
    const Reply status = Http(port, "GET", "/connectors/itest-qfull/status", {}, 2s);
    CHECK(status.status == 200);
    CHECK(std::chrono::steady_clock::now() - asked < 1s);
    std::this_thread::sleep_for(250ms);
  }
  // A blocked loop leaves one value, then none once the walsender times out.
  CHECK_MESSAGE(reply_times.size() >= 6, reply_times.size() << " distinct reply_time values");
  CHECK(Log(fx).find("lost the replication connection") == std::string::npos);
  CHECK(fx.ConfirmedFlush("qfull") <= warm);

  REQUIRE(fx.kafka().SetBrokerUp(1).ok());
  CHECK(fx.WaitConfirmed("qfull", end, 30s) >= end);
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), kRows, 30s);
  REQUIRE(records.ok());
  auto seen = CheckRecords(*records);
  for (int s = 1; s <= kRows; ++s) CHECK_MESSAGE(seen.count(s) == 1, "missing seq " << s);
  CHECK(relay->Running());
  CHECK(Log(fx).find("lost the replication connection") == std::string::npos);
}
