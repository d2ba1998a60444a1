// plugin.name=pgoutput end to end, against a real PostgreSQL 15 and librdkafka's mock Kafka
// cluster: a Debezium config with default publication settings on a fresh database, each
// publication.autocreate.mode and its errors, the catalog lookups the relay hands the decoder,
// and parity: the same rows through a wal2json slot and a pgoutput slot give the same records.
#include <rapidjson/document.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using devtools::ConsumedRecord;

namespace {

// Waits for a relay that should stop on its own; returns its exit code and log.
std::pair<int, std::string> ExitOf(RelayFixture& fx, devtools::ChildProcess& relay) {
  auto code = relay.Wait(std::chrono::seconds(30));
  REQUIRE_MESSAGE(code.ok(), code.status().ToString());
  return {*code, devtools::ReadFile(fx.log_path())};
}

void Stop(devtools::ChildProcess& relay) {
  REQUIRE(relay.Kill(SIGTERM).ok());
  auto code = relay.Wait(std::chrono::seconds(20));
  REQUIRE(code.ok());
  CHECK(*code == 0);
}

std::string PublicationTables(RelayFixture& fx, const std::string& publication) {
  return fx.Value("SELECT coalesce(string_agg(schemaname || '.' || tablename, ',' ORDER BY 1), "
                  "'') FROM pg_publication_tables WHERE pubname = '" +
                  publication + "'");
}

// Reads every record of `topics` until `expected` arrived, then a little longer.
std::vector<ConsumedRecord> ReadAll(devtools::TopicReader& reader,
                                    const std::vector<std::string>& topics, size_t expected) {
  auto records = reader.ReadAtLeast(topics, expected, std::chrono::seconds(30));
  REQUIRE(records.ok());
  auto extra = reader.Poll(std::chrono::milliseconds(1500));
  records->insert(records->end(), extra.begin(), extra.end());
  return std::move(records).value();
}

}  // namespace

TEST_CASE("pgoutput: a Debezium config with default publication settings runs on a fresh "
          "database: slot and publication are created and every outbox row arrives once, in "
          "key order") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  // No publication keys: publication.name=dbz_publication, publication.autocreate.mode=all_tables.
  auto relay = fx.StartRelay(fx.WriteConfig("pgout", {}));
  CHECK(fx.Value("SELECT plugin FROM pg_replication_slots WHERE slot_name = 'pgout'") ==
        "pgoutput");
  CHECK(fx.Value("SELECT puballtables::text FROM pg_publication WHERE pubname = "
                 "'dbz_publication'") == "true");

  const int kTotal = 3000;
  int seq = 0;
  std::string sql;
  for (int i = 0; i < 500; ++i) {  // single-row transactions, noise in between
    sql += "BEGIN;" + InsertEvent(++seq) + "COMMIT;";
    if (i % 50 == 0) sql += "INSERT INTO unrelated (filler) VALUES (repeat('x', 500));";
  }
  for (int t = 0; t < 50; ++t) {  // 20-row transactions
    sql += "BEGIN;";
    for (int i = 0; i < 20; ++i) sql += InsertEvent(++seq);
    sql += "COMMIT; INSERT INTO unrelated (filler) VALUES ('between');";
  }
  fx.Exec(sql);
  sql = "BEGIN;";
  while (seq < kTotal) sql += InsertEvent(++seq);  // one 1,500-row transaction
  sql += "DELETE FROM outbox; COMMIT;";            // delete after insert: deletes are not relayed
  fx.Exec(sql);
  const Lsn end = fx.CurrentWal();

  auto reader = fx.Reader();
  auto records = ReadAll(*reader, OutboxTopics(), kTotal);
  CHECK(records.size() == static_cast<size_t>(kTotal));
  auto seen = CheckRecords(records);
  CHECK(seen.size() == static_cast<size_t>(kTotal));
  for (const auto& entry : seen) {
    const auto& s = entry.first;
    const auto& n = entry.second;
    CHECK_MESSAGE(n == 1, "seq " << s << " seen " << n << " times");
  }
  const Lsn confirmed = fx.WaitConfirmed("pgout", end, std::chrono::seconds(20));
  CHECK_MESSAGE(confirmed >= end, confirmed.ToString() << " < " << end.ToString());
  Stop(*relay);
}

