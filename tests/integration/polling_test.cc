// source.mode=polling against a real PostgreSQL and librdkafka's mock cluster: rows arrive in
// order and are deleted (or stamped) only after Kafka acknowledged them; the records are byte
// for byte those of the replication path; bad rows follow errors.tolerance and the dead-letter
// topic as there; one relay polls at a time and a standby takes over; wrong keys fail at start
// naming the key, table and column. Delivery through kill -9 with three instances on a real
// broker: polling_broker_test.cc.
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <libpq-fe.h>
#include <pwd.h>
#include <unistd.h>

#include "devtools/child_process.h"
#include "devtools/free_port.h"
#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

void AddPollingColumns(RelayFixture& fx) {
  fx.Exec(ReadWholeFile(std::string(WALRELAY_SOURCE_DIR) + "/docs/outbox-polling.sql"));
}

std::map<std::string, std::string> Polling(std::map<std::string, std::string> overrides = {}) {
  overrides.emplace("source.mode", "polling");
  overrides.emplace("polling.interval.ms", "50");
  overrides.emplace("polling.lease.retry.ms", "200");
  return overrides;
}

// Starts a polling relay and waits until it polls (or, with `standby`, waits for the lease).
std::unique_ptr<devtools::ChildProcess> StartPolling(RelayFixture& fx, const std::string& config,
                                                     bool standby = false) {
  auto child = fx.SpawnRelay(config);
  const bool started = devtools::WaitForFileContains(
      fx.log_path(), standby ? "waiting as a standby" : "polling public.", 20s);
  REQUIRE_MESSAGE(started, Log(fx));
  return child;
}

std::vector<ConsumedRecord> ReadRecords(RelayFixture& fx, const std::vector<std::string>& topics,
                                        size_t expected) {
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(topics, expected, 60s);
  REQUIRE(records.ok());
  auto extra = reader->Poll(1500ms);
  records->insert(records->end(), extra.begin(), extra.end());
  return std::move(records).value();
}

int64_t Rows(RelayFixture& fx, const std::string& where = "") {
  return std::stoll(fx.Value("SELECT count(*) FROM outbox" + where));
}

// Everything a consumer sees of a record but its topic and offset.
using RecordBytes = std::tuple<int32_t, std::optional<std::string>, std::optional<std::string>,
                               std::vector<std::pair<std::string, std::string>>, int64_t>;
std::map<std::string, RecordBytes> ById(const std::vector<ConsumedRecord>& records) {
  std::map<std::string, RecordBytes> out;
  for (const auto& r : records) {
    std::vector<std::pair<std::string, std::string>> headers;
    for (const auto& h : r.headers) headers.emplace_back(h.key, h.value.value_or("(null)"));
    out[HeaderValue(r, "id")] = {r.partition, r.key, r.value, headers, r.timestamp_ms};
  }
  return out;
}

}  // namespace

TEST_CASE("polling: every row arrives once and in key order; a row is deleted only after Kafka "
          "acknowledged its record") {
  RelayFixture fx;
  AddPollingColumns(fx);
  auto relay =
      StartPolling(fx, fx.WriteConfig("poll", Polling({{"polling.batch.size", "100"},
                                                       {"log.progress.interval.ms", "500"}})));

  // 1,000 events in 10-row transactions: ten full batches and the rest.
  for (int batch = 0; batch < 10; ++batch) {
    std::string sql;
    for (int i = 1; i <= 100; ++i) {
      const int seq = batch * 100 + i;
      sql += (i % 10 == 1 ? "BEGIN;" : "") + InsertEvent(seq) + (i % 10 == 0 ? "COMMIT;" : "");
    }
    fx.Exec(sql);
  }
  auto records = ReadRecords(fx, OutboxTopics(), 1000);
  auto seen = CheckRecords(records);
  CHECK(seen.size() == 1000);
  CHECK(records.size() == 1000);  // a relay that is not disturbed repeats nothing
  CHECK(devtools::WaitForFileContains(fx.log_path(), "records/s acked", 5s));
  CHECK(Eventually([&] { return Rows(fx) == 0; }, 10s));

  // With the broker down nothing is acknowledged, so nothing may be deleted.
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  fx.Exec("BEGIN;" + InsertEvent(1001) + InsertEvent(1002) + "COMMIT;");
  std::this_thread::sleep_for(3s);
  CHECK(Rows(fx) == 2);
  REQUIRE(fx.kafka().SetBrokerUp(1).ok());
  CHECK(Eventually([&] { return Rows(fx) == 0; }, 30s));
  auto after = ReadRecords(fx, OutboxTopics(), 1002);
  auto all = CheckRecords(after);
  CHECK(all.count(1001) == 1);
  CHECK(all.count(1002) == 1);

  // A column dropped under the running relay: it reads the table's columns again and goes on.
  fx.Exec("ALTER TABLE outbox DROP COLUMN created_at");
  fx.Exec("BEGIN;" + InsertEvent(1003) + "COMMIT;");
  auto later = ReadRecords(fx, OutboxTopics(), 1003);
  CHECK(CheckRecords(later).count(1003) == 1);
  CHECK(Eventually([&] { return Rows(fx) == 0; }, 10s));
  CHECK(relay->Running());
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(20s);
  REQUIRE(code.ok());
  CHECK(*code == 0);
}

