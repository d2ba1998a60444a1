// Records a real Apache Kafka broker refuses, under Kafka Connect's error policy: a record over
// the topic's max.message.bytes, a topic name Kafka forbids, a missing topic with
// auto.create.topics.enable=false, and a topic with fewer in-sync replicas than its
// min.insync.replicas. With errors.tolerance=none the relay stops (exit 5) naming the event id
// and the LSN, and the slot is not confirmed past the row; with errors.tolerance=all and a
// dead-letter topic the record goes there and the stream goes on.
//
// One broker (auto.create.topics.enable=false, so every topic is made here) and one PostgreSQL
// serve all cases; each relay has its own slot, created after the previous case's rows.
#include <librdkafka/rdkafka.h>

#include <csignal>
#include <regex>
#include <set>

#include "outbox_events.h"
#include "relay_fixture.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

const std::string kGoodTopic = "outbox.event.Good";
const std::string kDeadLetters = "refusal.dlq";

RelayFixture& Shared() {
  static RelayFixture fx = [] {
    devtools::KafkaBrokerOptions options;
    options.extra_properties = {"auto.create.topics.enable=false"};
    return RelayFixture(RealBroker{options});
  }();
  static bool topics_made = [] {
    for (const auto& topic : {kGoodTopic, kDeadLetters}) {
      Status st = fx.broker().CreateTopic(topic, 1, 1);
      REQUIRE_MESSAGE(st.ok(), st.ToString());
    }
    return true;
  }();
  (void)topics_made;
  return fx;
}

std::string EventId(int n) {
  char id[40];
  std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", n);
  return id;
}

std::string Insert(int n, const std::string& aggregatetype_sql, const std::string& payload_sql) {
  return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('" +
         EventId(n) + "', " + aggregatetype_sql + ", 'key-" + std::to_string(n) +
         "', 'Happened', " + payload_sql + ");";
}

std::string GoodRow(int n) { return Insert(n, "'Good'", "'{\"n\": " + std::to_string(n) + "}'"); }

// Reads `topics` until a record with each of `ids` in its `id` header arrived.
std::map<std::string, ConsumedRecord> ReadIds(const std::string& bootstrap,
                                              const std::vector<std::string>& topics,
                                              const std::set<std::string>& ids) {
  auto reader = devtools::TopicReader::Create(bootstrap);
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Assign(topics).ok());
  std::map<std::string, ConsumedRecord> found;
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (found.size() < ids.size() && std::chrono::steady_clock::now() < deadline) {
    for (auto& r : (*reader)->Poll(500ms)) {
      const std::string id = HeaderValue(r, "id");
      if (ids.count(id)) found.emplace(id, std::move(r));
    }
  }
  return found;
}

struct Refusal {
  std::string slot;
  std::string failing_row;  // SQL inserting EventId(failing_id)
  int failing_id;
  std::string error_name;  // librdkafka's name for the refusal, as the dead letter carries it
  std::map<std::string, std::string> overrides;
  std::string bootstrap = "";  // the shared broker's when empty
};

// The slot's pending changes, one wal2json line each, with their LSNs: what a restart replays.
std::string PendingChanges(RelayFixture& fx, const std::string& slot) {
  return fx.Value(
      "SELECT coalesce(string_agg(data, E'\\n'), '') FROM pg_logical_slot_peek_changes('" + slot +
      "', NULL, NULL, 'format-version', '2', 'include-lsn', '1')");
}