TEST_CASE("pgoutput: publication.autocreate.mode=filtered creates the publication for the "
          "included tables and follows table.include.list when it changes") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  fx.Exec("CREATE TABLE public.outbox2 (LIKE public.outbox INCLUDING ALL)");
  auto relay =
      fx.StartRelay(fx.WriteConfig("filtered", {{"publication.name", "outbox_pub"},
                                                {"publication.autocreate.mode", "filtered"}}));
  CHECK(PublicationTables(fx, "outbox_pub") == "public.outbox");
  Stop(*relay);

  // A second table in the list: the publication is set to both at the next start.
  relay = fx.StartRelay(
      fx.WriteConfig("filtered", {{"publication.name", "outbox_pub"},
                                  {"publication.autocreate.mode", "filtered"},
                                  {"table.include.list", "public.outbox,public.outbox2"}}));
  CHECK(PublicationTables(fx, "outbox_pub") == "public.outbox,public.outbox2");
  CHECK(devtools::ReadFile(fx.log_path()).find("publication 'outbox_pub' updated") !=
        std::string::npos);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  std::string second = InsertEvent(2);
  second.replace(second.find("INTO outbox"), 11, "INTO outbox2");
  fx.Exec("BEGIN;" + second + "COMMIT;");
  auto reader = fx.Reader();
  CHECK(CheckRecords(ReadAll(*reader, OutboxTopics(), 2)).size() == 2);
  Stop(*relay);
}

TEST_CASE("pgoutput: publication.autocreate.mode=disabled needs the publication (exit 17) with "
          "the outbox table in it (exit 18), and uses it as it is") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  const auto config = fx.WriteConfig("disabled", {{"publication.autocreate.mode", "disabled"}});
  auto missing = ExitOf(fx, *fx.SpawnRelay(config));
  auto& missing_code = missing.first;
  auto& missing_log = missing.second;
  CHECK(missing_code == 17);
  CHECK_MESSAGE(
      missing_log.find("publication 'dbz_publication' does not exist") != std::string::npos,
      missing_log);
  CHECK(fx.Value("SELECT count(*) FROM pg_publication") == "0");
  CHECK(fx.Value("SELECT count(*) FROM pg_replication_slots") == "0");

  fx.Exec("CREATE PUBLICATION dbz_publication FOR TABLE public.unrelated");
  auto lacks = ExitOf(fx, *fx.SpawnRelay(config));
  auto& lacks_code = lacks.first;
  auto& lacks_log = lacks.second;
  CHECK(lacks_code == 18);
  CHECK_MESSAGE(lacks_log.find("does not publish table public.outbox") != std::string::npos,
                lacks_log);
  auto validate = fx.RunCommand({"validate", "--config", config});
  auto& validate_code = validate.first;
  auto& validate_out = validate.second;
  CHECK(validate_code == 18);
  CHECK_MESSAGE(validate_out.find("publication:") != std::string::npos, validate_out);

  fx.Exec("ALTER PUBLICATION dbz_publication ADD TABLE public.outbox");
  auto relay = fx.StartRelay(config);
  CHECK(PublicationTables(fx, "dbz_publication") == "public.outbox,public.unrelated");
  fx.Exec("BEGIN;" + InsertEvent(1) + "INSERT INTO unrelated (filler) VALUES ('x'); COMMIT;");
  auto reader = fx.Reader();
  CHECK(CheckRecords(ReadAll(*reader, OutboxTopics(), 1)).size() == 1);
  Stop(*relay);
}

TEST_CASE("pgoutput: publication.autocreate.mode=no_tables creates an empty publication; the "
          "relay stops (exit 18) until the outbox table is added") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  const auto config = fx.WriteConfig("notables", {{"publication.autocreate.mode", "no_tables"}});
  auto result = ExitOf(fx, *fx.SpawnRelay(config));
  auto& code = result.first;
  auto& log = result.second;
  CHECK(code == 18);
  CHECK_MESSAGE(log.find("ALTER PUBLICATION \"dbz_publication\" ADD TABLE \"public\".\"outbox\"") !=
                    std::string::npos,
                log);
  CHECK(fx.Value("SELECT count(*) FROM pg_publication WHERE NOT puballtables") == "1");
  CHECK(PublicationTables(fx, "dbz_publication").empty());

  fx.Exec("ALTER PUBLICATION dbz_publication ADD TABLE public.outbox");
  auto relay = fx.StartRelay(config);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  auto reader = fx.Reader();
  CHECK(CheckRecords(ReadAll(*reader, OutboxTopics(), 1)).size() == 1);
  Stop(*relay);
}

