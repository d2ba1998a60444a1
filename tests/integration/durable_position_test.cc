// The source position kept outside the process (docs/architecture.md "The durable source
// position"), against a real PostgreSQL and a real Apache Kafka broker: a slot that vanished
// stops every later process that finds this connector's stored position, not only the one
// that streamed; an exactly-once restart reads the offsets topic to its real end even while
// another producer holds a transaction open on it.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "common/rdkafka_handles.h"
#include "config/relay_settings.h"
#include "delivery/offset_store.h"
#include "delivery/source_offsets.h"
#include "delivery/transactional_producer.h"
#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kExitSlotGone = 16;

// Terminates the slot's walsender and drops the slot, as an operator (or a failover to a
// server without it) would; retried while the walsender is still letting go.
std::string DropSlotUnderRelay(const std::string& slot) {
  return "DO $$ BEGIN FOR i IN 1..200 LOOP BEGIN "
         "PERFORM pg_terminate_backend(active_pid) FROM pg_replication_slots "
         "WHERE slot_name = '" +
         slot +
         "' AND active; "
         "PERFORM pg_drop_replication_slot('" +
         slot +
         "'); RETURN; "
         "EXCEPTION WHEN object_in_use THEN PERFORM pg_sleep(0.05); END; END LOOP; "
         "RAISE EXCEPTION 'slot % stayed in use', '" +
         slot + "'; END $$";
}

int SlotCount(RelayFixture& fx, const std::string& slot) {
  return std::stoi(
      fx.Value("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" + slot + "'"));
}

std::string Rows(int& seq, int n) {
  std::string sql = "BEGIN;";
  for (int i = 0; i < n; ++i) sql += InsertEvent(++seq);
  return sql + "COMMIT;";
}

size_t Duplicates(const std::map<int, int>& seen) {
  size_t duplicates = 0;
  for (const auto& [s, n] : seen) duplicates += static_cast<size_t>(n - 1);
  return duplicates;
}

}  // namespace

