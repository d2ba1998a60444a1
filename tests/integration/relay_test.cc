// End-to-end behaviour of `walrelay run` against a real PostgreSQL 15 (wal2json) and
// librdkafka's mock Kafka cluster: what consumers read, and what the slot confirms.
#include <rapidjson/document.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <set>

#include "outbox_events.h"
#include "relay_fixture.h"

using namespace walrelay;
using devtools::ConsumedRecord;
using walrelay::testing::RelayFixture;
using namespace walrelay::testing;

TEST_CASE(
    "10,000 outbox rows in 1-, 20- and 5,000-row transactions arrive exactly once, in key order") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("bulk", {}));
  const int kTotal = 10000;
  int seq = 0;
  std::string sql;
  // 2,000 single-row transactions, with writes to an unrelated table in between.
  for (int i = 0; i < 2000; ++i) {
    sql += "BEGIN;" + InsertEvent(++seq) + "COMMIT;";
    if (i % 100 == 0) sql += "INSERT INTO unrelated (filler) VALUES (repeat('x', 500));";
  }
  fx.Exec(sql);
  sql.clear();
  // 150 transactions of 20 rows.
  for (int t = 0; t < 150; ++t) {
    sql += "BEGIN;";
    for (int i = 0; i < 20; ++i) sql += InsertEvent(++seq);
    sql += "COMMIT; INSERT INTO unrelated (filler) VALUES ('between');";
  }
  fx.Exec(sql);
  sql = "BEGIN;";
  while (seq < kTotal) sql += InsertEvent(++seq);  // one 5,000-row transaction
  sql += "DELETE FROM outbox; COMMIT;";            // deletes are ignored by the router
  fx.Exec(sql);
  const Lsn end = fx.CurrentWal();

  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), kTotal, std::chrono::seconds(90));
  REQUIRE(records.ok());
  // Read a little longer: anything beyond kTotal would be a duplicate.
  auto extra = reader->Poll(std::chrono::seconds(2));
  records->insert(records->end(), extra.begin(), extra.end());
  CHECK(records->size() == static_cast<size_t>(kTotal));
  auto seen = CheckRecords(*records);
  CHECK(seen.size() == static_cast<size_t>(kTotal));
  for (const auto& entry : seen) {
    const auto& s = entry.first;
    const auto& n = entry.second;
    CHECK_MESSAGE(n == 1, "seq " << s << " seen " << n << " times");
  }

  const Lsn confirmed = fx.WaitConfirmed("bulk", end, std::chrono::seconds(20));
  CHECK_MESSAGE(confirmed >= end, confirmed.ToString() << " < " << end.ToString());

  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(std::chrono::seconds(20));
  REQUIRE(code.ok());
  CHECK(*code == 0);
  CHECK(devtools::ReadFile(fx.log_path()).find("stopped; slot 'bulk' confirmed up to LSN") !=
        std::string::npos);
}

TEST_CASE("with the broker down the slot never confirms an unacknowledged transaction") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("brokerdown", {}));
  // Warm up so topics exist and the producer is connected.
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  auto reader = fx.Reader();
  REQUIRE(reader->ReadAtLeast({"outbox.event.Customer"}, 1, std::chrono::seconds(30))->size() == 1);
  fx.WaitConfirmed("brokerdown", fx.CurrentWal(), std::chrono::seconds(10));

  // An observer slot tells the exact end LSN of the first transaction written during the outage.
  fx.Exec("SELECT pg_create_logical_replication_slot('observer', 'wal2json')");
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  std::string sql = "BEGIN;";
  for (int s = 2; s <= 50; ++s) sql += InsertEvent(s);
  fx.Exec(sql + "COMMIT;");
  for (int t = 0; t < 20; ++t) {
    std::string more = "BEGIN;";
    for (int i = 0; i < 10; ++i) more += InsertEvent(51 + t * 10 + i);
    fx.Exec(more + "COMMIT;");
  }
  const Lsn end = fx.CurrentWal();
  auto changes = fx.pg().Query(
      "SELECT lsn::text, xid::text, data FROM pg_logical_slot_peek_changes('observer', NULL, NULL, "
      "'format-version', '2', 'add-tables', 'public.outbox')");
  REQUIRE(changes.ok());
  std::string first_xid;
  Lsn first_commit_end;
  for (const auto& row : *changes) {
    if (first_xid.empty() &&
        row[2]->find("00000000-0000-4000-8000-000000000002") != std::string::npos)
      first_xid = *row[1];
    if (!first_xid.empty() && *row[1] == first_xid && row[2]->rfind("{\"action\":\"C\"", 0) == 0) {
      first_commit_end = *Lsn::Parse(*row[0]);
      break;
    }
  }
  REQUIRE(first_commit_end.valid());
  // Several status intervals pass; the slot must stay before the first outage commit.
  for (int i = 0; i < 30; ++i) {
    const Lsn confirmed = fx.ConfirmedFlush("brokerdown");
    REQUIRE_MESSAGE(confirmed < first_commit_end, "confirmed " << confirmed.ToString()
                                                               << " reached "
                                                               << first_commit_end.ToString());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(relay->Running());

  REQUIRE(fx.kafka().SetBrokerUp(1).ok());
  // This reader already consumed seq 1; 249 more are due.
  auto records = reader->ReadAtLeast(OutboxTopics(), 249, std::chrono::seconds(60));
  REQUIRE(records.ok());
  std::set<int> seqs;
  for (const auto& r : *records) seqs.insert(SeqOf(r));
  for (int s = 2; s <= 250; ++s) CHECK_MESSAGE(seqs.count(s) == 1, "missing seq " << s);
  const Lsn confirmed = fx.WaitConfirmed("brokerdown", end, std::chrono::seconds(20));
  CHECK(confirmed >= end);
}