TEST_CASE("polling: a read that finds four batches in flight reads again once one is marked") {
  RelayFixture fx;
  AddPollingColumns(fx);
  // Slow acknowledgements keep four batches in flight past the interval, so the timer's read
  // finds no room; the read after the next mark must happen all the same.
  REQUIRE(fx.kafka().SetBrokerRtt(1, 400).ok());
  auto relay = StartPolling(fx, fx.WriteConfig("room", Polling({{"polling.batch.size", "100"}})));
  std::string sql = "BEGIN;";
  for (int seq = 1; seq <= 350; ++seq) sql += InsertEvent(seq);
  // Reads of 16 (a connection's first, while the rows' size is unknown), 100, 100 and 100 rows:
  // four batches in flight, and 34 rows left for the read after a mark.
  fx.Exec(sql + "COMMIT;");
  std::this_thread::sleep_for(300ms);
  fx.Exec("BEGIN;" + InsertEvent(351) + "COMMIT;");
  auto records = ReadRecords(fx, OutboxTopics(), 351);
  auto seen = CheckRecords(records);
  CHECK(seen.size() == 351);
  CHECK(Eventually([&] { return Rows(fx) == 0; }, 20s));
}

namespace {

// Header columns of the types whose rendering needs the catalog (an enum, an enum array, a
// domain) or is easy to get wrong (numeric, interval, timestamptz), a NOT NULL one among them
// (Connect schemas say `"optional":false` for it), and a bytea payload for ByteArrayConverter.
void AddRenderedColumns(RelayFixture& fx) {
  fx.Exec("CREATE TYPE mood AS ENUM ('happy', 'sad');"
          "CREATE DOMAIN positive_amount AS numeric(12,3) CHECK (VALUE > 0);"
          "ALTER TABLE outbox ADD COLUMN mood mood NOT NULL DEFAULT 'happy',"
          " ADD COLUMN moods mood[], ADD COLUMN amount positive_amount,"
          " ADD COLUMN price numeric(10,2), ADD COLUMN wait interval, ADD COLUMN due timestamptz,"
          " ADD COLUMN payload_bin bytea");
}

// Event `seq` with every rendered column set (some NULL), in the transaction the caller opens.
std::string InsertRenderedEvent(int seq) {
  const std::string& type = kAggregateTypes[seq % 3];
  const std::string key = type + "-" + std::to_string(seq % 17);
  char id[40];
  std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", seq);
  const std::string payload = "jsonb_build_object('seq', " + std::to_string(seq) + ", 'key', '" +
                              key + "', 'text', 'ünï \"q\" \\ ok')";
  const std::string n = std::to_string(seq);
  return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, payload_bin, mood, "
         "moods, amount, price, wait, due) VALUES ('" +
         std::string(id) + "', '" + type + "', '" + key + "', '" + type + "Happened', " + payload +
         ", convert_to(" + payload + "::text, 'UTF8'), '" + (seq % 2 ? "sad" : "happy") + "', " +
         (seq % 5 == 0 ? "NULL" : "'{happy,sad}'") + ", " + n + ".125, " +
         (seq % 4 == 0 ? "NULL" : "-" + n + ".5") + ", '" + n + " days 02:03:04.5', " +
         "'2026-03-29 01:30:00.123456+02'::timestamptz + interval '" + n + " hours');";
}

struct ConverterCase {
  std::string name;
  std::map<std::string, std::string> settings;
};

// Every converter a Kafka Connect user may give: walrelay's own bytes (no converter set), the
// worker's default JsonConverter with and without schemas, StringConverter, and
// ByteArrayConverter on a bytea payload.
std::vector<ConverterCase> EveryConverter() {
  const std::string json = "org.apache.kafka.connect.json.JsonConverter";
  const std::string text = "org.apache.kafka.connect.storage.StringConverter";
  return {
      {"walrelay", {}},
      {"json_schemas",
       {{"key.converter", json}, {"value.converter", json}, {"header.converter", json}}},
      {"json_plain",
       {{"key.converter", json},
        {"value.converter", json},
        {"header.converter", json},
        {"key.converter.schemas.enable", "false"},
        {"value.converter.schemas.enable", "false"},
        {"header.converter.schemas.enable", "false"}}},
      {"string", {{"key.converter", text}, {"value.converter", text}, {"header.converter", text}}},
      {"bytearray",
       {{"key.converter", text},
        {"value.converter", "org.apache.kafka.connect.converters.ByteArrayConverter"},
        {"transforms.outbox.table.field.event.payload", "payload_bin"},
        // No envelope field: the value stays the payload's bytes, not a struct around them.
        {"transforms.outbox.table.fields.additional.placement",
         "type:header:eventType,created_at:header,mood:header,moods:header,amount:header,"
         "price:header,wait:header,due:header"}}},
  };
}

}  // namespace