TEST_CASE("at least once: a vanished slot stops every later relay of the connector with exit 16") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const std::string slot = "durable_gone";
  const std::string config = fx.WriteConfig(slot, {});
  const std::string topic = DefaultOffsetsTopic("itest-" + slot);

  // A first start with nothing stored creates the slot; its first confirmation is stored.
  auto active = fx.StartRelay(config);
  const std::string active_log = fx.log_path();
  int seq = 0;
  fx.Exec(Rows(seq, 20));
  const Lsn end = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed(slot, end, 30s) >= end);
  OffsetStore store({{"bootstrap.servers", fx.bootstrap_servers()}}, topic,
                    SourceOffsetKey("itest-" + slot, "itest"));
  std::optional<SourceOffset> stored;
  REQUIRE(Eventually(
      [&] {
        auto read = store.ReadLast(10s);
        if (read.ok()) stored = *read;
        return stored.has_value();
      },
      20s));
  CHECK(stored->slot == slot);
  CHECK(stored->timeline == 1);

  // A standby that never streamed waits for the slot.
  auto standby = fx.SpawnRelay(config);
  const std::string standby_log = fx.log_path();
  REQUIRE(devtools::WaitForFileContains(standby_log, "standby:", 20s));

  fx.Exec(DropSlotUnderRelay(slot));
  auto active_code = active->Wait(30s);
  REQUIRE(active_code.ok());
  CHECK(*active_code == kExitSlotGone);
  // The standby finds the slot missing too: without the stored position it would create a new
  // slot at the current WAL position and stream on, past the rows committed meanwhile.
  auto standby_code = standby->Wait(60s);
  REQUIRE_MESSAGE(standby_code.ok(), ReadWholeFile(standby_log));
  CHECK_MESSAGE(*standby_code == kExitSlotGone, ReadWholeFile(standby_log));
  const std::string standby_text = ReadWholeFile(standby_log);
  CHECK(standby_text.find("replication slot '" + slot +
                          "' this connector streamed from no "
                          "longer exists") != std::string::npos);
  CHECK(standby_text.find("offsets topic '" + topic + "' holds this connector's position LSN") !=
        std::string::npos);

  // Rows committed while no slot exists: no relay can read them any more.
  const int lost_from = seq + 1;
  fx.Exec(Rows(seq, 5));

  // A relay started afterwards with the same config (what a supervisor does) stops the same way
  // and creates no slot.
  auto result = fx.RunCommand({"run", "--config", config});
  auto& code = result.first;
  auto& output = result.second;
  CHECK_MESSAGE(code == kExitSlotGone, output);
  CHECK(output.find("no longer exists") != std::string::npos);
  CHECK(SlotCount(fx, slot) == 0);

  // The operator's opt-in: the slot is created again, the range at risk named at error level,
  // and the counter says so.
  const std::string recreate = fx.WriteConfig(slot, {{"slot.recreate.when.missing", "true"}});
  auto recreated = fx.StartRelay(recreate);
  const std::string recreated_log = ReadWholeFile(fx.log_path());
  CHECK(SlotCount(fx, slot) == 1);
  const std::regex at_error("error.*replication slot '" + slot +
                            "' was missing and has been created again.*between "
                            "LSN [0-9A-F/]+ \\(the last stored position\\)");
  CHECK_MESSAGE(std::regex_search(recreated_log, at_error), recreated_log);
  const Reply metrics = Http(RestPort(fx), "GET", "/metrics");
  CHECK_MESSAGE(metrics.body.find("walrelay_slot_recreated_total 1") != std::string::npos,
                metrics.body);
  fx.Exec(Rows(seq, 5));
  auto records = ReadEverySeq(
      *fx.Reader(),
      [&] {
        std::set<int> wanted;
        for (int s = 1; s <= seq; ++s)
          if (s < lost_from || s >= lost_from + 5) wanted.insert(s);
        return wanted;
      }(),
      60s);
  auto seen = CheckRecords(records);
  CHECK(seen.size() == static_cast<size_t>(seq - 5));
  for (int s = lost_from; s < lost_from + 5; ++s) CHECK(seen.count(s) == 0);
  REQUIRE(recreated->Kill(SIGTERM).ok());
  REQUIRE(recreated->Wait(20s).ok());

  // slot.drop.on.stop drops the slot on purpose: the stored position goes with it, and the
  // next start is a first start again.
  const std::string dropping = fx.WriteConfig(slot, {{"slot.drop.on.stop", "true"}});
  auto dropper = fx.StartRelay(dropping);
  REQUIRE(dropper->Kill(SIGTERM).ok());
  auto dropper_code = dropper->Wait(20s);
  REQUIRE(dropper_code.ok());
  CHECK(*dropper_code == 0);
  REQUIRE(SlotCount(fx, slot) == 0);
  auto fresh = fx.StartRelay(config);
  CHECK(SlotCount(fx, slot) == 1);
  CHECK(fresh->Running());
  MESSAGE("vanished slot: active relay, standby and a later start all exited "
          << kExitSlotGone << "; stored position " << stored->lsn_commit.ToString());
}