TEST_CASE("pgoutput: skipped.operations scopes the publication walrelay creates, as Debezium "
          "3.6 does: updates and deletes of the outbox never leave PostgreSQL") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  auto relay = fx.StartRelay(fx.WriteConfig("skipops", {{"skipped.operations", "u,d,t"}}));
  const int port = RestPort(fx);
  CHECK(fx.Value("SELECT concat_ws(',', puballtables, pubinsert, pubupdate, pubdelete, "
                 "pubtruncate) FROM pg_publication WHERE pubname = 'dbz_publication'") ==
        "t,t,f,f,f");
  CHECK(devtools::ReadFile(fx.log_path()).find("it publishes all tables (insert)") !=
        std::string::npos);
  // Remove-after-insert, and an update the router would warn about: neither is decoded.
  fx.Exec("BEGIN;" + InsertEvent(1) + InsertEvent(2) + InsertEvent(3) +
          "UPDATE outbox SET type = 'Changed'; DELETE FROM outbox; COMMIT;");
  auto reader = fx.Reader();
  CHECK(CheckRecords(ReadAll(*reader, OutboxTopics(), 3)).size() == 3);
  const std::string metrics = Http(port, "GET", "/metrics").body;
  CHECK(Metric(metrics, "walrelay_source_records_total{table=\"public.outbox\"}") == 3.0);
  CHECK(Metric(metrics, "walrelay_source_changes_skipped_total") == 0.0);
  CHECK(devtools::ReadFile(fx.log_path()).find("record dropped") == std::string::npos);
  Stop(*relay);
}

TEST_CASE("pgoutput: skipped.operations on a publication it does not change: the relay skips "
          "those changes itself and says how to scope it; filtered mode sets its operations") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  fx.Exec("CREATE PUBLICATION outbox_pub FOR TABLE public.outbox");
  auto relay = fx.StartRelay(fx.WriteConfig("skipown", {{"publication.name", "outbox_pub"},
                                                        {"publication.autocreate.mode", "disabled"},
                                                        {"skipped.operations", "u"}}));
  const int port = RestPort(fx);
  CHECK(devtools::ReadFile(fx.log_path())
            .find("publishes insert, update, delete, truncate, and skipped.operations asks for "
                  "'insert, delete, truncate'") != std::string::npos);
  fx.Exec("BEGIN;" + InsertEvent(1) + InsertEvent(2) + "COMMIT;");
  fx.Exec("UPDATE outbox SET type = 'Changed'");
  auto reader = fx.Reader();
  CHECK(CheckRecords(ReadAll(*reader, OutboxTopics(), 2)).size() == 2);
  const std::string metrics = Http(port, "GET", "/metrics").body;
  CHECK(Metric(metrics, "walrelay_source_changes_skipped_total") == 2.0);
  // Without the skip the router would warn about each update and drop it.
  CHECK(devtools::ReadFile(fx.log_path()).find("record dropped") == std::string::npos);
  Stop(*relay);

  relay = fx.StartRelay(fx.WriteConfig("skipown", {{"publication.name", "outbox_pub"},
                                                   {"publication.autocreate.mode", "filtered"},
                                                   {"skipped.operations", "u"}}));
  CHECK(fx.Value("SELECT concat_ws(',', pubinsert, pubupdate, pubdelete, pubtruncate) FROM "
                 "pg_publication WHERE pubname = 'outbox_pub'") == "t,f,t,t");
  CHECK(devtools::ReadFile(fx.log_path())
            .find("its operations set to 'insert, delete, truncate' (was: insert, update, "
                  "delete, truncate)") != std::string::npos);
  Stop(*relay);
}

TEST_CASE("pgoutput: a publication the user may not create is exit 19; a slot of another "
          "plugin is exit 15 naming both plugins") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  // REPLICATION but not superuser: FOR ALL TABLES (the default mode) needs a superuser.
  fx.Exec("CREATE ROLE relay_user LOGIN REPLICATION");
  auto result =
      ExitOf(fx, *fx.SpawnRelay(fx.WriteConfig("nopriv", {{"database.user", "relay_user"}})));
  auto& code = result.first;
  auto& log = result.second;
  CHECK(code == 19);
  CHECK_MESSAGE(
      log.find("cannot create publication 'dbz_publication' FOR ALL TABLES") != std::string::npos,
      log);
  CHECK(fx.Value("SELECT count(*) FROM pg_publication") == "0");

  // test_decoding: in every build of the version matrix, where wal2json is only in Debian's.
  fx.Exec("SELECT pg_create_logical_replication_slot('w2j', 'test_decoding')");
  auto wrong = ExitOf(fx, *fx.SpawnRelay(fx.WriteConfig("w2j", {})));
  auto& wrong_code = wrong.first;
  auto& wrong_log = wrong.second;
  CHECK(wrong_code == 15);
  CHECK_MESSAGE(wrong_log.find("uses plugin 'test_decoding', not pgoutput as 'plugin.name' "
                               "says") != std::string::npos,
                wrong_log);
}