TEST_CASE("polling: the records are byte for byte those of the replication path (pgoutput), "
          "under every converter") {
  devtools::PgSandboxOptions options;
  // Commit times as the WAL has them, so record timestamps match too.
  options.extra_settings = {"track_commit_timestamp=on"};
  RelayFixture fx(options);
  fx.UsePlugin("pgoutput");
  AddPollingColumns(fx);
  AddRenderedColumns(fx);
  for (const ConverterCase& converter : EveryConverter()) {
    CAPTURE(converter.name);
    auto same = converter.settings;  // a case's own settings win over the common ones
    same.emplace("transforms.outbox.table.fields.additional.placement",
                 "type:header:eventType,aggregateid:envelope:aggregate,created_at:header,"
                 "mood:header,moods:header,amount:header,price:header,wait:header,due:header");
    same.emplace("transforms.outbox.table.expand.json.payload", "false");
    const std::string cdc_prefix = "cdc_" + converter.name + ".";
    const std::string poll_prefix = "poll_" + converter.name + ".";
    auto cdc_overrides = same;
    cdc_overrides["transforms.outbox.route.topic.replacement"] = cdc_prefix + "${routedByValue}";
    auto cdc = fx.StartRelay(fx.WriteConfig("parity_" + converter.name, cdc_overrides));
    std::string sql = "BEGIN;";
    for (int seq = 1; seq <= 30; ++seq)
      sql += InsertRenderedEvent(seq) + (seq % 7 == 0 ? "COMMIT;BEGIN;" : "");
    // Values that test the rendering: NULL payload, characters to escape.
    sql += "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
           "('00000000-0000-4000-8000-0000000000f1', 'Order', 'tab\tand \"quote\"', 'Odd', NULL);"
           "COMMIT;";
    fx.Exec(sql);
    std::vector<std::string> cdc_topics, poll_topics;
    for (const auto& type : kAggregateTypes) {
      cdc_topics.push_back(cdc_prefix + type);
      poll_topics.push_back(poll_prefix + type);
    }
    auto from_slot = ReadRecords(fx, cdc_topics, 31);
    REQUIRE_MESSAGE(from_slot.size() == 31, Log(fx));
    REQUIRE(cdc->Kill(SIGTERM).ok());
    REQUIRE(cdc->Wait(20s).ok());

    auto poll_overrides = Polling(same);
    poll_overrides["transforms.outbox.route.topic.replacement"] = poll_prefix + "${routedByValue}";
    auto poller = StartPolling(fx, fx.WriteConfig("parity_poll_" + converter.name, poll_overrides));
    auto from_table = ReadRecords(fx, poll_topics, 31);
    REQUIRE_MESSAGE(from_table.size() == 31, Log(fx));
    CHECK(Eventually([&] { return Rows(fx) == 0; }, 10s));
    REQUIRE(poller->Kill(SIGTERM).ok());
    REQUIRE(poller->Wait(20s).ok());

    const auto slot_records = ById(from_slot);
    const auto table_records = ById(from_table);
    REQUIRE(slot_records.size() == 31);
    REQUIRE(table_records.size() == 31);
    int same_records = 0;
    for (const auto& entry : slot_records) {
      const auto& id = entry.first;  // named, not bound: clang 14 cannot capture a binding
      const auto& bytes = entry.second;
      auto it = table_records.find(id);
      REQUIRE_MESSAGE(it != table_records.end(), id);
      CHECK_MESSAGE(std::get<0>(it->second) == std::get<0>(bytes), id << " partition");
      CHECK_MESSAGE(std::get<1>(it->second) == std::get<1>(bytes), id << " key");
      CHECK_MESSAGE(std::get<2>(it->second) == std::get<2>(bytes), id << " value");
      CHECK_MESSAGE(std::get<3>(it->second) == std::get<3>(bytes), id << " headers");
      CHECK_MESSAGE(std::get<4>(it->second) == std::get<4>(bytes), id << " timestamp");
      if (it->second == bytes) ++same_records;
    }
    MESSAGE(converter.name << ": " << same_records << " of " << slot_records.size()
                           << " records the same");
    // The topics differ only by the replacement each relay was given.
    for (const auto& r : from_table) CHECK(r.topic.starts_with(poll_prefix));
  }
  // The cases above would pass on records the catalog left out of; these pin what it adds.
  auto reader = fx.Reader();
  auto schemas = reader->ReadAtLeast({"poll_json_schemas.Order"}, 11, 20s);
  REQUIRE(schemas.ok());
  bool pinned = false;
  for (const ConsumedRecord& record : *schemas) {
    // The header converter writes the id as JSON too.
    if (HeaderValue(record, "id").find("00000000-0000-4000-8000-000000000003") == std::string::npos)
      continue;
    pinned = true;
    CHECK_MESSAGE(record.key->find("\"optional\":false") != std::string::npos, *record.key);
    CHECK_MESSAGE(HeaderValue(record, "moods").find("[\"happy\",\"sad\"]") != std::string::npos,
                  HeaderValue(record, "moods"));
  }
  CHECK(pinned);
}

TEST_CASE("polling: reads are bounded in bytes by max.queue.size.in.bytes, so large rows keep "
          "memory small") {
  RelayFixture fx;
  AddPollingColumns(fx);
  // 300 rows of 576 KiB (169 MiB) waiting before the relay starts: a read of
  // polling.batch.size (500) rows would hold all of them at once.
  fx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
          "SELECT gen_random_uuid(), 'Order', 'k' || (i % 7), 'Big', "
          "jsonb_build_object('seq', i, 'blob', repeat(md5(i::text), 18432)) "
          "FROM generate_series(1, 300) AS i");
  auto relay =
      StartPolling(fx, fx.WriteConfig("big", Polling({{"log.progress.interval.ms", "1000"}})));
  long peak_kib = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline && Rows(fx) > 0) {
    peak_kib = std::max(peak_kib, ProcKib(relay->pid(), "VmHWM"));
    std::this_thread::sleep_for(200ms);
  }
  peak_kib = std::max(peak_kib, ProcKib(relay->pid(), "VmHWM"));
  MESSAGE("300 rows of 576 KiB polled with max.queue.size.in.bytes=262144: peak RSS "
          << peak_kib / 1024 << " MiB");
  REQUIRE_MESSAGE(Rows(fx) == 0, Log(fx));  // every record acknowledged, every row marked
  CHECK(relay->Running());
  // The default bound holds about one such row in flight; unbounded, the first read held 169 MiB
  // of rows and the records made from them.
  CHECK(peak_kib < 100 * 1024);
  const std::string metrics = Http(RestPort(fx), "GET", "/metrics", {}, 5s).body;
  CHECK_MESSAGE(
      Metric(metrics, "walrelay_records_acked_total{topic=\"outbox.event.Order\"}") == 300,
      metrics);
}