TEST_CASE("exactly once: another producer's open transaction on the offsets topic repeats "
          "nothing") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const std::string slot = "eos_shared";
  const std::string copy = "eos_shared_behind";
  const std::string offsets_topic = "shared-offsets";
  // A long boundary keeps each source transaction's records in an open Kafka transaction until
  // the relay ends its stream: then the slot stands behind what Kafka committed for certain.
  const std::map<std::string, std::string> eos = {{"exactly.once.support", "required"},
                                                  {"offsets.storage.topic", offsets_topic},
                                                  {"transaction.boundary.interval.ms", "600000"}};
  const std::string config = fx.WriteConfig(slot, eos);
  auto relay = fx.StartRelay(config);
  int seq = 0;
  // Rows whose records are in Kafka, in the relay's open transaction.
  auto rows_in_open_transaction = [&](int n) {
    fx.Exec(Rows(seq, n));
    auto seen = fx.Reader(devtools::IsolationLevel::kReadUncommitted)
                    ->ReadAtLeast(OutboxTopics(), static_cast<size_t>(seq), 30s);
    REQUIRE(seen.ok());
    REQUIRE(seen->size() >= static_cast<size_t>(seq));
  };
  rows_in_open_transaction(20);
  auto check_all = [&](const char* when) {
    auto records = ReadEverySeq(*fx.Reader(), SeqRange(seq), 60s);
    auto seen = CheckRecords(records);
    CHECK_MESSAGE(seen.size() == static_cast<size_t>(seq), when << "\n" << Log(fx));
    CHECK_MESSAGE(Duplicates(seen) == 0, when << "\n" << Log(fx));
    return Duplicates(seen);
  };

  // Another connector's producer holds a transaction open on the same offsets topic.
  auto foreign = TransactionalProducer::Create({{"bootstrap.servers", fx.bootstrap_servers()}},
                                               "another-connector");
  REQUIRE(foreign.ok());
  REQUIRE((*foreign)->InitTransactions(30s).ok());
  REQUIRE((*foreign)->Begin().ok());
  Record other;
  other.topic = offsets_topic;
  other.partition = 0;
  other.key = R"(["another-connector",{"server":"elsewhere"}])";
  other.value = R"({"lsn":1,"lsn_commit":1})";
  REQUIRE((*foreign)->SendOffset(other).ok());
  REQUIRE((*foreign)->Flush(30s).ok());

  // A restart through REST commits the open transaction (its offset record now lies behind the
  // foreign one) and streams again: from what this process committed, not from what
  // read_committed readers can see of the topic.
  REQUIRE(Http(RestPort(fx), "POST", "/connectors/itest-" + slot + "/restart").status == 204);
  REQUIRE(Eventually([&] { return Count(Log(fx), "streaming slot") >= 2; }, 30s));
  rows_in_open_transaction(20);
  REQUIRE(Http(RestPort(fx), "POST", "/connectors/itest-" + slot + "/restart").status == 204);
  REQUIRE_MESSAGE(Eventually([&] { return Count(Log(fx), "streaming slot") >= 3; }, 30s), Log(fx));
  const size_t after_restart = check_all("after two restarts through REST");

  // A new process with the slot put back behind what Kafka committed: it must read the offsets
  // topic past a foreign transaction that is open when it starts.
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());
  // Committed: the other connector's key stays readable in the topic.
  REQUIRE((*foreign)->Commit(30s).ok());
  fx.WaitSlotFree(slot);
  const Lsn behind = fx.ConfirmedFlush(slot);
  fx.Exec("SELECT pg_copy_logical_replication_slot('" + slot + "', '" + copy + "')");
  relay = fx.StartRelay(config);
  rows_in_open_transaction(20);
  const Lsn third_end = fx.CurrentWal();
  REQUIRE((*foreign)->Begin().ok());
  REQUIRE((*foreign)->SendOffset(other).ok());
  REQUIRE((*foreign)->Flush(30s).ok());
  // The third transaction is committed behind the foreign record, then the relay dies.
  REQUIRE(Http(RestPort(fx), "POST", "/connectors/itest-" + slot + "/restart").status == 204);
  REQUIRE(Eventually([&] { return Count(Log(fx), "streaming slot") >= 2; }, 30s));
  REQUIRE(relay->Kill(SIGKILL).ok());
  REQUIRE(relay->Wait(20s).ok());
  fx.WaitSlotFree(slot);
  fx.RestoreSlotCopy(slot, copy);
  REQUIRE(fx.ConfirmedFlush(slot) == behind);

  // The new process commits at the usual boundary.
  auto restarted = fx.SpawnRelay(fx.WriteConfig(
      slot, {{"exactly.once.support", "required"}, {"offsets.storage.topic", offsets_topic}}));
  std::this_thread::sleep_for(3s);  // the new relay waits for the foreign transaction
  REQUIRE((*foreign)->Abort(30s).ok());
  REQUIRE(devtools::WaitForFileContains(fx.log_path(), "streaming slot", 60s));
  fx.Exec(Rows(seq, 20));
  CHECK(fx.WaitConfirmed(slot, fx.CurrentWal(), 60s) >= third_end);
  const size_t after_kill = check_all("after kill -9 with the slot put back");
  const std::string log = Log(fx);
  CHECK(log.find("also holds positions of other connectors") != std::string::npos);
  MESSAGE("exactly once beside a foreign open transaction: "
          << seq << " rows, duplicates " << after_restart << " after REST restarts, " << after_kill
          << " after kill -9 with the slot put back at " << behind.ToString());
  REQUIRE(restarted->Kill(SIGTERM).ok());
  REQUIRE(restarted->Wait(20s).ok());
}