// errors.tolerance=none: a good row is confirmed, then the failing row stops the relay with
// exit 5, naming the event id and the row's LSN; the slot stays before that row.
std::string ExpectStop(RelayFixture& fx, const Refusal& r, std::chrono::seconds within) {
  auto config = r.overrides;
  config["kafka.message.max.bytes"] = "1000000";
  if (!r.bootstrap.empty()) config["kafka.bootstrap.servers"] = r.bootstrap;
  auto relay = fx.StartRelay(fx.WriteConfig(r.slot + "_none", config));
  fx.Exec(GoodRow(r.failing_id - 1));
  const Lsn after_good = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed(r.slot + "_none", after_good, 30s) >= after_good);
  const Lsn before_failing = fx.CurrentWal();
  const auto started = std::chrono::steady_clock::now();
  fx.Exec(r.failing_row);
  auto code = relay->Wait(within);
  REQUIRE_MESSAGE(code.ok(), "still running after " << within.count() << " s:\n" << Log(fx));
  MESSAGE(
      r.slot << ": errors.tolerance=none stopped after "
             << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
             << " s");
  const std::string log = Log(fx);
  CHECK_MESSAGE(*code == 5, log);
  CHECK_MESSAGE(log.find("event id " + EventId(r.failing_id)) != std::string::npos, log);
  std::smatch m;
  // Refused by the broker (a delivery report) or by walrelay before producing: either names it.
  REQUIRE_MESSAGE(std::regex_search(log, m,
                                    std::regex("(?:the row is|table [a-z_.]+) at LSN "
                                               "([0-9A-F]+/[0-9A-F]+)")),
                  log);
  const Lsn confirmed = fx.ConfirmedFlush(r.slot + "_none");
  CHECK(confirmed >= after_good);
  CHECK(confirmed <= before_failing);
  // The slot still holds the failing row, at the LSN the error names.
  const std::string pending = PendingChanges(fx, r.slot + "_none");
  CHECK_MESSAGE(pending.find(EventId(r.failing_id)) != std::string::npos, pending);
  CHECK_MESSAGE(pending.find("\"lsn\":\"" + m[1].str() + "\"") != std::string::npos,
                m[1].str() << " not in " << pending);
  return log;
}

// errors.tolerance=all with a dead-letter topic: the failing row becomes a dead letter naming
// the refusal, the good row after it arrives, the slot is confirmed past both.
void ExpectDeadLetter(RelayFixture& fx, const Refusal& r) {
  auto config = r.overrides;
  config["kafka.message.max.bytes"] = "1000000";
  config["errors.tolerance"] = "all";
  config["errors.deadletterqueue.topic.name"] = kDeadLetters;
  if (!r.bootstrap.empty()) config["kafka.bootstrap.servers"] = r.bootstrap;
  const std::string bootstrap = r.bootstrap.empty() ? fx.bootstrap_servers() : r.bootstrap;
  auto relay = fx.StartRelay(fx.WriteConfig(r.slot + "_all", config));
  fx.Exec(r.failing_row);
  fx.Exec(GoodRow(r.failing_id + 1));
  const Lsn end = fx.CurrentWal();
  auto dead = ReadIds(bootstrap, {kDeadLetters}, {EventId(r.failing_id)});
  REQUIRE_MESSAGE(dead.size() == 1, Log(fx));
  const ConsumedRecord& letter = dead.begin()->second;
  CHECK(HeaderValue(letter, "__connect.errors.stage") == "KAFKA_PRODUCE");
  CHECK(HeaderValue(letter, "__connect.errors.exception.class.name") == r.error_name);
  CHECK(HeaderValue(letter, "__walrelay.errors.lsn").find('/') != std::string::npos);
  CHECK(ReadIds(bootstrap, {kGoodTopic}, {EventId(r.failing_id + 1)}).size() == 1);
  CHECK_MESSAGE(fx.WaitConfirmed(r.slot + "_all", end, 30s) >= end, Log(fx));
  CHECK(relay->Running());
  CHECK(Log(fx).find("sending event id " + EventId(r.failing_id) + " ") != std::string::npos);
}

}  // namespace

TEST_CASE("a record over the topic's max.message.bytes: the broker refuses it") {
  RelayFixture& fx = Shared();
  REQUIRE(
      fx.broker().CreateTopic("outbox.event.Small", 1, 1, {{"max.message.bytes", "2000"}}).ok());
  // 5000 bytes pass the client's message.max.bytes (1000000), so only the broker refuses it.
  const std::string big = "jsonb_build_object('blob', repeat('x', 5000))";
  const std::string log =
      ExpectStop(fx, {"too_large", Insert(101, "'Small'", big), 101, "", {}}, 60s);
  CHECK_MESSAGE(log.find("max.message.bytes") != std::string::npos, log);
  ExpectDeadLetter(fx, {"too_large", Insert(111, "'Small'", big), 111, "MSG_SIZE_TOO_LARGE", {}});
}