TEST_CASE("polling: a partitioned outbox table is read and marked through its partitions") {
  RelayFixture fx;
  // docs/outbox.sql's columns, partitioned by the order column: the only partitioning under
  // which a unique index on that column alone can exist.
  const auto create = [&](const std::string& key, const std::string& partition_by) {
    fx.Exec("DROP TABLE outbox; CREATE TABLE outbox (id uuid NOT NULL, aggregatetype "
            "varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, "
            "payload jsonb, created_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'utc'), "
            "seq bigserial NOT NULL, PRIMARY KEY (" +
            key + ")) PARTITION BY RANGE (" + partition_by + ")");
  };
  SUBCASE("partitioned by the order column: every row of every partition arrives once") {
    create("seq", "seq");
    fx.Exec("CREATE TABLE outbox_low PARTITION OF outbox FOR VALUES FROM (MINVALUE) TO (120);"
            "CREATE TABLE outbox_high PARTITION OF outbox FOR VALUES FROM (120) TO (MAXVALUE)");
    auto relay =
        StartPolling(fx, fx.WriteConfig("parted", Polling({{"polling.batch.size", "50"}})));
    std::string sql;
    for (int seq = 1; seq <= 250; ++seq)
      sql += (seq % 10 == 1 ? "BEGIN;" : "") + InsertEvent(seq) + (seq % 10 == 0 ? "COMMIT;" : "");
    fx.Exec(sql);
    auto records = ReadRecords(fx, OutboxTopics(), 250);
    auto seen = CheckRecords(records);
    CHECK(seen.size() == 250);
    CHECK(records.size() == 250);
    CHECK(Eventually([&] { return Rows(fx) == 0; }, 10s));
    CHECK(fx.Value("SELECT count(*) FROM outbox_low") == "0");
    CHECK(fx.Value("SELECT count(*) FROM outbox_high") == "0");
  }
  SUBCASE("partitioned by another column: refused at start, saying how to partition it") {
    create("seq, created_at", "created_at");
    fx.Exec("CREATE TABLE outbox_all PARTITION OF outbox DEFAULT");
    fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
    auto child = fx.SpawnRelay(fx.WriteConfig("parted_time", Polling()));
    auto code = child->Wait(20s);
    REQUIRE_MESSAGE(code.ok(), "the relay did not stop: " << Log(fx));
    CHECK(*code == 2);
    CHECK(Rows(fx) == 1);
    CHECK_MESSAGE(
        Log(fx).find("A partitioned table's unique indexes must hold its partition key: "
                     "partition public.outbox by this column (PARTITION BY RANGE (seq))") !=
            std::string::npos,
        Log(fx));
  }
}

TEST_CASE("polling: a row updated after it was read is relayed again in its new version, never "
          "removed unrelayed") {
  RelayFixture fx;
  AddPollingColumns(fx);
  std::map<std::string, std::string> overrides;
  SUBCASE("polling.mark=delete") {}
  SUBCASE("polling.mark=column") {
    fx.Exec("ALTER TABLE outbox ADD COLUMN published_at timestamptz");
    overrides["polling.mark"] = "column:published_at";
  }
  auto relay = StartPolling(fx, fx.WriteConfig("updated", Polling(overrides)));
  const int port = RestPort(fx);
  // Kafka away: the row is read and its record waits in flight.
  REQUIRE(fx.kafka().SetBrokerDown(1).ok());
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(Eventually(
      [&] {
        return Metric(Http(port, "GET", "/metrics", {}, 5s).body, "walrelay_inflight_records") == 1;
      },
      20s));
  fx.Exec("UPDATE outbox SET payload = jsonb_set(payload, '{text}', '\"updated\"')");
  REQUIRE(fx.kafka().SetBrokerUp(1).ok());
  // The first version's mark leaves the updated row; the next read relays and marks it.
  auto records = ReadRecords(fx, OutboxTopics(), 2);
  REQUIRE(records.size() == 2);
  CHECK(records[0].value->find("ünï") != std::string::npos);
  CHECK(records[1].value->find("\"updated\"") != std::string::npos);
  CHECK(Eventually(
      [&] { return Rows(fx, overrides.empty() ? "" : " WHERE published_at IS NULL") == 0; }, 10s));
  CHECK_MESSAGE(Log(fx).find("were gone, marked, or updated when this relay marked them") !=
                    std::string::npos,
                Log(fx));
}