// A standby promoted behind the primary: its timeline forks below the position the relay stored
// while streaming the old primary. The new primary's commits after the fork lie at LSNs the
// old timeline had used too; starting at the stored position would skip them.
TEST_CASE("exactly once: after a promotion behind the stored position nothing is skipped") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const std::string slot = "timeline_eos";
  const std::map<std::string, std::string> eos = {{"exactly.once.support", "required"},
                                                  {"offsets.storage.topic", "timeline-offsets"}};
  // Both servers keep the WAL the copied logical slot needs.
  fx.Exec("ALTER SYSTEM SET wal_keep_size = '1GB'");
  fx.Exec("SELECT pg_reload_conf()");
  auto relay = fx.StartRelay(fx.WriteConfig(slot, eos));  // creates the slot
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());
  fx.WaitSlotFree(slot);

  // The standby is the primary as it is now, with the relay's slot: a cold copy, kept stopped
  // so that it receives nothing of what follows.
  devtools::PgStandbyOptions standby_options;
  standby_options.cold_copy = true;
  auto made = fx.pg().StartStandby(standby_options);
  REQUIRE_MESSAGE(made.ok(), made.status().ToString());
  devtools::PgSandbox& standby = **made;
  REQUIRE(standby.Stop().ok());
  REQUIRE(fx.pg().Stop().ok());
  const std::string copy_slot = "cp -a '" + fx.pg().data_dir() + "/pg_replslot/" + slot + "' '" +
                                standby.data_dir() + "/pg_replslot/'";
  REQUIRE(std::system(copy_slot.c_str()) == 0);
  REQUIRE(fx.pg().Restart().ok());

  // The old primary's rows, relayed and stored as the connector's position on timeline 1.
  relay = fx.StartRelay(fx.WriteConfig(slot, eos));
  int seq = 0;
  for (int t = 0; t < 25; ++t) fx.Exec(Rows(seq, 20));
  const int old_rows = seq;
  const Lsn old_end = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed(slot, old_end, 60s) >= old_end);
  REQUIRE(CheckRecords(ReadEverySeq(*fx.Reader(), SeqRange(seq), 60s)).size() ==
          static_cast<size_t>(old_rows));
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());

  // The primary crashes; the standby, behind it, is promoted onto timeline 2.
  REQUIRE(fx.pg().KillServer().ok());
  REQUIRE(standby.Restart().ok());
  REQUIRE(standby.Promote().ok());
  const Lsn fork = *Lsn::Parse(*standby.QueryValue("SELECT pg_current_wal_lsn()::text"));
  REQUIRE(fork < old_end);
  // The new primary's own rows: their commits lie between the fork and the stored position.
  for (int i = 0; i < 30; ++i) REQUIRE(standby.Exec(Rows(seq, 1)).ok());
  const Lsn new_end = *Lsn::Parse(*standby.QueryValue("SELECT pg_current_wal_lsn()::text"));
  REQUIRE(new_end < old_end);

  auto moved = eos;
  moved["database.port"] = std::to_string(standby.port());
  relay = fx.StartRelay(fx.WriteConfig(slot, moved));
  const std::string log = Log(fx);
  CHECK_MESSAGE(log.find("timeline switch: this connector's stored position") != std::string::npos,
                log);
  CHECK(log.find("is on timeline 1, which the server (now timeline 2) left at LSN") !=
        std::string::npos);
  std::set<int> new_rows;
  for (int s = old_rows + 1; s <= seq; ++s) new_rows.insert(s);
  auto records = ReadEverySeq(*fx.Reader(), SeqRange(seq), 60s);
  auto seen = CheckRecords(records);
  size_t delivered_new = 0;
  for (int s : new_rows) delivered_new += seen.count(s);
  CHECK_MESSAGE(delivered_new == new_rows.size(), log);
  CHECK(seen.size() == static_cast<size_t>(seq));
  CHECK(Duplicates(seen) == 0);
  MESSAGE("promotion behind the stored position: fork at "
          << fork.ToString() << ", stored "
          << "position past " << old_end.ToString() << "; " << delivered_new << " of "
          << new_rows.size() << " rows of the new primary delivered, " << Duplicates(seen)
          << " duplicates");
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());
}