TEST_CASE("kill -9 during a stream and restart: nothing is lost") {
  RelayFixture fx;
  const std::string config = fx.WriteConfig("killed", {});
  auto relay = fx.StartRelay(config);
  const int kTotal = 3000;
  std::thread writer([&] {
    for (int batch = 0; batch < 30; ++batch) {
      std::string sql;
      for (int i = 1; i <= 100; ++i) sql += "BEGIN;" + InsertEvent(batch * 100 + i) + "COMMIT;";
      fx.pg().Exec(sql).ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  REQUIRE(relay->Kill(SIGKILL).ok());
  auto code = relay->Wait(std::chrono::seconds(10));
  REQUIRE(code.ok());
  CHECK(*code == 128 + SIGKILL);
  // The server notices the dead walsender client; wait until the slot is free again.
  for (int i = 0;
       i < 100 &&
       fx.Value("SELECT active::text FROM pg_replication_slots WHERE slot_name='killed'") == "true";
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  relay = fx.StartRelay(config);
  writer.join();

  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), kTotal, std::chrono::seconds(90));
  REQUIRE(records.ok());
  auto extra = reader->Poll(std::chrono::seconds(2));
  records->insert(records->end(), extra.begin(), extra.end());
  auto seen = CheckRecords(*records);
  int duplicates = 0;
  for (int s = 1; s <= kTotal; ++s) {
    CHECK_MESSAGE(seen.count(s) == 1, "lost seq " << s);
    if (seen.count(s)) duplicates += seen[s] - 1;
  }
  MESSAGE("records read: " << records->size() << ", duplicates after kill -9: " << duplicates);
}

TEST_CASE("an idle outbox does not pin WAL while another table writes 20 MB") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("idle", {}));
  const Lsn start = fx.ConfirmedFlush("idle");
  for (int i = 0; i < 20; ++i) {
    fx.Exec("INSERT INTO unrelated (filler) SELECT repeat(md5(g::text), 32) FROM "
            "generate_series(1, 1000) g");
  }
  const Lsn end = fx.CurrentWal();
  CHECK(end.value() - start.value() > 20u * 1000 * 1000);
  const Lsn confirmed = fx.WaitConfirmed("idle", end, std::chrono::seconds(30));
  CHECK_MESSAGE(confirmed >= end,
                "slot stuck at " << confirmed.ToString() << ", WAL at " << end.ToString());
  // And with no writes at all, keepalives alone keep it at the server's position.
  fx.Exec("SELECT pg_switch_wal()");
  const Lsn after_switch = fx.CurrentWal();
  CHECK(fx.WaitConfirmed("idle", after_switch, std::chrono::seconds(30)) >= after_switch);
}