TEST_CASE("polling: rows removed right after their insert are reported, rows read are not") {
  RelayFixture fx;
  AddPollingColumns(fx);
  auto relay =
      StartPolling(fx, fx.WriteConfig("vanish", Polling({{"polling.unread.check.ms", "1000"}})));
  const std::string warning = "rows were inserted into public.outbox in the last 1 s and this "
                              "relay read none of them";
  // Rows that stay until the relay marks them: read, relayed, never reported.
  for (int seq = 1; seq <= 40; ++seq) {
    fx.Exec("BEGIN;" + InsertEvent(seq) + "COMMIT;");
    std::this_thread::sleep_for(100ms);
  }
  CHECK(ReadRecords(fx, OutboxTopics(), 40).size() == 40);
  std::this_thread::sleep_for(3s);  // idle windows after rows were read
  CHECK_MESSAGE(Log(fx).find(warning) == std::string::npos, Log(fx));
  // An application that deletes its outbox row in the transaction that inserted it, as the
  // replication path allows: no poll ever sees the row.
  const auto until = std::chrono::steady_clock::now() + 5s;
  for (int seq = 41; std::chrono::steady_clock::now() < until; ++seq) {
    fx.Exec("BEGIN;" + InsertEvent(seq) + "DELETE FROM outbox; COMMIT;");
    std::this_thread::sleep_for(100ms);
  }
  CHECK_MESSAGE(devtools::WaitForFileContains(fx.log_path(), warning, 10s), Log(fx));
  CHECK(Log(fx).find("Remove-after-insert loses events here") != std::string::npos);
  const std::string metrics = Http(RestPort(fx), "GET", "/metrics", {}, 5s).body;
  CHECK(Metric(metrics, "walrelay_polling_rows_read_total") == 40);
  CHECK(Metric(metrics, "walrelay_polling_reads_total") > 40);
  CHECK(Metric(metrics, "walrelay_polling_read_seconds_total") > 0);
}

namespace {

// pgbouncer (Debian's package) in front of the fixture's PostgreSQL, with its defaults but for
// `pool_mode` and the lines of `extra`; stopped with the returned process.
std::unique_ptr<devtools::ChildProcess> StartPgBouncer(RelayFixture& fx, const std::string& mode,
                                                       int& port, const std::string& extra = "") {
  const std::string dir = fx.pg().base_dir();
  auto picked = devtools::PickFreePort();
  REQUIRE(picked.ok());
  port = *picked;
  const bool root = ::geteuid() == 0;
  std::ofstream(dir + "/userlist.txt") << "\"postgres\" \"\"\n";
  std::ofstream(dir + "/pgbouncer.ini")
      << "[databases]\npostgres = host=127.0.0.1 port=" << fx.pg().port()
      << " dbname=postgres\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = " << port
      << "\nunix_socket_dir =\nauth_type = trust\nauth_file = " << dir
      << "/userlist.txt\npool_mode = " << mode << "\nlogfile = " << dir << "/pgbouncer.log\n"
      << (root ? "user = postgres\n" : "") << extra;
  if (root) {
    // pgbouncer refuses to run as root: it becomes `user` and must still read its files.
    const passwd* pg = ::getpwnam("postgres");
    REQUIRE(pg != nullptr);
    for (const char* file : {"/userlist.txt", "/pgbouncer.ini"})
      REQUIRE(::chown((dir + file).c_str(), pg->pw_uid, pg->pw_gid) == 0);
  }
  auto child =
      devtools::ChildProcess::Spawn({"pgbouncer", dir + "/pgbouncer.ini"}, dir + "/pgbouncer.out");
  REQUIRE_MESSAGE(child.ok(), child.status().ToString());
  const std::string conninfo =
      "host=127.0.0.1 port=" + std::to_string(port) + " dbname=postgres user=postgres";
  REQUIRE_MESSAGE(Eventually([&] { return PQping(conninfo.c_str()) == PQPING_OK; }, 10s),
                  devtools::ReadFile(dir + "/pgbouncer.out"));
  return std::move(child).value();
}

}  // namespace

TEST_CASE("polling: through pgbouncer in session mode with its defaults, and saying a pooler "
          "must be in session mode") {
  RelayFixture fx;
  AddPollingColumns(fx);
  int port = 0;
  auto bouncer = StartPgBouncer(fx, "session", port);
  // pgbouncer refuses the `options` startup parameter unless told to ignore it: the statement
  // timeout is set once connected.
  auto relay = StartPolling(
      fx, fx.WriteConfig("bouncer", Polling({{"database.port", std::to_string(port)}})));
  CHECK_MESSAGE(Log(fx).find("goes through a connection pooler or proxy") != std::string::npos,
                Log(fx));
  std::string sql = "BEGIN;";
  for (int seq = 1; seq <= 50; ++seq) sql += InsertEvent(seq);
  fx.Exec(sql + "COMMIT;");
  auto records = ReadRecords(fx, OutboxTopics(), 50);
  CHECK(CheckRecords(records).size() == 50);
  CHECK(Eventually([&] { return Rows(fx) == 0; }, 10s));
}

TEST_CASE("polling: a pooler in transaction mode that moves the relay's statements between "
          "server sessions stops the relay") {
  RelayFixture fx;
  AddPollingColumns(fx);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  int port = 0;
  // Idle server sessions taken in turn, so consecutive statements run in different ones.
  auto bouncer = StartPgBouncer(fx, "transaction", port, "server_round_robin = 1\n");
  const std::string conninfo =
      "host=127.0.0.1 port=" + std::to_string(port) + " dbname=postgres user=postgres";
  {
    // Two transactions at once: the pool opens two server sessions, idle once they end.
    PgConnPtr a(PQconnectdb(conninfo.c_str())), b(PQconnectdb(conninfo.c_str()));
    for (PGconn* c : {a.get(), b.get()}) PgResultPtr(PQexec(c, "BEGIN; SELECT 1"));
    for (PGconn* c : {a.get(), b.get()}) PgResultPtr(PQexec(c, "COMMIT"));
  }
  auto child = fx.SpawnRelay(
      fx.WriteConfig("transaction", Polling({{"database.port", std::to_string(port)}})));
  auto code = child->Wait(30s);
  REQUIRE_MESSAGE(code.ok(), "the relay did not stop: " << Log(fx));
  CHECK(*code == 2);
  CHECK_MESSAGE(Log(fx).find("a connection pooler in transaction or statement mode is between the "
                             "relay and PostgreSQL") != std::string::npos,
                Log(fx));
  CHECK(Rows(fx) == 1);  // nothing relayed, nothing marked
}