namespace {

Status AddPartitions(const std::string& bootstrap, const std::string& topic, int total) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  KafkaHandlePtr rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err));
  if (!rk) return Status::Kafka(err);
  KafkaNewPartitionsPtr partitions(
      rd_kafka_NewPartitions_new(topic.c_str(), static_cast<size_t>(total), err, sizeof err));
  KafkaQueuePtr queue(rd_kafka_queue_new(rk.get()));
  rd_kafka_NewPartitions_t* list[] = {partitions.get()};
  rd_kafka_CreatePartitions(rk.get(), list, 1, nullptr, queue.get());
  KafkaEventPtr event(rd_kafka_queue_poll(queue.get(), 30000));
  if (!event) return Status::Kafka("CreatePartitions timed out");
  if (rd_kafka_event_error(event.get()))
    return Status::Kafka(rd_kafka_event_error_string(event.get()));
  size_t count = 0;
  const rd_kafka_topic_result_t** results = rd_kafka_CreatePartitions_result_topics(
      rd_kafka_event_CreatePartitions_result(event.get()), &count);
  for (size_t i = 0; i < count; ++i)
    if (rd_kafka_topic_result_error(results[i]))
      return Status::Kafka(rd_kafka_topic_result_error_string(results[i]));
  return Status::Ok();
}

}  // namespace

// docs/operations.md's remedy for exit 21 is a tombstone under the connector's key. After the
// topic's partition count changed, Connect's tooling writes it to another partition than the
// stale record: the newest record must win.
TEST_CASE("exactly once: a tombstone clears a foreign position after the partition count "
          "changed") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const std::string slot = "repartitioned";
  const std::string topic = "repartitioned-offsets";
  const std::string config = fx.WriteConfig(
      slot, {{"exactly.once.support", "required"}, {"offsets.storage.topic", topic}});
  const std::map<std::string, std::string> kafka = {{"bootstrap.servers", fx.bootstrap_servers()}};
  OffsetStore store(kafka, topic, SourceOffsetKey("itest-" + slot, "itest"));
  REQUIRE(store.EnsureTopic(1, -1, 30s).ok());
  // A producer per write: a new one learns the partitions added meanwhile.
  auto write = [&](Record record) {
    auto producer = TransactionalProducer::Create(kafka, "offsets-tool");
    REQUIRE(producer.ok());
    REQUIRE((*producer)->InitTransactions(30s).ok());
    REQUIRE((*producer)->Begin().ok());
    auto sent = (*producer)->SendOffset(record);
    REQUIRE_MESSAGE(sent.ok(), sent.status.ToString());
    REQUIRE((*producer)->Commit(30s).ok());
  };
  SourceOffset foreign;
  foreign.lsn = foreign.lsn_commit = Lsn(0x9000000);
  foreign.system_identifier = "1";  // another server
  foreign.timeline = 1;
  foreign.slot = slot;
  write(store.MakeRecord(foreign, 1));
  // Another server's position under this connector's key: it streamed before, elsewhere, and
  // the missing slot is not created behind the operator's back.
  auto result = fx.RunCommand({"run", "--config", config});
  auto& refused = result.first;
  auto& output = result.second;
  CHECK_MESSAGE(refused == kExitSlotGone, output);
  CHECK(output.find("server 1, slot '" + slot + "'") != std::string::npos);

  // More partitions, then the tombstone where murmur2 places the key now: not partition 0.
  int total = 2;
  while (store.MakeRecord(foreign, total).partition == 0) ++total;
  REQUIRE(AddPartitions(fx.bootstrap_servers(), topic, total).ok());
  Record tombstone = store.MakeRecord(foreign, total);
  tombstone.value.reset();
  write(tombstone);

  auto relay = fx.StartRelay(config);
  int seq = 0;
  fx.Exec(Rows(seq, 5));
  CHECK(CheckRecords(ReadEverySeq(*fx.Reader(), SeqRange(seq), 60s)).size() == 5u);
  MESSAGE("tombstone in partition " << tombstone.partition << " of " << total
                                    << " cleared the foreign position in partition 0");
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());
}