// Debezium on Kafka Connect delivers records up to the producer's max.request.size (1,048,576
// bytes by default); librdkafka's own default (1,000,000) would refuse one in between.
TEST_CASE("a record of 1,040,000 bytes, over librdkafka's default but within Connect's "
          "max.request.size and the broker's limits, is delivered") {
  RelayFixture& fx = Shared();
  REQUIRE(fx.broker().CreateTopic("outbox.event.Large", 1, 1).ok());
  auto relay = fx.StartRelay(fx.WriteConfig("large_record", {}));
  // {"blob": "x...x"}: 1,040,000 bytes of value with the JSON around the string.
  const std::string big = "jsonb_build_object('blob', repeat('x', 1040000 - 12))";
  fx.Exec(Insert(151, "'Large'", big));
  fx.Exec(GoodRow(152));
  const Lsn end = fx.CurrentWal();
  auto large = ReadIds(fx.bootstrap_servers(), {"outbox.event.Large"}, {EventId(151)});
  REQUIRE_MESSAGE(large.size() == 1, Log(fx));
  const ConsumedRecord& record = large.begin()->second;
  REQUIRE(record.value.has_value());
  CHECK(record.value->size() == 1040000);
  CHECK(ReadIds(fx.bootstrap_servers(), {kGoodTopic}, {EventId(152)}).size() == 1);
  CHECK_MESSAGE(fx.WaitConfirmed("large_record", end, 30s) >= end, Log(fx));
  CHECK(relay->Running());
}

// walrelay checks topic names itself (src/delivery/topic_name.h), so the broker never sees these;
// the dead letter carries the same error name the broker's refusal would.
TEST_CASE("a topic name Kafka forbids: refused before it reaches the broker") {
  RelayFixture& fx = Shared();
  const std::string log =
      ExpectStop(fx, {"bad_name", Insert(201, "'Bad Name!'", "'{}'"), 201, "", {}}, 60s);
  CHECK_MESSAGE(log.find("Kafka refuses the topic name") != std::string::npos, log);
  ExpectDeadLetter(fx,
                   {"bad_name", Insert(211, "'Bad Name!'", "'{}'"), 211, "TOPIC_EXCEPTION", {}});
  // Over 249 characters, otherwise legal.
  ExpectDeadLetter(
      fx, {"long_name", Insert(221, "repeat('L', 250)", "'{}'"), 221, "TOPIC_EXCEPTION", {}});
}

TEST_CASE("a missing topic with auto.create.topics.enable=false: the relay stops after the "
          "propagation wait") {
  RelayFixture& fx = Shared();
  // librdkafka waits topic.metadata.propagation.max.ms (30 s by default) for a topic that does
  // not exist yet before failing its records; the default is kept here.
  const std::string log =
      ExpectStop(fx, {"missing", Insert(301, "'Missing'", "'{}'"), 301, "", {}}, 120s);
  CHECK_MESSAGE(log.find("create the topic") != std::string::npos, log);
  CHECK_MESSAGE(log.find("outbox.event.Missing") != std::string::npos, log);
  // A missing topic is not a fault of one record: every record routed there would fail too, so
  // errors.tolerance=all does not dead-letter it (docs/operations.md); the relay stops the same
  // way, and nothing reaches the dead-letter topic.
  const std::map<std::string, std::string> tolerant = {
      {"errors.tolerance", "all"},
      {"errors.deadletterqueue.topic.name", kDeadLetters},
      {"kafka.topic.metadata.propagation.max.ms", "3000"}};
  ExpectStop(fx, {"missing_tolerant", Insert(311, "'Missing'", "'{}'"), 311, "", tolerant}, 120s);
  auto reader = devtools::TopicReader::Create(fx.bootstrap_servers());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Assign({kDeadLetters}).ok());
  for (const auto& letter : (*reader)->Poll(3s))
    CHECK_MESSAGE(HeaderValue(letter, "id") != EventId(311), "a missing topic was dead-lettered");
}