TEST_CASE("polling: a pooler in transaction mode that lends a second relay the server session "
          "the first polls in stops the second; the first goes on") {
  RelayFixture fx;
  AddPollingColumns(fx);
  int port = 0;
  // One server session for every client: both relays' statements run in it, so the first
  // relay sees nothing wrong, and the second's lock request would succeed in the session
  // that already holds the lock.
  auto bouncer = StartPgBouncer(fx, "transaction", port, "default_pool_size = 1\n");
  const auto through_pooler = Polling({{"database.port", std::to_string(port)}});
  auto first = StartPolling(fx, fx.WriteConfig("lent_a", through_pooler));
  const std::string first_log = fx.log_path();
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  REQUIRE(Eventually([&] { return Rows(fx) == 0; }, 20s));

  auto second = fx.SpawnRelay(fx.WriteConfig("lent_b", through_pooler));
  auto code = second->Wait(30s);
  REQUIRE_MESSAGE(code.ok(), "the second relay did not stop: " << Log(fx));
  CHECK(*code == 2);
  CHECK_MESSAGE(Log(fx).find("lent this relay the server session another relay polls in") !=
                    std::string::npos,
                Log(fx));
  CHECK(first->Running());
  fx.Exec("BEGIN;" + InsertEvent(2) + "COMMIT;");
  auto records = ReadRecords(fx, OutboxTopics(), 2);
  CHECK(CheckRecords(records).size() == 2);
  CHECK(records.size() == 2);  // no row published by both
  CHECK(devtools::ReadFile(first_log).find("polling public.outbox") != std::string::npos);
}

TEST_CASE("polling.mark=column: rows stay, stamped once acknowledged, and are not relayed again") {
  RelayFixture fx;
  AddPollingColumns(fx);
  fx.Exec("ALTER TABLE outbox ADD COLUMN published_at timestamptz;"
          "CREATE INDEX outbox_unpublished ON outbox (seq) WHERE published_at IS NULL");
  const std::string config =
      fx.WriteConfig("stamp", Polling({{"polling.mark", "column:published_at"}}));
  auto relay = StartPolling(fx, config);
  std::string sql = "BEGIN;";
  for (int seq = 1; seq <= 50; ++seq) sql += InsertEvent(seq);
  fx.Exec(sql + "COMMIT;");
  auto records = ReadRecords(fx, OutboxTopics(), 50);
  CHECK(CheckRecords(records).size() == 50);
  CHECK(Eventually([&] { return Rows(fx, " WHERE published_at IS NULL") == 0; }, 10s));
  CHECK(Rows(fx) == 50);
  CHECK(fx.Value("SELECT count(*) FROM outbox WHERE published_at > now() - interval '1 minute'") ==
        "50");
  // A restart reads only unpublished rows.
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());
  relay = StartPolling(fx, config);
  fx.Exec("BEGIN;" + InsertEvent(51) + "COMMIT;");
  auto again = ReadRecords(fx, OutboxTopics(), 51);
  auto seen = CheckRecords(again);
  CHECK(again.size() == 51);
  CHECK(seen.count(51) == 1);
}

TEST_CASE("polling: bad rows follow errors.tolerance and the dead-letter topic as on the "
          "replication path") {
  RelayFixture fx;
  // A table whose columns may be NULL, so rows can lack a routing value.
  fx.Exec("CREATE TABLE public.loose (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, "
          "type text, payload jsonb, seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE)");
  const std::string row = "INSERT INTO loose (id, aggregatetype, aggregateid, type, payload) "
                          "VALUES ('00000000-0000-4000-8000-0000000000";
  fx.Exec(row + "01', NULL, 'k1', 'NoRoute', '{\"n\": 1}')");        // null routing value
  fx.Exec(row + "02', 'Bad Name!', 'k2', 'Denied', '{\"n\": 2}')");  // a topic Kafka forbids
  fx.Exec(row + "03', 'Order', 'k3', 'Fine', '{\"n\": 3}')");

  SUBCASE("errors.tolerance=all: dead letters as the replication path writes them") {
    auto relay = StartPolling(
        fx,
        fx.WriteConfig("dlq", Polling({{"table.include.list", "public.loose"},
                                       {"errors.tolerance", "all"},
                                       {"errors.deadletterqueue.topic.name", "walrelay-dlq"}})));
    auto dead = ReadRecords(fx, {"walrelay-dlq"}, 2);
    REQUIRE_MESSAGE(dead.size() == 2, Log(fx));
    std::map<std::string, ConsumedRecord> by_id;
    for (const auto& r : dead) {
      const std::string id = HeaderValue(r, "__walrelay.errors.event.id");
      by_id[id == "(missing)" ? r.key.value_or("") : id] = r;
    }
    const auto& no_route = by_id["{\"id\":\"00000000-0000-4000-8000-000000000001\"}"];
    CHECK(HeaderValue(no_route, "__connect.errors.stage") == "TRANSFORMATION");
    CHECK(HeaderValue(no_route, "__walrelay.errors.table") == "public.loose");
    CHECK(HeaderValue(no_route, "__connect.errors.exception.message").find("aggregatetype") !=
          std::string::npos);
    CHECK(no_route.value.value_or("").find("\"op\":\"c\"") != std::string::npos);
    const auto& refused = by_id["00000000-0000-4000-8000-000000000002"];
    CHECK(HeaderValue(refused, "__connect.errors.stage") == "KAFKA_PRODUCE");
    CHECK(HeaderValue(refused, "__connect.errors.exception.class.name") == "TOPIC_EXCEPTION");
    CHECK(refused.value.value_or("") == "{\"n\": 2}");
    auto good = ReadRecords(fx, {"outbox.event.Order"}, 1);
    REQUIRE(good.size() == 1);
    CHECK(HeaderValue(good[0], "id") == "00000000-0000-4000-8000-000000000003");
    // Dead-lettered rows count as relayed: all three are deleted.
    CHECK(Eventually([&] { return fx.Value("SELECT count(*) FROM loose") == "0"; }, 10s));
    CHECK(relay->Running());
  }
  SUBCASE("errors.tolerance=none: the relay stops on the first bad row and deletes nothing") {
    auto relay =
        fx.SpawnRelay(fx.WriteConfig("strict", Polling({{"table.include.list", "public.loose"}})));
    auto code = relay->Wait(30s);
    REQUIRE_MESSAGE(code.ok(), "the relay kept running:\n" << Log(fx));
    CHECK(*code == 6);
    const std::string log = Log(fx);
    CHECK(log.find("aggregatetype") != std::string::npos);
    CHECK(log.find("00000000-0000-4000-8000-000000000001") != std::string::npos);
    CHECK(log.find("not yet marked stay in the table") != std::string::npos);
    CHECK(fx.Value("SELECT count(*) FROM loose") == "3");
  }
}