namespace {

// Everything on `topics` until nothing new has come for 3 s (at most 60 s).
std::vector<ConsumedRecord> ReadUntilQuiet(devtools::TopicReader& reader,
                                           const std::vector<std::string>& topics,
                                           size_t at_least) {
  auto records = reader.ReadAtLeast(topics, at_least, std::chrono::seconds(60));
  REQUIRE(records.ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto more = reader.Poll(std::chrono::seconds(3));
    if (more.empty()) break;
    records->insert(records->end(), more.begin(), more.end());
  }
  std::sort(records->begin(), records->end(), [](const ConsumedRecord& a, const ConsumedRecord& b) {
    return std::tie(a.topic, a.partition, a.offset) < std::tie(b.topic, b.partition, b.offset);
  });
  return std::move(records).value();
}

// A record as text, for comparing: everything a consumer sees. The envelope's top-level
// ts_ms/ts_us/ts_ns are the time the relay wrote the event (Debezium's too), so they differ
// between any two runs and are set to 0; source.ts_ms and the record's timestamp are the
// commit time and compared.
std::string Describe(const ConsumedRecord& r) {
  std::string value = r.value.value_or("(null)");
  static const std::regex kProcessingTime("\"ts_ms\":[0-9]+,\"ts_us\":[0-9]+,\"ts_ns\":[0-9]+\\}$");
  if (r.topic.starts_with("itest."))
    value = std::regex_replace(value, kProcessingTime, "\"ts_ms\":0,\"ts_us\":0,\"ts_ns\":0}");
  std::string text = r.topic + "/" + std::to_string(r.partition) +
                     " key=" + r.key.value_or("(null)") + " ts=" + std::to_string(r.timestamp_ms) +
                     " value=" + value;
  for (const auto& h : r.headers) text += " header " + h.key + "=" + h.value.value_or("(null)");
  return text;
}

}  // namespace