namespace {

// In-sync replicas of the partition per a metadata request; -1 without an answer.
int InSyncReplicas(const std::string& bootstrap, const std::string& topic) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[256];
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  REQUIRE(rk);
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  int isr = -1;
  if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (md->topic_cnt == 1 && md->topics[0].partition_cnt == 1)
      isr = md->topics[0].partitions[0].isr_cnt;
    rd_kafka_metadata_destroy(md);
  }
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);
  return isr;
}

}  // namespace

TEST_CASE("fewer in-sync replicas than min.insync.replicas: held and retried, bounded by "
          "errors.retry.timeout") {
  RelayFixture& fx = Shared();
  // Apache Kafka caps a topic's effective min.insync.replicas at its replication factor, so
  // one node cannot refuse with NOT_ENOUGH_REPLICAS: three nodes, replication factor 3,
  // min.insync.replicas=3, and one follower killed.
  devtools::KafkaBrokerOptions three;
  three.nodes = 3;
  auto started = devtools::KafkaBroker::Start(three);
  REQUIRE_MESSAGE(started.ok(), started.status().ToString());
  devtools::KafkaBroker& cluster = **started;
  const std::string bootstrap = cluster.bootstrap_servers();
  for (const auto& topic : {kGoodTopic, kDeadLetters})
    REQUIRE(cluster.CreateTopic(topic, 1, 3).ok());
  REQUIRE(cluster.CreateTopic("outbox.event.Isr", 1, 3, {{"min.insync.replicas", "3"}}).ok());
  auto leader = cluster.LeaderOf("outbox.event.Isr", 0);
  for (int i = 0; i < 20 && !leader.ok(); ++i) {
    std::this_thread::sleep_for(500ms);
    leader = cluster.LeaderOf("outbox.event.Isr", 0);
  }
  REQUIRE_MESSAGE(leader.ok(), leader.status().ToString());
  REQUIRE(cluster.Kill(*leader == 3 ? 2 : 3).ok());
  // The controller drops the dead node from the ISR once its session times out. Each lookup
  // may ask another node, whose metadata can lag a moment behind: one answer of 2 is enough,
  // since the leader, which refuses the produce, knows.
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  int in_sync = InSyncReplicas(bootstrap, "outbox.event.Isr");
  while (in_sync != 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(500ms);
    in_sync = InSyncReplicas(bootstrap, "outbox.event.Isr");
  }
  REQUIRE(in_sync == 2);

  // By default the relay holds the record and librdkafka retries it forever; the progress
  // line's stall warning names the topic.
  auto held =
      fx.StartRelay(fx.WriteConfig("isr_default", {{"log.progress.interval.ms", "2000"},
                                                   {"kafka.bootstrap.servers", bootstrap}}));
  const Lsn before = fx.CurrentWal();
  fx.Exec(Insert(401, "'Isr'", "'{}'"));
  REQUIRE_MESSAGE(devtools::WaitForFileContains(fx.log_path(), "has waited over", 60s), Log(fx));
  const std::string held_log = Log(fx);
  CHECK_MESSAGE(held_log.find("a record for topic 'outbox.event.Isr'") != std::string::npos,
                held_log);
  CHECK(held->Running());
  CHECK(fx.ConfirmedFlush("isr_default") <= before);
  REQUIRE(held->Kill(SIGTERM).ok());
  auto held_code = held->Wait(60s);
  REQUIRE(held_code.ok());
  CHECK(*held_code == 0);
  CHECK(fx.ConfirmedFlush("isr_default") <= before);

  const std::map<std::string, std::string> bounded = {{"errors.retry.timeout", "5000"}};
  const std::string log =
      ExpectStop(fx, {"isr", Insert(411, "'Isr'", "'{}'"), 411, "", bounded, bootstrap}, 60s);
  CHECK_MESSAGE(log.find("min.insync.replicas") != std::string::npos, log);
  ExpectDeadLetter(
      fx, {"isr", Insert(421, "'Isr'", "'{}'"), 421, "_MSG_TIMED_OUT", bounded, bootstrap});
}