// A failover to a standby without the slot (PostgreSQL 15 has no failover slots): the relay
// pointed at the promoted server finds no slot, and the stored position says the connector
// streamed from one. Creating a new slot there would skip what the old primary committed last.
TEST_CASE("at least once: after a failover to a server without the slot, exit 16, never silent") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const std::string slot = "failover_gone";
  auto made = fx.pg().StartStandby();
  REQUIRE_MESSAGE(made.ok(), made.status().ToString());
  devtools::PgSandbox& standby = **made;
  auto relay = fx.StartRelay(fx.WriteConfig(slot, {}));
  int seq = 0;
  fx.Exec(Rows(seq, 20));
  const Lsn end = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed(slot, end, 30s) >= end);
  REQUIRE(fx.pg().KillServer().ok());
  REQUIRE(standby.Promote().ok());
  REQUIRE(relay->Kill(SIGKILL).ok());
  REQUIRE(relay->Wait(20s).ok());

  const std::string moved =
      fx.WriteConfig(slot, {{"database.port", std::to_string(standby.port())}});
  auto result = fx.RunCommand({"run", "--config", moved});
  auto& code = result.first;
  auto& output = result.second;
  CHECK_MESSAGE(code == kExitSlotGone, output);
  CHECK(output.find("replication slot '" + slot +
                    "' this connector streamed from no longer "
                    "exists") != std::string::npos);
  CHECK(output.find("holds this connector's position LSN") != std::string::npos);
  // No slot was created on the new primary behind the operator's back.
  CHECK(*standby.QueryValue("SELECT count(*) FROM pg_replication_slots WHERE slot_type = "
                            "'logical'") == "0");
  MESSAGE("failover to a standby without the slot: exit " << code);
}

namespace {

std::string SystemIdentifier(devtools::PgSandbox& pg) {
  auto id = pg.QueryValue("SELECT system_identifier FROM pg_control_system()");
  REQUIRE(id.ok());
  return *id;
}

// Waits until the offsets topic holds a position of `system_identifier` under the key.
SourceOffset WaitStored(const OffsetStore& store, const std::string& system_identifier) {
  std::optional<SourceOffset> stored;
  REQUIRE(Eventually(
      [&] {
        auto read = store.ReadLast(10s);
        if (read.ok()) stored = *read;
        return stored && stored->system_identifier == system_identifier;
      },
      30s));
  return *stored;
}

}  // namespace