TEST_CASE("parity: the same rows through a wal2json slot and a pgoutput slot give the same "
          "Kafka records, with the EventRouter and in envelope mode") {
  RelayFixture fx;
  auto second_kafka = devtools::MockKafka::Start(1);
  REQUIRE(second_kafka.ok());
  const std::string pgoutput_kafka = (*second_kafka)->bootstrap_servers();
  // Every column type the outbox and the other tests use, and more; a domain, arrays, NaN.
  fx.Exec("CREATE DOMAIN positive_int AS integer CHECK (VALUE > 0);"
          "CREATE TABLE public.typed (id integer PRIMARY KEY, b bigint, s smallint, "
          "n numeric(10,2), nn numeric, r real, d double precision, flag boolean, t text, "
          "vc varchar(20), ch char(3), bin bytea, j json, jb jsonb, u uuid, ts timestamp, "
          "tstz timestamptz, dt date, tm time, iv interval, ints integer[], texts text[], "
          "ip inet, pos positive_int);"
          "CREATE TABLE public.full_ident (id integer PRIMARY KEY, note text);"
          "ALTER TABLE public.full_ident REPLICA IDENTITY FULL;"
          // Out of line and uncompressed, so an update that keeps it leaves it unchanged-TOASTed.
          "ALTER TABLE public.outbox ALTER COLUMN payload SET STORAGE EXTERNAL;");
  // A regex entry too: public.late_full is created after the relays connected, so its key
  // comes from the bounded catalog query rather than the snapshot read at connect.
  const std::string envelope_tables =
      "public.outbox,public.typed,public.full_ident,public\\\\.late.*";
  auto wal2json_router = fx.StartRelay(fx.WriteConfig("w_router", {}));
  auto wal2json_envelope =
      fx.StartRelay(fx.WriteConfig("w_envelope", {{"table.include.list", envelope_tables}}, false));
  fx.UsePlugin("pgoutput");
  auto pgoutput_router =
      fx.StartRelay(fx.WriteConfig("p_router", {{"kafka.bootstrap.servers", pgoutput_kafka}}));
  auto pgoutput_envelope = fx.StartRelay(fx.WriteConfig(
      "p_envelope",
      {{"kafka.bootstrap.servers", pgoutput_kafka}, {"table.include.list", envelope_tables}},
      false));

  std::string sql = "CREATE TABLE public.late_full (id integer PRIMARY KEY, note text);"
                    "ALTER TABLE public.late_full REPLICA IDENTITY FULL;"
                    "INSERT INTO late_full VALUES (7, 'late');";
  for (int seq = 1; seq <= 60; ++seq) {
    sql += (seq % 10 == 1 ? "BEGIN;" : "") + InsertEvent(seq) + (seq % 10 == 0 ? "COMMIT;" : "");
  }
  sql += "BEGIN;" + InsertEvent(61) + "DELETE FROM outbox WHERE aggregatetype = 'Order'; COMMIT;";
  sql += "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
         "('00000000-0000-4000-8000-0000000000ff', 'Customer', 'big', 'Big', "
         "jsonb_build_object('seq', 62, 'blob', repeat('x', 6000)));"
         "UPDATE outbox SET type = 'BigChanged' WHERE aggregateid = 'big';"
         "INSERT INTO typed VALUES (1, 9007199254740993, -7, 12345.67, 'NaN', 1.5, "
         "'-Infinity', true, 'ünï \"q\" \\ ok', 'short', 'ab', '\\x00ff10', '{\"a\": [1, 2]}', "
         "'{\"b\": null}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29 12:34:56.789', "
         "'2024-02-29 12:34:56.789+02', '2024-02-29', '23:59:59', '1 day 02:03:04', "
         "'{1,NULL,3}', '{\"a b\",c}', '192.168.0.1/24', 5);"
         "INSERT INTO typed (id) VALUES (2);"
         "UPDATE typed SET t = 'changed', n = NULL WHERE id = 1;"
         "DELETE FROM typed WHERE id = 2;"
         "INSERT INTO full_ident VALUES (1, 'one'), (2, 'two');"
         "UPDATE full_ident SET note = 'uno' WHERE id = 1;"
         "DELETE FROM full_ident WHERE id = 2;";
  fx.Exec(sql);
  // Every relay has everything acknowledged once its slot is confirmed to here: only then is
  // "nothing more arrives" a sign that all records were read, whatever the machine's load.
  const Lsn end = fx.CurrentWal();
  for (const char* slot : {"w_router", "w_envelope", "p_router", "p_envelope"}) {
    const Lsn confirmed = fx.WaitConfirmed(slot, end, std::chrono::seconds(120));
    REQUIRE_MESSAGE(confirmed >= end, slot << " confirmed only " << confirmed.ToString());
  }

  auto wal2json_reader = fx.Reader();
  auto pgoutput_reader_made = devtools::TopicReader::Create(pgoutput_kafka);
  REQUIRE(pgoutput_reader_made.ok());
  auto& pgoutput_reader = **pgoutput_reader_made;
  std::vector<std::string> topics = OutboxTopics();
  for (const char* t : {"itest.public.outbox", "itest.public.typed", "itest.public.full_ident",
                        "itest.public.late_full"})
    topics.push_back(t);
  // At least the 62 router records and the envelope's 62 outbox inserts; deletes, updates and
  // the other tables follow and are read until nothing more comes.
  const size_t expected = 62 + 62;
  auto from_wal2json = ReadUntilQuiet(*wal2json_reader, topics, expected);
  auto from_pgoutput = ReadUntilQuiet(pgoutput_reader, topics, expected);
  CHECK(from_wal2json.size() >= expected);
  REQUIRE(from_wal2json.size() == from_pgoutput.size());
  std::set<std::string> topics_seen;
  for (size_t i = 0; i < from_wal2json.size(); ++i) {
    CHECK(Describe(from_pgoutput[i]) == Describe(from_wal2json[i]));
    topics_seen.insert(from_wal2json[i].topic);
  }
  CHECK(topics_seen.size() == topics.size());

  // The catalog lookups at work: the unchanged TOASTed payload is Debezium's placeholder with
  // both plugins, and REPLICA IDENTITY FULL keeps the primary key as the record key.
  bool placeholder = false, full_key = false, late_key = false;
  for (const auto& r : from_wal2json) {
    if (r.topic == "itest.public.outbox" && r.value &&
        r.value->find("\"type\":\"BigChanged\"") != std::string::npos) {
      placeholder = r.value->find("__debezium_unavailable_value") != std::string::npos;
    }
    if (r.topic == "itest.public.full_ident" && r.key) full_key |= *r.key == "{\"id\":1}";
    if (r.topic == "itest.public.late_full" && r.key) late_key |= *r.key == "{\"id\":7}";
  }
  CHECK(placeholder);
  CHECK(full_key);
  CHECK(late_key);

  for (auto* relay : {&wal2json_router, &wal2json_envelope, &pgoutput_router, &pgoutput_envelope})
    Stop(**relay);
}