TEST_CASE("a regex table.include.list relays the tables it matches and skips the rest") {
  // wal2json streams every table when the list holds a regex; rows of `unrelated` (which the
  // router could not route) must be skipped, not fail the relay.
  RelayFixture fx;
  auto relay =
      // JSON-escaped: the config holds public\.out.*
      fx.StartRelay(fx.WriteConfig("regex", {{"table.include.list", "public\\\\.out.*"}}));
  std::string sql;
  for (int s = 1; s <= 30; ++s) {
    sql += "BEGIN;" + InsertEvent(s) + "INSERT INTO unrelated (filler) VALUES ('between'); COMMIT;";
  }
  fx.Exec(sql);
  const Lsn end = fx.CurrentWal();
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), 30, std::chrono::seconds(30));
  REQUIRE(records.ok());
  const std::string log = devtools::ReadFile(fx.log_path());
  INFO("relay log:\n" << log);
  CHECK(records->size() == 30);
  CHECK(fx.WaitConfirmed("regex", end, std::chrono::seconds(20)) >= end);
  CHECK(relay->Running());
  CHECK(log.find("filtered by regex") != std::string::npos);
}

TEST_CASE("without transforms each change is a Debezium change event keyed by primary key") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("plain", {}, /*with_router=*/false));
  fx.Exec("BEGIN;" + InsertEvent(7) +
          "UPDATE outbox SET type = 'Changed'; DELETE FROM outbox; COMMIT;");
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast({"itest.public.outbox"}, 4, std::chrono::seconds(30));
  REQUIRE(records.ok());
  REQUIRE(records->size() == 4);
  // tombstones.on.delete (default true): the delete is followed by its key with a null value.
  CHECK(records->back().key.value_or("") == "{\"id\":\"00000000-0000-4000-8000-000000000007\"}");
  CHECK(!records->back().value.has_value());
  records->pop_back();
  std::vector<std::string> ops;
  for (const auto& r : *records) {
    CHECK(r.key.value_or("") == "{\"id\":\"00000000-0000-4000-8000-000000000007\"}");
    REQUIRE(r.value.has_value());
    rapidjson::Document doc;
    doc.Parse(r.value->c_str());
    REQUIRE(!doc.HasParseError());
    ops.push_back(doc["op"].GetString());
    CHECK(std::string(doc["source"]["table"].GetString()) == "outbox");
    CHECK(std::string(doc["source"]["connector"].GetString()) == "postgresql");
    // As Debezium: no before for an update that keeps the key (REPLICA IDENTITY DEFAULT);
    // a delete's before has every column, null beyond the key.
    if (ops.back() == "u") CHECK(doc["before"].IsNull());
    if (ops.back() == "d") {
      REQUIRE(doc["before"].IsObject());
      CHECK(doc["before"].HasMember("aggregatetype"));
      CHECK(doc["before"]["aggregatetype"].IsNull());
      CHECK(std::string(doc["before"]["id"].GetString()) == "00000000-0000-4000-8000-000000000007");
    }
  }
  CHECK(ops == std::vector<std::string>{"c", "u", "d"});
}

TEST_CASE("validate reports the server, slot and table, and names what is wrong") {
  RelayFixture fx;
  auto ok = fx.RunCommand({"validate", "--config", fx.WriteConfig("checked", {})});
  auto& ok_code = ok.first;
  auto& ok_out = ok.second;
  CHECK_MESSAGE(ok_code == 0, ok_out);
  CHECK(ok_out.find("wal_level:") != std::string::npos);
  CHECK(ok_out.find("logical") != std::string::npos);
  CHECK(ok_out.find("public.outbox (found)") != std::string::npos);
  CHECK(ok_out.find("does not exist; `run` creates it") != std::string::npos);
  CHECK(ok_out.find("broker(s) reachable") != std::string::npos);

  auto [bad_code, bad_out] = fx.RunCommand(
      {"validate", "--config", fx.WriteConfig("checked", {{"table.include.list", "public.nope"}})});
  CHECK(bad_code == 12);
  CHECK(bad_out.find("table public.nope") != std::string::npos);

  // A regex entry names no table: it is not looked up, and said to be a regex.
  auto regex = fx.RunCommand(
      {"validate", "--config",
       fx.WriteConfig("checked", {{"table.include.list", "public.outbox,inventory\\\\..*"}})});
  auto& regex_code = regex.first;
  auto& regex_out = regex.second;
  CHECK_MESSAGE(regex_code == 0, regex_out);
  CHECK(regex_out.find("public.outbox (found)") != std::string::npos);
  CHECK(regex_out.find("inventory\\..* (a regex") != std::string::npos);

  auto [cfg_code, cfg_out] = fx.RunCommand(
      {"validate", "--config", fx.WriteConfig("checked", {{"database.port", "not-a-port"}})});
  CHECK(cfg_code == 2);
  CHECK(cfg_out.find("database.port") != std::string::npos);

  // A slot with another plugin is refused by run too, with the same message.
  fx.Exec("SELECT pg_create_logical_replication_slot('wrongplugin', 'test_decoding')");
  auto run = fx.RunCommand({"run", "--config", fx.WriteConfig("wrongplugin", {})});
  auto& run_code = run.first;
  auto& run_out = run.second;
  CHECK(run_code == 15);
  CHECK_MESSAGE(run_out.find("uses plugin 'test_decoding', not wal2json") != std::string::npos,
                run_out);
}