TEST_CASE("polling: one relay polls at a time; a standby takes the lease when it dies") {
  RelayFixture fx;
  AddPollingColumns(fx);
  const std::string config = fx.WriteConfig("lease", Polling());
  auto active = StartPolling(fx, config);
  const std::string active_log = fx.log_path();
  auto standby = StartPolling(fx, config, /*standby=*/true);
  const std::string standby_log = fx.log_path();
  // `validate` reports the table and who holds the lease.
  auto result = fx.RunCommand({"validate", "--config", config});
  auto& validated = result.first;
  auto& report = result.second;
  CHECK_MESSAGE(validated == 0, report);
  CHECK_MESSAGE(report.find("polling public.outbox (source.mode=polling)") != std::string::npos,
                report);
  CHECK_MESSAGE(report.find("lease:               held by backend pid") != std::string::npos,
                report);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  CHECK(ReadRecords(fx, OutboxTopics(), 1).size() == 1);
  CHECK(devtools::ReadFile(standby_log).find("polling public.outbox in") == std::string::npos);

  REQUIRE(active->Kill(SIGKILL).ok());
  REQUIRE(active->Wait(10s).ok());
  CHECK(devtools::WaitForFileContains(standby_log, "polling public.outbox in", 20s));
  fx.Exec("BEGIN;" + InsertEvent(2) + "COMMIT;");
  auto records = ReadRecords(fx, OutboxTopics(), 2);
  auto seen = CheckRecords(records);
  CHECK(seen.count(2) == 1);
  CHECK(Eventually([&] { return Rows(fx) == 0; }, 10s));
  CHECK(standby->Running());
  (void)active_log;
}

TEST_CASE("polling: an order column that cannot mark rows by its value alone stops the relay "
          "before it reads a row") {
  RelayFixture fx;
  AddPollingColumns(fx);
  // One 250-row transaction: created_at (DEFAULT now()) holds one value for all of them, so a
  // mark by value after a batch of 100 would delete all 250.
  fx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT "
          "gen_random_uuid(), 'order', g::text, 'created', '{}' FROM generate_series(1, 250) g");
  // The relay exits by itself, at once, with the configuration's exit code.
  auto refused = [&](const std::map<std::string, std::string>& overrides) {
    auto child = fx.SpawnRelay(fx.WriteConfig("order", Polling(overrides)));
    auto code = child->Wait(20s);
    REQUIRE_MESSAGE(code.ok(), "the relay did not stop: " << Log(fx));
    CHECK(*code == 2);
    CHECK(Rows(fx) == 250);  // nothing marked
    return Log(fx);
  };
  SUBCASE("a value many rows share") {
    const std::string log =
        refused({{"polling.order.column", "created_at"}, {"polling.batch.size", "100"}});
    CHECK_MESSAGE(log.find("'polling.order.column': column 'created_at' of public.outbox lacks a "
                           "unique index on it alone") != std::string::npos,
                  log);
  }
  SUBCASE("a nullable column, unique or not") {
    fx.Exec("ALTER TABLE outbox ADD COLUMN n bigint UNIQUE");
    const std::string log = refused({{"polling.order.column", "n"}});
    CHECK_MESSAGE(log.find("column 'n' of public.outbox lacks NOT NULL:") != std::string::npos,
                  log);
  }
  SUBCASE("unique with another column") {
    fx.Exec("CREATE UNIQUE INDEX outbox_pair ON outbox (created_at, id)");
    const std::string log = refused({{"polling.order.column", "created_at"}});
    CHECK_MESSAGE(log.find("lacks a unique index on it alone") != std::string::npos, log);
  }
  SUBCASE("unique, but not from a sequence: starts, and says what per-key order needs") {
    auto relay =
        StartPolling(fx, fx.WriteConfig("uuid", Polling({{"polling.order.column", "id"}})));
    CHECK_MESSAGE(Log(fx).find("'polling.order.column': column 'id' of public.outbox is neither an "
                               "identity column nor drawn from a sequence") != std::string::npos,
                  Log(fx));
    REQUIRE(Eventually([&] { return Rows(fx) == 0; }, 30s));
    CHECK(ReadRecords(fx, {"outbox.event.order"}, 250).size() == 250);
  }
}

