// The relay under faults and bad input, against a real PostgreSQL and the mock Kafka cluster:
// reconnects, kill -9 loops, active/standby, setup errors and their exit codes, shutdown with
// the broker gone, Kafka Connect's error policy and the dead-letter topic, bounded memory.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include <future>

#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "outbox_events.h"
#include "relay/relay.h"
#include "relay_fixture.h"
#include "status/rest_api.h"

using namespace walrelay;
using namespace walrelay::testing;

namespace {

std::vector<ConsumedRecord> ReadAll(RelayFixture& fx, const std::vector<std::string>& topics,
                                    size_t expected, int seconds = 60) {
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(topics, expected, std::chrono::seconds(seconds));
  REQUIRE(records.ok());
  auto extra = reader->Poll(std::chrono::milliseconds(1500));
  records->insert(records->end(), extra.begin(), extra.end());
  return std::move(records).value();
}

const std::string kEventId = "00000000-0000-4000-8000-0000000000ee";

}  // namespace

TEST_CASE("PostgreSQL restarted under the relay: it reconnects, logs once, loses nothing") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig(
      "restart", {{"reconnect.backoff.initial.ms", "100"}, {"reconnect.backoff.max.ms", "400"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(fx.pg().Stop().ok());
  std::this_thread::sleep_for(std::chrono::seconds(3));  // several failed attempts
  REQUIRE(relay->Running());
  REQUIRE(fx.pg().Restart().ok());
  auto wait_streams = [&](size_t n) {
    for (int i = 0; i < 200 && Count(Log(fx), "streaming slot") < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    REQUIRE_MESSAGE(Count(Log(fx), "streaming slot") == n, Log(fx));
  };
  wait_streams(2);
  std::string sql;
  for (int s = 2; s <= 100; ++s) sql += "BEGIN;" + InsertEvent(s) + "COMMIT;";
  fx.Exec(sql);
  // An administrator ending the walsender is survived the same way.
  REQUIRE(fx.Value("SELECT pg_terminate_backend(active_pid)::text FROM pg_replication_slots "
                   "WHERE slot_name='restart'") == "true");
  wait_streams(3);
  fx.Exec("BEGIN;" + InsertEvent(101) + "COMMIT;");
  auto records = ReadAll(fx, OutboxTopics(), 101);
  auto seen = CheckRecords(records);
  for (int s = 1; s <= 101; ++s) CHECK_MESSAGE(seen.count(s) == 1, "lost seq " << s);
  const std::string log = Log(fx);
  CHECK(Count(log, "lost the replication connection") == 2);
  // One warning per outage, not one per attempt.
  CHECK(Count(log, "retrying with backoff") <= 2);
  CHECK(relay->Running());
}

TEST_CASE("PostgreSQL unreachable at start: the relay waits and streams once it is up") {
  RelayFixture fx;
  REQUIRE(fx.pg().Stop().ok());
  auto relay = fx.SpawnRelay(fx.WriteConfig(
      "late", {{"reconnect.backoff.initial.ms", "100"}, {"reconnect.backoff.max.ms", "300"}}));
  REQUIRE(devtools::WaitForFileContains(fx.log_path(), "retrying with backoff",
                                        std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  REQUIRE(relay->Running());
  REQUIRE(fx.pg().Restart().ok());
  REQUIRE(devtools::WaitForFileContains(fx.log_path(), "streaming slot", std::chrono::seconds(20)));
  fx.Exec("BEGIN;" + InsertEvent(5) + "COMMIT;");
  CHECK(ReadAll(fx, {"outbox.event.Shipment"}, 1).size() == 1);

  // errors.max.retries bounds the attempts: then the relay gives up with exit code 3.
  REQUIRE(fx.pg().Stop().ok());
  auto bounded = fx.SpawnRelay(fx.WriteConfig("late", {{"reconnect.backoff.initial.ms", "50"},
                                                       {"reconnect.backoff.max.ms", "100"},
                                                       {"errors.max.retries", "3"}}));
  auto code = bounded->Wait(std::chrono::seconds(20));
  REQUIRE(code.ok());
  CHECK(*code == 3);
  CHECK(Log(fx).find("giving up after 3 retries (errors.max.retries)") != std::string::npos);
}

TEST_CASE("kill -9 five times while a writer streams: every row arrives, per-key order holds") {
  RelayFixture fx;
  const std::string config = fx.WriteConfig("killloop", {});
  auto relay = fx.StartRelay(config);  // creates the slot before the first row is written
  const int kTotal = 6000;
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (int batch = 0; batch < 60; ++batch) {
      std::string sql;
      for (int i = 1; i <= 100; ++i) {
        const int seq = batch * 100 + i;
        sql += (i % 10 == 1 ? "BEGIN;" : "") + InsertEvent(seq) + (i % 10 == 0 ? "COMMIT;" : "");
      }
      CHECK(fx.pg().Exec(sql).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    writing = false;
  });
  Lsn first_position = fx.ConfirmedFlush("killloop");
  bool advanced_between_kills = false;
  for (int kill = 0; kill < 5; ++kill) {
    // Long enough for an instance to get acknowledgements and confirm some of them.
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 + 300 * kill));
    advanced_between_kills |= fx.ConfirmedFlush("killloop") > first_position;
    REQUIRE(relay->Kill(SIGKILL).ok());
    REQUIRE(relay->Wait(std::chrono::seconds(10)).ok());
    fx.WaitSlotFree("killloop");
    relay = fx.StartRelay(config);
  }
  writer.join();
  auto records = ReadEverySeq(*fx.Reader(), SeqRange(kTotal), std::chrono::seconds(120));
  auto seen = CheckRecords(records);
  int duplicates = 0;
  for (int s = 1; s <= kTotal; ++s) {
    CHECK_MESSAGE(seen.count(s) == 1, "lost seq " << s);
    if (seen.count(s)) duplicates += seen[s] - 1;
  }
  std::set<std::tuple<std::string, int32_t, int64_t>> offsets;
  for (const auto& r : records) offsets.insert({r.topic, r.partition, r.offset});
  CHECK(offsets.size() == records.size());  // each Kafka record read once
  CHECK(advanced_between_kills);
  MESSAGE("kill -9 x5: " << records.size() << " records read for " << kTotal << " rows, "
                         << duplicates << " duplicates");
}

TEST_CASE("a second relay on a held slot waits as a standby and takes over when the holder dies") {
  RelayFixture fx;
  const std::string config = fx.WriteConfig("ha", {{"slot.retry.delay.ms", "300"}});
  auto active = fx.StartRelay(config);
  auto standby = fx.SpawnRelay(config);
  const std::string standby_log = fx.log_path();
  REQUIRE(devtools::WaitForFileContains(standby_log, "standby:", std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  CHECK(standby->Running());
  CHECK(Count(devtools::ReadFile(standby_log), "standby:") == 1);  // logged once, not per check
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(active->Kill(SIGKILL).ok());
  REQUIRE(
      devtools::WaitForFileContains(standby_log, "took over slot 'ha'", std::chrono::seconds(20)));
  fx.Exec("BEGIN;" + InsertEvent(2) + InsertEvent(3) + "COMMIT;");
  auto records = ReadAll(fx, OutboxTopics(), 3);
  auto seen = CheckRecords(records);
  for (int s = 1; s <= 3; ++s) CHECK(seen.count(s) == 1);
}

TEST_CASE("setup problems: one-line errors with their own exit codes") {
  RelayFixture fx;
  auto run = [&](const std::string& slot, const std::map<std::string, std::string>& extra) {
    auto [code, out] = fx.RunCommand({"run", "--config", fx.WriteConfig(slot, extra)});
    return std::make_pair(code, out);
  };
  auto [missing_code, missing_out] = run("absent", {{"slot.create", "false"}});
  CHECK(missing_code == 13);
  CHECK(missing_out.find("slot.create=false") != std::string::npos);

  fx.Exec("CREATE ROLE plain LOGIN");
  auto [role_code, role_out] = run("norole", {{"database.user", "plain"}});
  CHECK(role_code == 11);
  CHECK(role_out.find("ALTER ROLE") != std::string::npos);

  auto [table_code, table_out] = run("notable", {{"table.include.list", "public.missing"}});
  CHECK(table_code == 12);
  CHECK(table_out.find("public.missing") != std::string::npos);

  fx.Exec("SELECT pg_create_logical_replication_slot('other', 'test_decoding')");
  auto [plugin_code, plugin_out] = run("other", {});
  CHECK(plugin_code == 15);

  auto [auth_code, auth_out] = run("auth", {{"database.user", "nobody"}});
  CHECK(auth_code == 3);
  CHECK(auth_out.find("refused the connection") != std::string::npos);
  // The REST API line, then one error line: no retry loop for a refusal.
  CHECK(Count(auth_out, "\n") <= 3);
}

TEST_CASE("an invalidated slot is named as such") {
  RelayFixture fx;
  // A tiny WAL allowance lets the server invalidate a slot nobody reads.
  fx.Exec("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
  fx.Exec("SELECT pg_reload_conf()");
  fx.Exec("SELECT pg_create_logical_replication_slot('stale', 'wal2json')");
  for (int i = 0; i < 6; ++i) {
    fx.Exec(
        "INSERT INTO unrelated (filler) SELECT repeat('y', 1000) FROM generate_series(1, 20000)");
    fx.Exec("SELECT pg_switch_wal()");
    fx.Exec("CHECKPOINT");
  }
  REQUIRE(fx.Value("SELECT wal_status FROM pg_replication_slots WHERE slot_name='stale'") ==
          "lost");
  auto [code, out] = fx.RunCommand({"run", "--config", fx.WriteConfig("stale", {})});
  CHECK(code == 22);  // removed WAL has its own exit code; 14 is for the other causes
  CHECK(out.find("was invalidated (wal_status lost)") != std::string::npos);
  CHECK(out.find("max_slot_wal_keep_size") != std::string::npos);
}

TEST_CASE("wal_level below logical is named with the fix") {
  devtools::PgSandboxOptions opts;
  opts.extra_settings = {"wal_level=replica"};
  auto pg = devtools::PgSandbox::Start(opts);
  REQUIRE(pg.ok());
  RelayFixture fx;  // for Kafka and a config; point it at the replica-level server
  auto [code, out] =
      fx.RunCommand({"run", "--config",
                     fx.WriteConfig("lvl", {{"database.port", std::to_string((*pg)->port())}})});
  CHECK(code == 10);
  CHECK(out.find("wal_level is 'replica'") != std::string::npos);
}

TEST_CASE("SIGTERM with the broker gone exits in bounded time without confirming") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("termdown", {{"shutdown.timeout.ms", "2000"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.WaitConfirmed("termdown", fx.CurrentWal(), std::chrono::seconds(10));
  const Lsn before = fx.ConfirmedFlush("termdown");
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  fx.Exec("BEGIN;" + InsertEvent(2) + InsertEvent(3) + "COMMIT;");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(std::chrono::seconds(15));
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(code.ok());
  CHECK(*code == 0);
  CHECK(took < std::chrono::seconds(8));
  CHECK(Log(fx).find("still unacknowledged after shutdown.timeout.ms=2000") != std::string::npos);
  CHECK(fx.ConfirmedFlush("termdown") == before);
}

TEST_CASE("slot.drop.on.stop keeps the slot while records are unacknowledged") {
  RelayFixture fx;
  const std::string config =
      fx.WriteConfig("dropkeep", {{"shutdown.timeout.ms", "2000"}, {"slot.drop.on.stop", "true"}});
  auto relay = fx.StartRelay(config);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.WaitConfirmed("dropkeep", fx.CurrentWal(), std::chrono::seconds(10));
  const Lsn before = fx.ConfirmedFlush("dropkeep");
  const std::string slot_count =
      "SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = 'dropkeep'";
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  fx.Exec("BEGIN;" + InsertEvent(2) + InsertEvent(3) + "COMMIT;");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(std::chrono::seconds(30));
  REQUIRE(code.ok());
  CHECK(*code == 0);
  CHECK(fx.Value(slot_count) == "1");
  CHECK(fx.ConfirmedFlush("dropkeep") == before);
  const std::string log = Log(fx);
  CHECK_MESSAGE(
      log.find("keeping replication slot 'dropkeep': 2 records are still unacknowledged") !=
          std::string::npos,
      log);
  CHECK(log.find("stays confirmed at LSN " + before.ToString()) != std::string::npos);

  // Once everything is acknowledged the slot is dropped, as configured.
  REQUIRE(fx.kafka().SetBrokerUp(1).ok());
  fx.WaitSlotFree("dropkeep");
  auto again = fx.StartRelay(config);
  auto seen = CheckRecords(ReadAll(fx, OutboxTopics(), 3));
  CHECK(seen.count(2) == 1);
  CHECK(seen.count(3) == 1);
  fx.WaitConfirmed("dropkeep", fx.CurrentWal(), std::chrono::seconds(10));
  REQUIRE(again->Kill(SIGTERM).ok());
  code = again->Wait(std::chrono::seconds(30));
  REQUIRE(code.ok());
  CHECK(*code == 0);
  CHECK(fx.Value(slot_count) == "0");
}

TEST_CASE("a second SIGTERM while the stop waits for Kafka exits at once without confirming") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("term2", {{"shutdown.timeout.ms", "120000"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.WaitConfirmed("term2", fx.CurrentWal(), std::chrono::seconds(10));
  const Lsn before = fx.ConfirmedFlush("term2");
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  fx.Exec("BEGIN;" + InsertEvent(2) + InsertEvent(3) + "COMMIT;");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(
      devtools::WaitForFileContains(fx.log_path(), "received SIGTERM", std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  REQUIRE(relay->Running());  // waiting up to shutdown.timeout.ms for Kafka
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(std::chrono::seconds(30));
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  CHECK(*code == 128 + SIGTERM);
  CHECK(took < std::chrono::seconds(20));
  CHECK(Log(fx).find("received SIGTERM again: exiting at once") != std::string::npos);
  CHECK(fx.ConfirmedFlush("term2") == before);
}

TEST_CASE("the whole stop is bounded by shutdown.timeout.ms even when PostgreSQL stops answering") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("hang", {{"shutdown.timeout.ms", "2000"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.WaitConfirmed("hang", fx.CurrentWal(), std::chrono::seconds(10));
  const Lsn before = fx.ConfirmedFlush("hang");
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  fx.Exec("BEGIN;" + InsertEvent(2) + "COMMIT;");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // A walsender that no longer answers: ending the COPY stream then waits for it forever.
  const pid_t walsender = std::stoi(
      fx.Value("SELECT active_pid::text FROM pg_replication_slots WHERE slot_name = 'hang'"));
  REQUIRE(kill(walsender, SIGSTOP) == 0);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(std::chrono::seconds(40));
  const auto took = std::chrono::steady_clock::now() - start;
  kill(walsender, SIGCONT);
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  CHECK(*code == 128 + SIGTERM);
  CHECK(took < std::chrono::seconds(30));
  CHECK(Log(fx).find("the stop did not finish within shutdown.timeout.ms=2000") !=
        std::string::npos);
  CHECK(fx.ConfirmedFlush("hang") == before);
}

TEST_CASE("retriable produce errors are retried by the producer before any policy applies") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("retry", {}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.kafka().PushProduceErrors(4, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
  fx.Exec("BEGIN;" + InsertEvent(2) + InsertEvent(3) + InsertEvent(4) + "COMMIT;");
  auto records = ReadAll(fx, OutboxTopics(), 4);
  auto seen = CheckRecords(records);
  for (int s = 1; s <= 4; ++s) CHECK(seen[s] == 1);
  CHECK(relay->Running());
}

TEST_CASE("errors.retry.timeout bounds how long a record is retried; then the relay stops") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("timeout", {{"errors.retry.timeout", "2000"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.WaitConfirmed("timeout", fx.CurrentWal(), std::chrono::seconds(10));
  const Lsn before = fx.ConfirmedFlush("timeout");
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  fx.Exec("BEGIN;" + InsertEvent(2) + "COMMIT;");
  auto code = relay->Wait(std::chrono::seconds(30));
  REQUIRE(code.ok());
  CHECK(*code == 5);
  CHECK(Log(fx).find("00000000-0000-4000-8000-000000000002") != std::string::npos);
  CHECK(fx.ConfirmedFlush("timeout") == before);
}

namespace {

// librdkafka raises a fatal error when a broker answers an idempotent producer's batch with
// OUT_OF_ORDER_SEQUENCE_NUMBER while earlier records of the partition were acknowledged.
// Rows 1, 52 and 103 share topic and key, so they go to the same partition.
void ProduceWithFatalError(RelayFixture& fx, const std::string& slot, Lsn* confirmed_before) {
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.WaitConfirmed(slot, fx.CurrentWal(), std::chrono::seconds(10));
  *confirmed_before = fx.ConfirmedFlush(slot);
  fx.kafka().PushProduceErrors(1, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
  fx.Exec("BEGIN;" + InsertEvent(52) + InsertEvent(103) + "COMMIT;");
}

}  // namespace

TEST_CASE("a librdkafka fatal error stops the relay with its reason and exit 5, whatever "
          "errors.tolerance says") {
  std::string tolerance;
  SUBCASE("errors.tolerance=none") { tolerance = "none"; }
  SUBCASE("errors.tolerance=all") { tolerance = "all"; }
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("fatal", {{"errors.tolerance", tolerance}}));
  Lsn before;
  ProduceWithFatalError(fx, "fatal", &before);
  auto code = relay->Wait(std::chrono::seconds(30));
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  CHECK(*code == 5);
  const std::string log = Log(fx);
  CHECK_MESSAGE(
      log.find("librdkafka fatal error OUT_OF_ORDER_SEQUENCE_NUMBER") != std::string::npos, log);
  CHECK(log.find("stays confirmed at LSN " + before.ToString()) != std::string::npos);
  CHECK(log.find("skipping") == std::string::npos);
  CHECK(fx.ConfirmedFlush("fatal") == before);
}

TEST_CASE("a librdkafka fatal error: the REST API shows FAILED with the reason, /healthz 503") {
  RelayFixture fx;
  auto config = LoadConnectorConfig(fx.WriteConfig("fatalrest", {}));
  REQUIRE(config.ok());
  auto settings = ParseRelaySettings(*config);
  REQUIRE(settings.ok());
  // In this process: FAILED is only visible between the failure and the exit of `walrelay run`.
  boost::asio::io_context io(1);
  auto built = Relay::Create(std::move(settings).value(), io);
  REQUIRE_MESSAGE(built.ok(), built.status().ToString());
  Relay& relay = **built;
  RestApi api(relay, "127.0.0.1:0");
  std::promise<Status> result;
  auto finished = result.get_future();
  std::thread loop([&] { result.set_value(relay.Run()); });
  for (int i = 0; i < 200 && !relay.streaming(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  REQUIRE(relay.streaming());
  Lsn before;
  ProduceWithFatalError(fx, "fatalrest", &before);
  const bool stopped = finished.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!stopped) relay.RequestStop();
  loop.join();
  REQUIRE(stopped);
  const Status status = finished.get();
  CHECK(status.code() == ErrorCode::kKafka);
  const HttpResponse connector = api.Handle({"GET", "/connectors/itest-fatalrest/status"});
  CHECK(connector.status == 200);
  CHECK_MESSAGE(connector.body.find("\"FAILED\"") != std::string::npos, connector.body);
  CHECK(connector.body.find("librdkafka fatal error OUT_OF_ORDER_SEQUENCE_NUMBER") !=
        std::string::npos);
  const HttpResponse health = api.Handle({"GET", "/healthz"});
  CHECK(health.status == 503);
  CHECK(health.body.find("librdkafka fatal error") != std::string::npos);
  CHECK(fx.ConfirmedFlush("fatalrest") == before);
}

TEST_CASE("errors.tolerance=none: a bad row stops the relay naming the row and its LSN") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig(
      "strict", {{"transforms.outbox.table.fields.additional.placement", "nosuchcolumn:header"}}));
  const Lsn before = fx.InsertBeforeCommit(InsertEvent(1));
  auto code = relay->Wait(std::chrono::seconds(20));
  REQUIRE(code.ok());
  CHECK(*code == 6);
  const std::string log = Log(fx);
  CHECK(log.find("nosuchcolumn") != std::string::npos);
  CHECK(log.find("00000000-0000-4000-8000-000000000001") != std::string::npos);
  CHECK(log.find("at LSN ") != std::string::npos);
  CHECK(fx.ConfirmedFlush("strict") <= before);
}

TEST_CASE("errors.tolerance=all with a dead-letter topic: bad rows go there, the stream goes on") {
  RelayFixture fx;
  // A table whose columns may be NULL, so rows can lack a routing value.
  fx.Exec("CREATE TABLE public.loose (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, "
          "type text, payload jsonb, region text)");
  fx.Exec("INSERT INTO loose VALUES ('00000000-0000-4000-8000-000000000000', 'Warmup', 'w', 't', "
          "'{}', 'eu')");
  auto relay = fx.StartRelay(fx.WriteConfig(
      "dlq", {{"table.include.list", "public.loose"},
              {"errors.tolerance", "all"},
              {"errors.deadletterqueue.topic.name", "walrelay-dlq"},
              {"kafka.message.max.bytes", "20000"},
              {"transforms.outbox.table.fields.additional.placement", "region:header"}}));
  const std::string row = "INSERT INTO loose VALUES ('00000000-0000-4000-8000-0000000000";
  fx.Exec(row + "01', NULL, 'k1', 'NoRoute', '{\"n\": 1}', 'eu')");  // null routing value
  fx.Exec(
      row +
      "02', 'Big', 'k2', 'Huge', jsonb_build_object('blob', repeat('x', 30000)), 'eu')");  // too
                                                                                           // large
  // A topic name Kafka forbids, refused as TOPIC_EXCEPTION before it reaches the broker. (A
  // topic error injected into the mock's metadata would be refused either so or, when the
  // metadata answer comes first, as an unknown topic, which stops the relay.)
  fx.Exec(row + "03', 'Bad Name!', 'k3', 'Denied', '{\"n\": 3}', 'eu')");
  fx.Exec(row + "04', 'Order', 'k4', 'Fine', '{\"n\": 4}', 'eu')");  // good row
  fx.Exec("ALTER TABLE loose DROP COLUMN region");
  fx.Exec(row + "05', 'Order', 'k5', 'NoRegion', '{\"n\": 5}')");  // placement column missing
  fx.Exec(row + "06', 'Order', 'k6', 'AlsoNoRegion', '{\"n\": 6}')");
  const Lsn end = fx.CurrentWal();

  auto dead = ReadAll(fx, {"walrelay-dlq"}, 5);
  REQUIRE_MESSAGE(dead.size() == 5, Log(fx));
  // Transform failures carry the row as its change event, keyed by primary key; produce
  // failures carry the routed record with its `id` header.
  auto find = [&](const std::string& id) -> const ConsumedRecord& {
    for (const auto& r : dead) {
      if (HeaderValue(r, "id") == id || r.key.value_or("") == "{\"id\":\"" + id + "\"}") return r;
    }
    FAIL("no dead letter for " << id);
    return dead.front();
  };
  const auto& no_route = find("00000000-0000-4000-8000-000000000001");
  CHECK(HeaderValue(no_route, "__connect.errors.stage") == "TRANSFORMATION");
  CHECK(HeaderValue(no_route, "__walrelay.errors.table") == "public.loose");
  CHECK(HeaderValue(no_route, "__walrelay.errors.lsn").find('/') != std::string::npos);
  CHECK(HeaderValue(no_route, "__connect.errors.exception.message").find("aggregatetype") !=
        std::string::npos);
  CHECK(no_route.value.value_or("").find("\"op\":\"c\"") != std::string::npos);
  const auto& big = find("00000000-0000-4000-8000-000000000002");
  CHECK(HeaderValue(big, "__connect.errors.stage") == "KAFKA_PRODUCE");
  CHECK(HeaderValue(big, "__connect.errors.topic") == "outbox.event.Big");
  CHECK(HeaderValue(big, "__walrelay.errors.event.id") == "00000000-0000-4000-8000-000000000002");
  CHECK(big.value.value_or("?").empty());
  CHECK(HeaderValue(big, "__walrelay.errors.value.truncated").find("removed") != std::string::npos);
  const auto& refused = find("00000000-0000-4000-8000-000000000003");
  CHECK(HeaderValue(refused, "__connect.errors.topic") == "outbox.event.Bad Name!");
  CHECK(HeaderValue(refused, "__connect.errors.exception.class.name") == "TOPIC_EXCEPTION");
  CHECK(refused.value.value_or("") == "{\"n\": 3}");
  for (const char* id :
       {"00000000-0000-4000-8000-000000000005", "00000000-0000-4000-8000-000000000006"}) {
    CHECK(HeaderValue(find(id), "__connect.errors.exception.message").find("region") !=
          std::string::npos);
  }

  auto good = ReadAll(fx, {"outbox.event.Order"}, 1);
  REQUIRE(good.size() == 1);
  CHECK(HeaderValue(good[0], "id") == "00000000-0000-4000-8000-000000000004");
  CHECK(relay->Running());
  CHECK(fx.WaitConfirmed("dlq", end, std::chrono::seconds(20)) >= end);
}

// The mock cluster accepts any topic name, so a record refused here was refused by walrelay.
TEST_CASE(
    "a topic name Kafka forbids, errors.tolerance=none: the relay stops naming id, topic and LSN") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("badtopic", {}));
  const Lsn before = fx.CurrentWal();
  fx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
          "('00000000-0000-4000-8000-0000000000b1', 'Bad Name!', 'k1', 'T', '{}')");
  auto code = relay->Wait(std::chrono::seconds(20));
  REQUIRE_MESSAGE(code.ok(), "the relay kept running:\n" << Log(fx));
  CHECK(*code == 5);
  const std::string log = Log(fx);
  CHECK_MESSAGE(
      log.find("Kafka refuses the topic name 'outbox.event.Bad Name!'") != std::string::npos, log);
  CHECK(log.find("event id 00000000-0000-4000-8000-0000000000b1") != std::string::npos);
  CHECK(std::regex_search(log, std::regex("at LSN [0-9A-F]+/[0-9A-F]+")));
  CHECK_MESSAGE(fx.ConfirmedFlush("badtopic") <= before, log);
}

TEST_CASE(
    "a topic name Kafka forbids, errors.tolerance=all: the record goes to the dead-letter topic") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig(
      "badtopicdlq",
      {{"errors.tolerance", "all"}, {"errors.deadletterqueue.topic.name", "walrelay-dlq"}}));
  fx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
          "('00000000-0000-4000-8000-0000000000b2', '" +
          std::string(250, 'L') +
          "', 'k2', 'T', "
          "'{\"n\": 2}')");
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn end = fx.CurrentWal();
  auto dead = ReadAll(fx, {"walrelay-dlq"}, 1);
  REQUIRE_MESSAGE(dead.size() == 1, Log(fx));
  CHECK(HeaderValue(dead[0], "__walrelay.errors.event.id") ==
        "00000000-0000-4000-8000-0000000000b2");
  CHECK(HeaderValue(dead[0], "__connect.errors.stage") == "KAFKA_PRODUCE");
  CHECK(HeaderValue(dead[0], "__connect.errors.exception.class.name") == "TOPIC_EXCEPTION");
  CHECK(HeaderValue(dead[0], "__connect.errors.topic") == "outbox.event." + std::string(250, 'L'));
  CHECK(HeaderValue(dead[0], "__connect.errors.exception.message").find("more than 249") !=
        std::string::npos);
  CHECK(dead[0].value.value_or("") == "{\"n\": 2}");
  auto good = ReadAll(fx, {"outbox.event.Customer"}, 1);
  REQUIRE(good.size() == 1);
  CHECK(HeaderValue(good[0], "id") == "00000000-0000-4000-8000-000000000001");
  CHECK(fx.WaitConfirmed("badtopicdlq", end, std::chrono::seconds(20)) >= end);
  CHECK(relay->Running());
}

TEST_CASE("errors.tolerance=all without a dead-letter topic logs the row and skips it") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig(
      "skip", {{"errors.tolerance", "all"},
               {"transforms.outbox.table.fields.additional.placement", "nosuchcolumn:header"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn end = fx.CurrentWal();
  CHECK(fx.WaitConfirmed("skip", end, std::chrono::seconds(20)) >= end);
  CHECK(relay->Running());
  const std::string log = Log(fx);
  CHECK(log.find("skipping") != std::string::npos);
  CHECK(log.find("00000000-0000-4000-8000-000000000001") != std::string::npos);
}

TEST_CASE("errors.tolerance=all skips only what fails on its own: a producer-wide refusal stops "
          "without confirming") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("wide", {{"errors.tolerance", "all"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  fx.WaitConfirmed("wide", fx.CurrentWal(), std::chrono::seconds(10));
  const Lsn before = fx.ConfirmedFlush("wide");
  // Not a fault of the record: every later record for the topic would be refused as well, so
  // skipping it would skip, and confirm, all of them.
  fx.kafka().PushProduceErrors(1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
  fx.Exec("BEGIN;" + InsertEvent(2) + "COMMIT;");
  auto code = relay->Wait(std::chrono::seconds(30));
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  CHECK(*code == 5);
  const std::string log = Log(fx);
  CHECK(log.find("00000000-0000-4000-8000-000000000002") != std::string::npos);
  CHECK(log.find("skipping") == std::string::npos);
  CHECK(fx.ConfirmedFlush("wide") == before);
}

TEST_CASE("a non-JSON payload with table.expand.json.payload=true passes through, as in Debezium") {
  RelayFixture fx;
  fx.Exec("CREATE TABLE public.textbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, "
          "type text, payload text)");
  auto relay = fx.StartRelay(
      fx.WriteConfig("expand", {{"table.include.list", "public.textbox"},
                                {"transforms.outbox.table.expand.json.payload", "true"}}));
  fx.Exec("INSERT INTO textbox VALUES ('" + kEventId + "', 'Note', 'n1', 'T', 'not {json')");
  auto records = ReadAll(fx, {"outbox.event.Note"}, 1);
  REQUIRE(records.size() == 1);
  CHECK(records[0].value.value_or("") == "not {json");
  CHECK(Log(fx).find(kEventId) != std::string::npos);  // the warning names the event
}

TEST_CASE("status updates keep the connection alive while Kafka is down and the queue is full") {
  RelayFixture fx;
  // A walsender that hears nothing for 2 s drops the connection; the relay stops reading while
  // its queue is full, so only its status timer keeps the connection alive.
  fx.Exec("ALTER SYSTEM SET wal_sender_timeout = '2s'");
  fx.Exec("SELECT pg_reload_conf()");
  auto relay = fx.StartRelay(fx.WriteConfig("alive", {{"max.queue.size", "10"}}));
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(ReadAll(fx, {"outbox.event.Customer"}, 1).size() == 1);
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  std::string sql;
  for (int s = 2; s <= 200; ++s) sql += "BEGIN;" + InsertEvent(s) + "COMMIT;";
  fx.Exec(sql);
  std::this_thread::sleep_for(std::chrono::seconds(8));  // four walsender timeouts
  CHECK(Log(fx).find("lost the replication connection") == std::string::npos);
  CHECK(fx.Value("SELECT active::text FROM pg_replication_slots WHERE slot_name='alive'") ==
        "true");
  REQUIRE(fx.kafka().SetBrokerUp(1).ok());
  auto records = ReadAll(fx, OutboxTopics(), 200);
  auto seen = CheckRecords(records);
  for (int s = 1; s <= 200; ++s) CHECK_MESSAGE(seen.count(s) == 1, "missing seq " << s);
  CHECK(Log(fx).find("lost the replication connection") == std::string::npos);
}

TEST_CASE("bounded memory: a large backlog through a slow broker stays under 64 MB resident") {
  RelayFixture fx;
  // 100,000 rows of about 300-byte payloads wait in the slot before the relay starts.
  fx.Exec("SELECT pg_create_logical_replication_slot('backlog', 'wal2json')");
  fx.Exec(
      "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
      "SELECT gen_random_uuid(), 'Order', 'k' || (g % 100), 'Backlog', "
      "jsonb_build_object('seq', g, 'data', repeat('z', 280)) FROM generate_series(1, 100000) g");
  const Lsn end = fx.CurrentWal();
  REQUIRE(fx.kafka().SetBrokerRtt(1, 20).ok());
  auto relay = fx.StartRelay(fx.WriteConfig("backlog", {}));
  long peak_kib = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (fx.ConfirmedFlush("backlog") < end && std::chrono::steady_clock::now() < deadline) {
    peak_kib = std::max(peak_kib, ProcKib(relay->pid(), "VmHWM"));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  peak_kib = std::max(peak_kib, ProcKib(relay->pid(), "VmHWM"));
  CHECK(fx.ConfirmedFlush("backlog") >= end);
  MESSAGE("peak RSS of the relay for a 100,000-row backlog through a 20 ms-RTT broker: "
          << peak_kib / 1024 << " MiB");
  CHECK(peak_kib > 0);
  CHECK(peak_kib < 64 * 1024);
}

// Converters run after the transform chain (convert/converters.h).
TEST_CASE("converters: the configured classes write key, value and headers") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig(
      "converted", {{"key.converter", "org.apache.kafka.connect.json.JsonConverter"},
                    {"key.converter.schemas.enable", "false"},
                    {"value.converter", "org.apache.kafka.connect.storage.StringConverter"},
                    {"header.converter", "org.apache.kafka.connect.json.JsonConverter"},
                    {"header.converter.schemas.enable", "false"}}));
  fx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
          "('00000000-0000-4000-8000-0000000000c1', 'Order', 'k\"1', 'T', '{\"a\": \"😀\"}')");
  auto records = ReadAll(fx, {"outbox.event.Order"}, 1);
  REQUIRE_MESSAGE(records.size() == 1, Log(fx));
  CHECK(records[0].key == "\"k\\\"1\"");
  CHECK(records[0].value == "{\"a\": \"😀\"}");
  CHECK(HeaderValue(records[0], "id") == "\"00000000-0000-4000-8000-0000000000c1\"");
}

TEST_CASE("converters: a record the converter cannot write stops the relay (none) or is "
          "dead-lettered with walrelay's bytes (all)") {
  RelayFixture fx;
  {
    auto unknown = fx.SpawnRelay(
        fx.WriteConfig("avro", {{"value.converter", "io.confluent.connect.avro.AvroConverter"}}));
    auto code = unknown->Wait(std::chrono::seconds(20));
    REQUIRE(code.ok());
    CHECK(*code == 2);
    CHECK(Log(fx).find("'value.converter' is 'io.confluent.connect.avro.AvroConverter'") !=
          std::string::npos);
  }
  auto insert = [](const std::string& id) {
    return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
           "('00000000-0000-4000-8000-0000000000" +
           id + "', 'Order', 'k2', 'T', '{\"n\": 2}')";
  };
  {
    auto relay = fx.StartRelay(fx.WriteConfig(
        "bytesnone",
        {{"value.converter", "org.apache.kafka.connect.converters.ByteArrayConverter"}}));
    const Lsn before = fx.CurrentWal();
    fx.Exec(insert("c2"));
    auto code = relay->Wait(std::chrono::seconds(20));
    REQUIRE_MESSAGE(code.ok(), "the relay kept running:\n" << Log(fx));
    CHECK(*code == 6);
    const std::string log = Log(fx);
    CHECK_MESSAGE(
        log.find("'value.converter' (org.apache.kafka.connect.converters.ByteArrayConverter) "
                 "cannot write the value of a record for topic 'outbox.event.Order' "
                 "(table public.outbox, LSN ") != std::string::npos,
        log);
    CHECK(fx.ConfirmedFlush("bytesnone") <= before);
  }
  auto relay = fx.StartRelay(fx.WriteConfig(
      "bytesall", {{"value.converter", "org.apache.kafka.connect.converters.ByteArrayConverter"},
                   {"key.converter", "org.apache.kafka.connect.json.JsonConverter"},
                   {"errors.tolerance", "all"},
                   {"errors.deadletterqueue.topic.name", "walrelay-dlq"}}));
  fx.Exec(insert("c3"));
  const Lsn end = fx.CurrentWal();
  auto dead = ReadAll(fx, {"walrelay-dlq"}, 1);
  REQUIRE_MESSAGE(dead.size() == 1, Log(fx));
  CHECK(HeaderValue(dead[0], "__connect.errors.stage") == "VALUE_CONVERTER");
  CHECK(HeaderValue(dead[0], "__connect.errors.class.name") ==
        "org.apache.kafka.connect.converters.ByteArrayConverter");
  CHECK(dead[0].value == "{\"n\": 2}");  // walrelay's own bytes, not converted
  CHECK(dead[0].key == "k2");
  CHECK(fx.WaitConfirmed("bytesall", end, std::chrono::seconds(20)) >= end);
  CHECK(relay->Running());
}