TEST_CASE("a record Kafka rejects stops the relay without confirming its transaction") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("rejected", {{"kafka.message.max.bytes", "2000"}}));
  const Lsn before = fx.InsertBeforeCommit(
      "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
      "('00000000-0000-4000-8000-00000000beef', 'Order', 'o-1', 'Big', "
      "jsonb_build_object('blob', repeat('x', 5000)))");
  auto code = relay->Wait(std::chrono::seconds(30));
  REQUIRE(code.ok());
  CHECK(*code == 5);
  const std::string log = devtools::ReadFile(fx.log_path());
  CHECK_MESSAGE(log.find("00000000-0000-4000-8000-00000000beef") != std::string::npos, log);
  CHECK(fx.ConfirmedFlush("rejected") <= before);
}

TEST_CASE("logical.decoding.work.mem keeps a large transaction in memory for this relay only") {
  RelayFixture fx;
  // A tiny server-wide limit, so a 3,000-row transaction spills to disk at the default.
  fx.Exec("ALTER SYSTEM SET logical_decoding_work_mem = '64kB'");
  fx.Exec("SELECT pg_reload_conf()");
  auto spilling = fx.StartRelay(fx.WriteConfig("spill_default", {}));
  auto in_memory =
      fx.StartRelay(fx.WriteConfig("spill_raised", {{"logical.decoding.work.mem", "64MB"}}));
  std::string txn = "BEGIN;";
  for (int i = 0; i < 3000; ++i) txn += InsertEvent(i);
  fx.Exec(txn + "COMMIT;");
  const Lsn end = fx.CurrentWal();
  for (const char* slot : {"spill_default", "spill_raised"}) {
    const Lsn confirmed = fx.WaitConfirmed(slot, end, std::chrono::seconds(60));
    REQUIRE_MESSAGE(confirmed >= end, slot << " stuck at " << confirmed.ToString());
  }
  auto spilled = [&fx](const std::string& slot) {
    return std::stoll(fx.Value(
        "SELECT spill_bytes FROM pg_stat_replication_slots WHERE slot_name = '" + slot + "'"));
  };
  CHECK(spilled("spill_default") > 0);
  CHECK(spilled("spill_raised") == 0);
  CHECK(fx.Value("SHOW logical_decoding_work_mem") == "64kB");  // the server's own setting stays

  // The relay re-executed itself so that GnuTLS skipped its load-time initialisation.
  std::string environ = ReadWholeFile("/proc/" + std::to_string(in_memory->pid()) + "/environ");
  std::replace(environ.begin(), environ.end(), '\0', '\n');
  CHECK(environ.find("GNUTLS_NO_IMPLICIT_INIT=1\n") != std::string::npos);
}

TEST_CASE(
    "the slot is confirmed as soon as the relay has caught up, not at the next periodic update") {
  RelayFixture fx;
  // A periodic update would come only after a minute, and the server asks for one only after
  // half its wal_sender_timeout (30 s): a confirmation within seconds is the caught-up one.
  auto relay = fx.StartRelay(fx.WriteConfig("prompt", {{"status.update.interval.ms", "60000"}}));
  for (int round = 0; round < 3; ++round) {
    fx.Exec("BEGIN;" + InsertEvent(round * 2) + InsertEvent(round * 2 + 1) + "COMMIT;");
    const Lsn end = fx.CurrentWal();
    const auto started = std::chrono::steady_clock::now();
    const Lsn confirmed = fx.WaitConfirmed("prompt", end, std::chrono::seconds(10));
    CHECK_MESSAGE(confirmed >= end, "round " << round << ": slot at " << confirmed.ToString()
                                             << ", commit ends at " << end.ToString());
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(10));
  }
}