TEST_CASE("polling: a mark that retrying cannot fix stops the relay; one that fails for a while "
          "is sent again, and its rows are never published twice") {
  RelayFixture fx;
  AddPollingColumns(fx);
  // A trigger refuses the DELETE while mark_block holds a row, with `errcode`.
  auto block_marks = [&](const std::string& errcode) {
    fx.Exec("CREATE TABLE mark_block (on_ boolean); INSERT INTO mark_block VALUES (true);"
            "CREATE FUNCTION refuse_mark() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF EXISTS (SELECT 1 FROM mark_block) THEN RAISE EXCEPTION 'outbox rows are kept' "
            "USING ERRCODE = '" +
            errcode +
            "'; END IF; RETURN OLD; END $$;"
            "CREATE TRIGGER refuse_mark BEFORE DELETE ON outbox FOR EACH ROW "
            "EXECUTE FUNCTION refuse_mark()");
  };
  std::string sql = "BEGIN;";
  for (int seq = 1; seq <= 100; ++seq) sql += InsertEvent(seq);
  fx.Exec(sql + "COMMIT;");
  SUBCASE("a trigger raising: stop, naming the table and the cause") {
    block_marks("P0001");
    auto relay = fx.SpawnRelay(fx.WriteConfig("refused", Polling()));
    auto code = relay->Wait(30s);
    REQUIRE_MESSAGE(code.ok(), "the relay did not stop: " << Log(fx));
    CHECK(*code == 4);
    const std::string log = Log(fx);
    CHECK_MESSAGE(
        log.find(" published rows (polling.mark=delete) failed, and retrying cannot fix it") !=
            std::string::npos,
        log);
    CHECK_MESSAGE(log.find("(SQLSTATE P0001)") != std::string::npos, log);
    CHECK(Rows(fx) == 100);
    // Published once, not again and again while the mark failed: the first read's rows (16 on
    // a new connection) and those read while their mark was on its way.
    auto records = ReadRecords(fx, OutboxTopics(), 16);
    CHECK(records.size() <= 100);
    for (const auto& seen : CheckRecords(records)) CHECK_MESSAGE(seen.second == 1, seen.first);
  }
  SUBCASE("a serialization failure for 3 s: the mark alone is sent again") {
    block_marks("40001");
    auto relay = StartPolling(fx, fx.WriteConfig("retried", Polling()));
    REQUIRE(devtools::WaitForFileContains(fx.log_path(), "marking them again in", 20s));
    std::this_thread::sleep_for(3s);
    CHECK(Rows(fx) == 100);
    fx.Exec("DELETE FROM mark_block");
    REQUIRE_MESSAGE(Eventually([&] { return Rows(fx) == 0; }, 30s), Log(fx));
    CHECK(relay->Running());
    auto records = ReadRecords(fx, OutboxTopics(), 100);
    CHECK(records.size() == 100);
    CHECK(CheckRecords(records).size() == 100);
  }
}

TEST_CASE("polling: wrong keys fail at start naming the key, table and column") {
  RelayFixture fx;
  auto run = [&](const std::map<std::string, std::string>& overrides) {
    return fx.RunCommand({"run", "--config", fx.WriteConfig("bad", Polling(overrides))});
  };
  SUBCASE("no order column") {
    auto result = run({});
    auto& code = result.first;
    auto& out = result.second;
    CHECK(code == 2);
    CHECK_MESSAGE(out.find("'polling.order.column': table public.outbox has no column 'seq'") !=
                      std::string::npos,
                  out);
  }
  SUBCASE("a table that is not there") {
    AddPollingColumns(fx);
    auto result = run({{"table.include.list", "public.nosuch"}});
    auto& code = result.first;
    auto& out = result.second;
    CHECK(code == 2);
    CHECK_MESSAGE(out.find("table public.nosuch does not exist") != std::string::npos, out);
  }
  SUBCASE("a mark column that is not a nullable timestamp") {
    AddPollingColumns(fx);
    auto result = run({{"polling.mark", "column:type"}});
    auto& code = result.first;
    auto& out = result.second;
    CHECK(code == 2);
    CHECK_MESSAGE(out.find("'polling.mark': column 'type' of public.outbox must be a nullable "
                           "timestamp") != std::string::npos,
                  out);
  }
  SUBCASE("a user who may read but not delete") {
    AddPollingColumns(fx);
    fx.Exec("CREATE ROLE reader LOGIN; GRANT SELECT ON outbox TO reader");
    auto result = run({{"database.user", "reader"}});
    auto& code = result.first;
    auto& out = result.second;
    CHECK(code == 2);
    CHECK_MESSAGE(out.find("user 'reader' lacks DELETE on public.outbox") != std::string::npos,
                  out);
    CHECK_MESSAGE(out.find("GRANT SELECT, DELETE ON public.outbox TO reader") != std::string::npos,
                  out);
  }
  SUBCASE("exactly once") {
    auto result = run({{"exactly.once.support", "required"}});
    auto& code = result.first;
    auto& out = result.second;
    CHECK(code == 2);
    CHECK_MESSAGE(out.find("'exactly.once.support' is not supported with 'source.mode'=polling") !=
                      std::string::npos,
                  out);
  }
  SUBCASE("more than one table") {
    auto result = run({{"table.include.list", "public.outbox,public.other"}});
    auto& code = result.first;
    auto& out = result.second;
    CHECK(code == 2);
    CHECK_MESSAGE(out.find("'table.include.list' must name exactly one table") != std::string::npos,
                  out);
  }
}
