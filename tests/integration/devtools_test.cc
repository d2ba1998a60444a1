// Smoke tests for the devtools modules against real PostgreSQL binaries and librdkafka's mock
// cluster. Built by hand; see src/devtools/*.h for the contracts exercised here.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/rdkafka_handles.h"
#include "devtools/child_process.h"
#include "devtools/mock_kafka.h"
#include "devtools/pg_sandbox.h"
#include "devtools/topic_reader.h"

namespace walrelay::devtools {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A zombie counts as dead: a daemonised postmaster is reaped by init, which on some machines
// (this CI's init among them) does so only every few seconds.
bool PidAlive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return !(paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

// The value, or the error text so a failed CHECK shows why.
std::string Val(const Result<std::string>& r) {
  return r.ok() ? r.value() : "ERROR: " + r.status().ToString();
}
std::string Val(const Result<int>& r) {
  return r.ok() ? std::to_string(r.value()) : "ERROR: " + r.status().ToString();
}

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))).string();
}

// A plain librdkafka producer, as an independent check of what the mock accepts.
class TestProducer {
 public:
  explicit TestProducer(const std::string& bootstrap) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char err[512];
    REQUIRE(rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof(err)) ==
            RD_KAFKA_CONF_OK);
    REQUIRE(rd_kafka_conf_set(conf, "linger.ms", "0", err, sizeof(err)) == RD_KAFKA_CONF_OK);
    REQUIRE(rd_kafka_conf_set(conf, "retry.backoff.ms", "50", err, sizeof(err)) ==
            RD_KAFKA_CONF_OK);
    rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
    rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void* op) {
      static_cast<TestProducer*>(op)->results_.push_back(m->err);
    });
    rd_kafka_conf_set_opaque(conf, this);
    rk_.reset(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err)));
    REQUIRE(rk_ != nullptr);
  }
  TestProducer(const TestProducer&) = delete;
  TestProducer& operator=(const TestProducer&) = delete;

  void Produce(const std::string& topic, const std::optional<std::string>& key,
               const std::optional<std::string>& value,
               const std::vector<std::pair<std::string, std::optional<std::string>>>& headers) {
    rd_kafka_headers_t* hdrs = rd_kafka_headers_new(headers.size());
    for (const auto& [k, v] : headers)
      rd_kafka_header_add(hdrs, k.c_str(), -1, v ? v->data() : nullptr, v ? v->size() : 0);
    const void* key_ptr = key ? key->data() : nullptr;
    const size_t key_len = key ? key->size() : 0;
    void* value_ptr = value ? const_cast<char*>(value->data()) : nullptr;
    const size_t value_len = value ? value->size() : 0;
    const rd_kafka_resp_err_t err = rd_kafka_producev(
        rk_.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(key_ptr, key_len),
        RD_KAFKA_V_VALUE(value_ptr, value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) rd_kafka_headers_destroy(hdrs);
    REQUIRE(err == RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  // True when every message was delivered or failed within the timeout.
  bool Flush(std::chrono::milliseconds timeout) {
    return rd_kafka_flush(rk_.get(), static_cast<int>(timeout.count())) ==
           RD_KAFKA_RESP_ERR_NO_ERROR;
  }
  int PartitionCount(const std::string& topic) {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_.get(), topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    int count = -1;
    if (rd_kafka_metadata(rk_.get(), 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1)
      count = md->topics[0].partition_cnt;
    if (md) rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return count;
  }
  std::vector<rd_kafka_resp_err_t> results_;

 private:
  KafkaHandlePtr rk_;
};

// ---------------------------------------------------------------------------------------------
// ChildProcess

TEST_CASE("ChildProcess: output, kill -9, exit codes") {
  const std::string out = TempPath("devtools-child.log");
  fs::remove(out);
  // exec: dash does not exec the last command itself, and kill -9 of the shell would orphan
  // the sleep (Kill() signals only the child pid).
  auto child = ChildProcess::Spawn({"sh", "-c", "echo hi; echo \"$WALRELAY_SMOKE\"; exec sleep 30"},
                                   out, {"WALRELAY_SMOKE=from-env"});
  REQUIRE_MESSAGE(child.ok(), child.status().ToString());
  CHECK(WaitForFileContains(out, "hi\nfrom-env\n", 5s));
  CHECK((*child)->Running());
  CHECK((*child)->Wait(50ms).status().code() == ErrorCode::kInternal);  // still running
  REQUIRE((*child)->Kill(SIGKILL).ok());
  auto code = (*child)->Wait(5s);
  REQUIRE(code.ok());
  CHECK(*code == 137);
  CHECK((*child)->Wait(0ms).value() == 137);  // cached
  CHECK_FALSE((*child)->Running());
  CHECK_FALSE((*child)->Kill(SIGKILL).ok());
  CHECK_FALSE(WaitForFileContains(out, "never printed", 100ms));
  fs::remove(out);

  auto exit3 = ChildProcess::Spawn({"sh", "-c", "echo to-stderr >&2; exit 3"}, out);
  REQUIRE(exit3.ok());
  CHECK((*exit3)->Wait(5s).value() == 3);
  CHECK(ReadFile(out) == "to-stderr\n");
  fs::remove(out);

  auto missing = ChildProcess::Spawn({"/nonexistent/walrelay-binary"}, "");
  CHECK_FALSE(missing.ok());
  CHECK(ReadFile("/nonexistent/file") == "");
}

TEST_CASE("ChildProcess: descriptors are not inherited; destructor kills") {
  int leaked = ::open("/dev/null", O_RDONLY);  // deliberately without O_CLOEXEC
  REQUIRE(leaked >= 3);
  const std::string out = TempPath("devtools-fds.log");
  fs::remove(out);
  auto ls = ChildProcess::Spawn({"sh", "-c", "ls /proc/$$/fd"}, out, {}, "/");
  REQUIRE(ls.ok());
  CHECK((*ls)->Wait(5s).value() == 0);
  const std::string fds = ReadFile(out);
  CHECK_MESSAGE(fds.find(std::to_string(leaked) + "\n") == std::string::npos, fds);
  ::close(leaked);
  fs::remove(out);

  pid_t pid = 0;
  {
    auto sleeper = ChildProcess::Spawn({"sleep", "30"}, "");
    REQUIRE(sleeper.ok());
    pid = (*sleeper)->pid();
    CHECK(PidAlive(pid));
  }
  CHECK_FALSE(PidAlive(pid));
}

// ---------------------------------------------------------------------------------------------
// PgSandbox

TEST_CASE("PgSandbox: query, wal2json slot, restart, cleanup") {
  PgSandboxOptions opts;
  opts.extra_settings = {"work_mem=5MB", "application_name=it's quoted"};
  opts.log_prefix = "[sandbox-smoke] ";
  std::string base;
  pid_t postmaster = 0;
  {
    auto sb = PgSandbox::Start(opts);
    REQUIRE_MESSAGE(sb.ok(), sb.status().ToString());
    PgSandbox& pg = **sb;
    base = pg.base_dir();
    CHECK(pg.running());
    CHECK(pg.host() == "127.0.0.1");
    CHECK(pg.port() > 0);
    CHECK(pg.ConnInfo() ==
          "host=127.0.0.1 port=" + std::to_string(pg.port()) + " user=postgres dbname=postgres");
    CHECK(pg.ConnInfo("other").ends_with("dbname=other"));
    CHECK(fs::is_directory(pg.data_dir()));
    if (::geteuid() == 0) {
      struct stat st {};
      REQUIRE(::stat(pg.data_dir().c_str(), &st) == 0);
      CHECK(st.st_uid != 0);  // owned by the postgres OS user
    }

    CHECK(Val(pg.QueryValue("show wal_level")) == "logical");
    CHECK(Val(pg.QueryValue("show listen_addresses")) == "127.0.0.1");
    CHECK(Val(pg.QueryValue("show work_mem")) == "5MB");
    CHECK(Val(pg.QueryValue("show application_name")) == "it's quoted");
    CHECK(Val(pg.QueryValue("show fsync")) == "off");
    CHECK(Val(pg.QueryValue("show max_replication_slots")) == "20");
    CHECK(Val(pg.QueryValue("select current_user")) == "postgres");
    CHECK(ReadFile(pg.log_path()).find("[sandbox-smoke] ") != std::string::npos);

    auto rows = pg.Query("select 1 as a, null::text as b union all select 2, 'x' order by 1");
    REQUIRE(rows.ok());
    REQUIRE(rows->size() == 2);
    CHECK((*rows)[0][0] == "1");
    CHECK_FALSE((*rows)[0][1].has_value());
    CHECK((*rows)[1][1] == "x");
    CHECK(pg.Query("create table if not exists t0(id int)")->empty());

    Status bad = pg.Exec("select * from no_such_table");
    CHECK_FALSE(bad.ok());
    CHECK(bad.message().find("select * from no_such_table") != std::string::npos);
    CHECK(bad.message().find("does not exist") != std::string::npos);
    CHECK_FALSE(pg.QueryValue("select 1 where false").ok());
    CHECK_FALSE(pg.QueryValue("select null").ok());

    REQUIRE(pg.Exec("create table outbox(id serial primary key, payload text)").ok());
    auto slot = pg.QueryValue("select slot_name from pg_create_logical_replication_slot('s', "
                              "'wal2json')");
    REQUIRE_MESSAGE(slot.ok(), slot.status().ToString());
    CHECK(*slot == "s");
    REQUIRE(pg.Exec("insert into outbox(payload) values ('hello')").ok());
    auto changes = pg.Query(
        "select data from pg_logical_slot_get_changes('s', null, null, 'format-version', '2')");
    REQUIRE_MESSAGE(changes.ok(), changes.status().ToString());
    std::string all;
    for (const auto& r : *changes) all += r[0].value_or("") + "\n";
    CHECK_MESSAGE(all.find("\"action\":\"I\"") != std::string::npos, all);
    CHECK_MESSAGE(all.find("\"table\":\"outbox\"") != std::string::npos, all);
    CHECK_MESSAGE(all.find("hello") != std::string::npos, all);

    const int port = pg.port();
    REQUIRE(pg.Stop().ok());
    CHECK_FALSE(pg.running());
    Status down = pg.Exec("select 1");
    CHECK(down.code() == ErrorCode::kConnection);
    REQUIRE(pg.Restart().ok());
    CHECK(pg.running());
    CHECK(pg.port() == port);
    auto restarted = pg.Restart();  // from running state
    REQUIRE_MESSAGE(restarted.ok(), restarted.ToString());
    CHECK(Val(pg.QueryValue("select count(*) from pg_replication_slots where slot_name = 's'")) ==
          "1");
    CHECK(Val(pg.QueryValue("select payload from outbox")) == "hello");
    CHECK(Val(pg.QueryValue("show work_mem")) == "5MB");  // extra settings survive restarts
    postmaster = std::stoi(ReadFile(pg.data_dir() + "/postmaster.pid"));
    CHECK(PidAlive(postmaster));
  }
  CHECK_FALSE(fs::exists(base));
  CHECK_FALSE(PidAlive(postmaster));
}

TEST_CASE("PgSandbox: cleanup while unwinding an exception; bad settings") {
  std::string base;
  pid_t postmaster = 0;
  try {
    auto sb = PgSandbox::Start();
    REQUIRE(sb.ok());
    base = (*sb)->base_dir();
    postmaster = std::stoi(ReadFile((*sb)->data_dir() + "/postmaster.pid"));
    throw std::runtime_error("test failure");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(base.empty());
  CHECK_FALSE(fs::exists(base));
  CHECK_FALSE(PidAlive(postmaster));

  PgSandboxOptions bad;
  bad.extra_settings = {"no_equals_sign"};
  CHECK(PgSandbox::Start(bad).status().code() == ErrorCode::kConfig);

  // A setting the server rejects fails Start() with the server log, and leaves nothing behind.
  PgSandboxOptions unknown;
  unknown.extra_settings = {"no_such_guc_setting=1"};
  auto failed = PgSandbox::Start(unknown);
  REQUIRE_FALSE(failed.ok());
  CHECK_MESSAGE(failed.status().message().find("no_such_guc_setting") != std::string::npos,
                failed.status().message());
}

// Polls `sql` on `pg` until it returns `want` (or 30 s pass); returns the last value seen.
std::string WaitValue(const PgSandbox& pg, const std::string& sql, const std::string& want) {
  std::string last;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    last = Val(pg.QueryValue(sql));
    if (last == want) break;
    std::this_thread::sleep_for(20ms);
  }
  return last;
}

TEST_CASE("PgSandbox: online standby streams; kill -9 of the primary; promotion, new timeline") {
  auto primary_r = PgSandbox::Start();
  REQUIRE_MESSAGE(primary_r.ok(), primary_r.status().ToString());
  PgSandbox& primary = **primary_r;
  CHECK(primary.major_version() >= 15);
  REQUIRE(primary
              .Exec("create table t(id int primary key, v text);"
                    "insert into t select g, 'before' from generate_series(1, 100) g")
              .ok());
  CHECK(Val(primary.Timeline()) == "1");
  CHECK(primary.Promote().code() == ErrorCode::kPrecondition);  // not a standby

  PgStandbyOptions bad;
  bad.slot_name = "Bad-Name";
  CHECK(primary.StartStandby(bad).status().code() == ErrorCode::kConfig);

  PgStandbyOptions so;
  so.slot_name = "standby1";
  so.extra_settings = {"hot_standby_feedback=on"};
  auto standby_r = primary.StartStandby(so);
  REQUIRE_MESSAGE(standby_r.ok(), standby_r.status().ToString());
  PgSandbox& standby = **standby_r;
  CHECK(standby.port() != primary.port());
  CHECK(standby.base_dir() != primary.base_dir());
  CHECK(Val(standby.QueryValue("select pg_is_in_recovery()")) == "t");
  CHECK(Val(standby.QueryValue("show hot_standby_feedback")) == "on");
  CHECK(Val(standby.QueryValue("show primary_conninfo")).find("dbname=postgres") !=
        std::string::npos);
  CHECK(Val(primary.QueryValue("select active from pg_replication_slots "
                               "where slot_name = 'standby1' and slot_type = 'physical'")) == "t");
  CHECK(WaitValue(standby, "select count(*) from t", "100") == "100");

  // Rows written while the standby runs arrive by streaming.
  REQUIRE(primary.Exec("insert into t select g, 'after' from generate_series(101, 200) g").ok());
  CHECK(WaitValue(standby, "select count(*) from t where v = 'after'", "100") == "100");
  CHECK(Val(primary.QueryValue("select state from pg_stat_replication "
                               "where application_name = 'standby1'")) == "streaming");
  // Read-only while in recovery.
  CHECK_FALSE(standby.Exec("insert into t values (0, 'x')").ok());

  // A crash of the primary: every process gone at once, clients cut off.
  const pid_t pm = std::stoi(ReadFile(primary.data_dir() + "/postmaster.pid"));
  REQUIRE(primary.KillServer().ok());
  CHECK_FALSE(primary.running());
  CHECK_FALSE(PidAlive(pm));
  CHECK(primary.Exec("select 1").code() == ErrorCode::kConnection);
  CHECK(primary.KillServer().code() == ErrorCode::kPrecondition);

  auto promoted = standby.Promote();
  REQUIRE_MESSAGE(promoted.ok(), promoted.ToString());
  CHECK(Val(standby.QueryValue("select pg_is_in_recovery()")) == "f");
  CHECK(Val(standby.Timeline()) == "2");
  REQUIRE(standby.Exec("insert into t values (201, 'promoted')").ok());
  CHECK(Val(standby.QueryValue("select count(*) from t")) == "201");
  CHECK(standby.Promote().code() == ErrorCode::kPrecondition);

  // The killed primary recovers from the crash on restart, still on timeline 1.
  auto restarted = primary.Restart();
  REQUIRE_MESSAGE(restarted.ok(), restarted.ToString());
  CHECK(Val(primary.QueryValue("select count(*) from t")) == "200");
  CHECK(Val(primary.Timeline()) == "1");
}

TEST_CASE("PgSandbox 17: cold-copy standby synchronizes a failover slot; promotion keeps it") {
  PgSandboxOptions po;
  po.major = 17;
  auto primary_r = PgSandbox::Start(po);
  REQUIRE_MESSAGE(primary_r.ok(), primary_r.status().ToString());
  PgSandbox& primary = **primary_r;
  REQUIRE(primary.major_version() == 17);
  REQUIRE(primary.Exec("create table t(id int primary key)").ok());

  PgStandbyOptions so;
  so.slot_name = "standby17";
  so.cold_copy = true;
  so.extra_settings = {"sync_replication_slots=on", "hot_standby_feedback=on"};
  auto standby_r = primary.StartStandby(so);
  REQUIRE_MESSAGE(standby_r.ok(), standby_r.status().ToString());
  PgSandbox& standby = **standby_r;
  CHECK(primary.running());  // back after the cold copy
  CHECK(standby.major_version() == 17);

  // slot name, plugin, temporary, two-phase, failover
  REQUIRE(primary
              .Exec("select pg_create_logical_replication_slot('fs', 'pgoutput', false, "
                    "false, true)")
              .ok());
  REQUIRE(primary.Exec("insert into t select generate_series(1, 10)").ok());
  // The standby's copy stays temporary until the primary's slot moves past the position the
  // copy reserved: a logged standby snapshot and an advance of the slot (as a consumer would)
  // make it sync-ready at once.
  std::string synced;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    REQUIRE(primary.Exec("select pg_log_standby_snapshot()").ok());
    REQUIRE(primary.Exec("select pg_replication_slot_advance('fs', pg_current_wal_lsn())").ok());
    synced = Val(
        standby.QueryValue("select synced::text || '/' || temporary::text || '/' || failover::text "
                           "from pg_replication_slots where slot_name = 'fs'"));
    if (synced == "true/false/true") break;
    std::this_thread::sleep_for(100ms);
  }
  CHECK(synced == "true/false/true");

  REQUIRE(primary.KillServer().ok());
  auto promoted = standby.Promote();
  REQUIRE_MESSAGE(promoted.ok(), promoted.ToString());
  CHECK(Val(standby.Timeline()) == "2");
  CHECK(Val(standby.QueryValue("select count(*) from t")) == "10");
  // The synchronized slot now decodes on the new primary.
  REQUIRE(standby.Exec("insert into t values (11)").ok());
  CHECK(Val(standby.QueryValue("select count(*) from pg_logical_slot_peek_binary_changes('fs', "
                               "null, null, 'proto_version', '1', 'publication_names', 'p') "
                               "where false")) == "0");
}

// ---------------------------------------------------------------------------------------------
// MockKafka + TopicReader

TEST_CASE("MockKafka + TopicReader: records with keys and headers round-trip") {
  auto mk = MockKafka::Start(1);
  REQUIRE_MESSAGE(mk.ok(), mk.status().ToString());
  CHECK_FALSE((*mk)->bootstrap_servers().empty());
  CHECK((*mk)->cluster() != nullptr);

  TestProducer producer((*mk)->bootstrap_servers());
  producer.Produce("smoke", "k1", "v1", {{"id", "1"}, {"type", "Created"}});
  producer.Produce("smoke", "k2", std::string(), {{"id", "2"}, {"nullhdr", std::nullopt}});
  producer.Produce("smoke", "k3", std::nullopt, {});  // tombstone
  REQUIRE(producer.Flush(10s));
  REQUIRE(producer.results_.size() == 3);
  for (auto err : producer.results_) CHECK(err == RD_KAFKA_RESP_ERR_NO_ERROR);
  CHECK(producer.PartitionCount("smoke") == 4);  // the mock's auto-create default

  auto reader = TopicReader::Create((*mk)->bootstrap_servers());
  REQUIRE(reader.ok());
  auto got = (*reader)->ReadAtLeast({"smoke"}, 3, 10s);
  REQUIRE(got.ok());
  REQUIRE(got->size() == 3);
  std::sort(got->begin(), got->end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  const ConsumedRecord& r1 = (*got)[0];
  CHECK(r1.topic == "smoke");
  CHECK(r1.key == "k1");
  CHECK(r1.value == "v1");
  REQUIRE(r1.headers.size() == 2);
  CHECK(r1.headers[0].key == "id");
  CHECK(r1.headers[0].value == "1");
  CHECK(r1.headers[1].key == "type");
  CHECK(r1.headers[1].value == "Created");
  CHECK(r1.timestamp_ms > 1600000000000);
  const ConsumedRecord& r2 = (*got)[1];
  CHECK(r2.value == std::optional<std::string>(""));  // empty, not null
  REQUIRE(r2.headers.size() == 2);
  CHECK(r2.headers[1].key == "nullhdr");
  CHECK_FALSE(r2.headers[1].value.has_value());
  const ConsumedRecord& r3 = (*got)[2];
  CHECK_FALSE(r3.value.has_value());
  CHECK(r3.headers.empty());
  CHECK((*reader)->Poll(300ms).empty());  // nothing more, nothing re-delivered

  // Adding a topic to the assignment does not rewind the first one.
  REQUIRE((*mk)->CreateTopic("second", 2, 1).ok());
  producer.Produce("second", std::nullopt, "s1", {});
  REQUIRE(producer.Flush(10s));
  CHECK(producer.PartitionCount("second") == 2);
  auto more = (*reader)->ReadAtLeast({"smoke", "second"}, 1, 10s);
  REQUIRE(more.ok());
  REQUIRE(more->size() == 1);
  CHECK((*more)[0].topic == "second");
  CHECK_FALSE((*more)[0].key.has_value());
  CHECK((*reader)->Poll(300ms).empty());

  auto topics = (*reader)->ListTopics();
  REQUIRE(topics.ok());
  CHECK(*topics == std::vector<std::string>{"second", "smoke"});  // before "late" exists

  // ReadAtLeast keeps looking for topics that appear late (after the first lookup).
  std::thread late([&] {
    std::this_thread::sleep_for(1500ms);
    CHECK((*mk)->CreateTopic("late", 1, 1).ok());
    TestProducer late_producer((*mk)->bootstrap_servers());
    late_producer.Produce("late", "L", "late-value", {});
    late_producer.Flush(10s);
  });
  auto late_records = (*reader)->ReadAtLeast({"late"}, 1, 20s);
  late.join();
  REQUIRE(late_records.ok());
  REQUIRE(late_records->size() == 1);
  CHECK((*late_records)[0].value == "late-value");

  auto none = (*reader)->ReadAtLeast({"never-created"}, 1, 1s);
  REQUIRE(none.ok());
  CHECK(none->empty());
  CHECK_MESSAGE((*reader)->last_error().find("never-created") != std::string::npos,
                (*reader)->last_error());
  auto missing = (*reader)->Assign({"never-created"});
  CHECK(missing.code() == ErrorCode::kKafka);
  CHECK(missing.message().find("never-created") != std::string::npos);
  MESSAGE("FormatRecord sample:\n" << FormatRecord(r2));
}

TEST_CASE("MockKafka: broker down/up, rtt, injected produce errors") {
  auto mk = MockKafka::Start(1);
  REQUIRE(mk.ok());
  MockKafka& kafka = **mk;
  CHECK(kafka.SetBrokerRtt(1, 20).ok());
  CHECK(kafka.SetBrokerRtt(1, 0).ok());
  CHECK_FALSE(kafka.SetBrokerDown(99).ok());
  REQUIRE(kafka.CreateTopic("flaky", 1, 1).ok());

  TestProducer producer(kafka.bootstrap_servers());
  producer.Produce("flaky", "a", "1", {});
  REQUIRE(producer.Flush(10s));
  // The reader stays connected through the outage, as in the relay's broker-down test.
  auto reader = TopicReader::Create(kafka.bootstrap_servers());
  REQUIRE(reader.ok());
  auto first = (*reader)->ReadAtLeast({"flaky"}, 1, 10s);
  REQUIRE(first.ok());
  REQUIRE(first->size() == 1);
  CHECK((*first)[0].key == "a");

  REQUIRE(kafka.SetBrokerDown(1).ok());
  producer.Produce("flaky", "b", "2", {});
  CHECK_FALSE(producer.Flush(3s));  // cannot be delivered while the broker is down
  CHECK(producer.results_.size() == 1);
  CHECK((*reader)->Poll(500ms).empty());
  REQUIRE(kafka.SetBrokerUp(1).ok());
  REQUIRE(producer.Flush(15s));
  REQUIRE(producer.results_.size() == 2);
  CHECK(producer.results_[1] == RD_KAFKA_RESP_ERR_NO_ERROR);
  const auto up = std::chrono::steady_clock::now();
  auto second = (*reader)->ReadAtLeast({"flaky"}, 1, 15s);
  REQUIRE(second.ok());
  REQUIRE(second->size() == 1);
  CHECK((*second)[0].key == "b");
  MESSAGE("reader caught up " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now() - up)
                                     .count()
                              << " ms after the producer's flush; last_error: "
                              << (*reader)->last_error());

  kafka.PushProduceErrors(1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  producer.Produce("flaky", "c", "3", {});
  REQUIRE(producer.Flush(10s));
  REQUIRE(producer.results_.size() == 3);
  CHECK(producer.results_[2] == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);

  kafka.PushProduceErrors(2, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION);  // retriable
  producer.Produce("flaky", "d", "4", {});
  REQUIRE(producer.Flush(10s));
  REQUIRE(producer.results_.size() == 4);
  CHECK(producer.results_[3] == RD_KAFKA_RESP_ERR_NO_ERROR);

  auto third = (*reader)->ReadAtLeast({"flaky"}, 1, 10s);
  REQUIRE(third.ok());
  REQUIRE(third->size() == 1);
  CHECK((*third)[0].key == "d");
  CHECK((*third)[0].offset == 2);
}

TEST_CASE("FormatRecord") {
  ConsumedRecord r;
  r.topic = "outbox.event.order";
  r.partition = 1;
  r.offset = 42;
  r.key = "order-7";
  r.value = "{\"a\":1}\n";
  r.headers = {{"id", "abc"}, {"trace", std::nullopt}};
  r.timestamp_ms = 1700000000123;
  CHECK(FormatRecord(r) == "topic=outbox.event.order partition=1 offset=42\n"
                           "  key: order-7\n"
                           "  headers: id=abc, trace=(null)\n"
                           "  timestamp: 1700000000123 (2023-11-14T22:13:20.123Z)\n"
                           "  value: {\"a\":1}\\x0a");
  r.key.reset();
  r.value.reset();
  r.headers.clear();
  r.timestamp_ms = -1;
  CHECK(FormatRecord(r) == "topic=outbox.event.order partition=1 offset=42\n"
                           "  key: (null)\n"
                           "  headers: (none)\n"
                           "  timestamp: (none)\n"
                           "  value: (null)");
}

}  // namespace
}  // namespace walrelay::devtools