// A cutover (blue/green switchover, dump and restore, a migration by logical replication): the
// config's address now leads to another cluster with the same database and outbox, where rows
// were committed before any relay connected. Creating the slot there at the current WAL
// position would skip them.
TEST_CASE("at least once: a cutover to another server without the slot stops with exit 16, "
          "naming the slot, both servers and the stored position") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const std::string slot = "cutover";
  const std::string first_server = SystemIdentifier(fx.pg());
  auto relay = fx.StartRelay(fx.WriteConfig(slot, {}));
  int seq = 0;
  fx.Exec(Rows(seq, 5));
  const Lsn end = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed(slot, end, 30s) >= end);
  OffsetStore store({{"bootstrap.servers", fx.bootstrap_servers()}},
                    DefaultOffsetsTopic("itest-" + slot),
                    SourceOffsetKey("itest-" + slot, "itest"));
  WaitStored(store, first_server);
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());
  const SourceOffset stored = WaitStored(store, first_server);  // the last one written

  auto started = devtools::PgSandbox::Start();
  REQUIRE_MESSAGE(started.ok(), started.status().ToString());
  devtools::PgSandbox& moved_to = **started;
  const std::string second_server = SystemIdentifier(moved_to);
  REQUIRE(second_server != first_server);
  REQUIRE(moved_to.Exec(ReadWholeFile(std::string(WALRELAY_SOURCE_DIR) + "/docs/outbox.sql")).ok());
  const int missed_from = seq + 1;
  REQUIRE(moved_to.Exec(Rows(seq, 10)).ok());  // rows 6-15, before any relay connects

  const std::string moved =
      fx.WriteConfig(slot, {{"database.port", std::to_string(moved_to.port())}});
  auto result = fx.RunCommand({"run", "--config", moved});
  auto& code = result.first;
  auto& output = result.second;
  CHECK_MESSAGE(code == kExitSlotGone, output);
  CHECK(output.find("replication slot '" + slot +
                    "' this connector streamed from no longer "
                    "exists on server " +
                    second_server) != std::string::npos);
  CHECK_MESSAGE(output.find("LSN " + stored.lsn_commit.ToString() + " (timeline 1) of server " +
                            first_server + ", slot '" + slot + "'") != std::string::npos,
                output);
  CHECK(*moved_to.QueryValue("SELECT count(*) FROM pg_replication_slots") == "0");

  // The operator opts in once and republishes rows 6-15 (here: deletes and inserts them
  // again; the relay ignores deletes): the slot is created on the new server, and its
  // position replaces the other server's.
  const std::string recreate = fx.WriteConfig(
      slot,
      {{"database.port", std::to_string(moved_to.port())}, {"slot.recreate.when.missing", "true"}});
  auto resumed = fx.StartRelay(recreate);
  std::string republish = "BEGIN; DELETE FROM outbox;";
  for (int s = missed_from; s <= seq; ++s) republish += InsertEvent(s);
  REQUIRE(moved_to.Exec(republish + "COMMIT;").ok());
  CHECK(CheckRecords(ReadEverySeq(*fx.Reader(), SeqRange(seq), 60s)).size() ==
        static_cast<size_t>(seq));
  CHECK(WaitStored(store, second_server).slot == slot);
  REQUIRE(resumed->Kill(SIGTERM).ok());
  REQUIRE(resumed->Wait(20s).ok());
  MESSAGE("cutover: exit " << code << "; stored LSN " << stored.lsn_commit.ToString()
                           << " of server " << first_server << ", moved to " << second_server);
}

// A quiet outbox under exactly once: the relay streams and relays nothing, then the slot is
// lost. Without a position recorded at the first stream, the next process would find nothing
// stored, create the slot again at the current WAL position, and skip the rows committed
// while it was missing.
TEST_CASE("exactly once: a slot lost before the first Kafka transaction stops the next start "
          "with exit 16") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const std::string slot = "eos_quiet";
  const std::string topic = "quiet-offsets";
  const std::string config = fx.WriteConfig(
      slot, {{"exactly.once.support", "required"}, {"offsets.storage.topic", topic}});
  const std::string server = SystemIdentifier(fx.pg());
  auto relay = fx.StartRelay(config);
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(20s).ok());
  fx.WaitSlotFree(slot);
  // The first stream recorded its start, though no record was relayed.
  OffsetStore store({{"bootstrap.servers", fx.bootstrap_servers()}}, topic,
                    SourceOffsetKey("itest-" + slot, "itest"));
  const SourceOffset recorded = WaitStored(store, server);
  CHECK(recorded.slot == slot);

  int seq = 0;
  fx.Exec(Rows(seq, 10));
  fx.Exec(DropSlotUnderRelay(slot));
  auto result = fx.RunCommand({"run", "--config", config});
  auto& code = result.first;
  auto& output = result.second;
  CHECK_MESSAGE(code == kExitSlotGone, output);
  CHECK(output.find("offsets topic '" + topic + "' holds this connector's position LSN " +
                    recorded.lsn_commit.ToString()) != std::string::npos);
  CHECK(SlotCount(fx, slot) == 0);
  MESSAGE("exactly once, quiet outbox, slot lost: exit " << code << "; start recorded at LSN "
                                                         << recorded.lsn_commit.ToString());
}
