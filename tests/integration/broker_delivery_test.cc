// walrelay's delivery guarantee against a real Apache Kafka broker (src/devtools/kafka_broker.h)
// and a real PostgreSQL: every outbox row arrives, in key order, through kill -9 of the relay,
// kill -9 of a lone broker and kill -9 of a partition leader in a 3-node cluster; and the slot
// is never confirmed past a transaction Kafka has not acknowledged. Each case reads the topics
// back with its own TopicReader and counts records by outbox seq (and id header).
//
// Every case starts its own PostgreSQL and broker: a broker killed or a topic filled by one case
// must not change what the next one reads.
#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "outbox_events.h"
#include "relay_fixture.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Tally {
  int lost = 0;
  int duplicates = 0;
  std::vector<int> lost_seqs;  // the first few, for the failure message
};

// Seqs 1..total against what CheckRecords saw.
Tally Count(const std::map<int, int>& seen, int total) {
  Tally t;
  for (int s = 1; s <= total; ++s) {
    auto it = seen.find(s);
    if (it == seen.end()) {
      ++t.lost;
      if (t.lost_seqs.size() < 20) t.lost_seqs.push_back(s);
    } else {
      t.duplicates += it->second - 1;
    }
  }
  return t;
}

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// Streams `batches` x 100 outbox events in 10-event transactions from a thread, so faults
// land while events are being written, decoded and produced. `event` writes one: an outbox
// row by default.
class StreamWriter {
 public:
  StreamWriter(
      RelayFixture& fx, int batches, std::chrono::milliseconds pause,
      std::function<std::string(int)> event = [](int seq) { return InsertEvent(seq); })
      : total_(batches * 100), thread_([this, &fx, batches, pause, event] {
          for (int batch = 0; batch < batches; ++batch) {
            std::string sql;
            for (int i = 1; i <= 100; ++i) {
              const int seq = batch * 100 + i;
              sql += (i % 10 == 1 ? "BEGIN;" : "") + event(seq) + (i % 10 == 0 ? "COMMIT;" : "");
            }
            auto upper = fx.pg().QueryValue(sql + "SELECT pg_current_wal_insert_lsn()::text");
            auto lsn = upper.ok() ? Lsn::Parse(*upper) : Result<Lsn>(upper.status());
            if (!lsn.ok()) failures_.fetch_add(1);
            else {
              newest_batch_floor_.store(newest_batch_upper_.load());
              newest_batch_upper_.store(lsn->value());
            }
            written_.store((batch + 1) * 100);
            std::this_thread::sleep_for(pause);
          }
        }) {}
  ~StreamWriter() {
    if (thread_.joinable()) thread_.join();
  }
  void Join() { thread_.join(); }
  int total() const { return total_; }
  int written() const { return written_.load(); }
  int failures() const { return failures_.load(); }
  // Every commit of the newest completed batch ends after this position (it was read before
  // the batch began), so a slot confirmed below it has committed rows not yet confirmed.
  Lsn newest_batch_floor() const { return Lsn(newest_batch_floor_.load()); }

 private:
  const int total_;
  std::atomic<int> written_{0};
  std::atomic<int> failures_{0};
  std::atomic<uint64_t> newest_batch_floor_{0};
  std::atomic<uint64_t> newest_batch_upper_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("real broker: mixed transactions, noise and delete-after-insert arrive exactly once; the "
          "slot reaches the end") {
  RelayFixture fx{RealBroker{}};
  const std::string slot = "core";
  auto relay = fx.StartRelay(fx.WriteConfig(slot, {}));
  const auto start = Clock::now();
  int seq = 0;
  std::string sql;
  // Single-row transactions; every fifth deletes its row again in the same transaction, as an
  // outbox that keeps no rows does; interleaved with transactions on another table only.
  for (int i = 0; i < 2000; ++i) {
    ++seq;
    sql += "BEGIN;" + InsertEvent(seq);
    if (i % 5 == 0)
      sql += "DELETE FROM outbox WHERE payload->>'seq' = '" + std::to_string(seq) + "';";
    sql += "COMMIT;";
    if (i % 50 == 0) sql += "INSERT INTO unrelated (filler) VALUES (repeat('x', 500));";
  }
  fx.Exec(sql);
  sql.clear();
  // 20-row transactions that also write the noise table inside the transaction.
  for (int t = 0; t < 150; ++t) {
    sql += "BEGIN;";
    for (int i = 0; i < 20; ++i) {
      sql += InsertEvent(++seq);
      if (i == 10) sql += "INSERT INTO unrelated (filler) VALUES ('inside');";
    }
    sql += "COMMIT;";
  }
  fx.Exec(sql);
  const int big_first = seq + 1;
  sql = "BEGIN;";
  for (int i = 0; i < 5000; ++i) sql += InsertEvent(++seq);
  sql += "INSERT INTO unrelated (filler) SELECT repeat('n', 200) FROM generate_series(1, 2000);";
  sql += "DELETE FROM outbox; COMMIT;";
  fx.Exec(sql);
  // The last transaction touches only the noise table: the slot must still get past it.
  fx.Exec("INSERT INTO unrelated (filler) SELECT repeat('z', 100) FROM generate_series(1, 5000)");
  const int total = seq;
  const Lsn end = fx.CurrentWal();
  const double write_seconds = SecondsSince(start);

  auto reader = fx.Reader();
  auto records = ReadEverySeq(*reader, SeqRange(total), 120s);
  const double read_seconds = SecondsSince(start);
  // Anything after the last seq arrived would be a duplicate; ReadEverySeq read on for a while.
  auto more = reader->Poll(1500ms);
  records.insert(records.end(), more.begin(), more.end());
  auto seen = CheckRecords(records);
  const Tally tally = Count(seen, total);
  CHECK_MESSAGE(tally.lost == 0,
                "lost " << tally.lost << " seqs, first: " << Join(tally.lost_seqs));
  CHECK(tally.duplicates == 0);
  CHECK(records.size() == static_cast<size_t>(total));
  CHECK(seen.count(big_first) == 1);

  const Lsn confirmed = fx.WaitConfirmed(slot, end, 60s);
  CHECK_MESSAGE(confirmed >= end, confirmed.ToString() << " < " << end.ToString());
  const double confirm_seconds = SecondsSince(start);
  CHECK(relay->Running());
  MESSAGE("core: " << total << " rows (2,000 single-row txns of which 400 delete their row, 150 "
                   << "x 20-row, one 5,000-row txn) -> " << records.size() << " records, "
                   << tally.lost << " lost, " << tally.duplicates << " duplicates; written in "
                   << write_seconds << " s, all read " << read_seconds
                   << " s after the first write; slot seen at the end at " << confirm_seconds
                   << " s (checked after reading)");
}

namespace {

// Kills the relay `kills` times with SIGKILL while a writer streams `batches` x 100 events
// (`event` writes one), restarting it each time; then checks that every event arrived, in key
// order, and that the slot reached the end.
void KillRelayWhileStreaming(RelayFixture& fx, const std::string& slot,
                             std::map<std::string, std::string> config_overrides, int kills,
                             int batches, const std::function<std::string(int)>& event,
                             const std::string& what) {
  // A relay that keeps up confirms within milliseconds, so most kills would find nothing in
  // flight; lingering keeps records between produce and acknowledgement for most of the run.
  config_overrides["kafka.linger.ms"] = "100";
  const std::string config = fx.WriteConfig(slot, config_overrides);
  auto relay = fx.StartRelay(config);  // creates the slot before the first event is written
  StreamWriter writer(fx, batches, 120ms, event);
  const Lsn first_position = fx.ConfirmedFlush(slot);
  bool advanced_between_kills = false;
  int kills_with_rows_unconfirmed = 0;
  double longest_restart = 0;
  for (int kill = 0; kill < kills; ++kill) {
    // Long enough for an instance to connect, get acknowledgements and confirm some of them.
    std::this_thread::sleep_for(1500ms + 300ms * kill);
    // Kill just after a batch commits, while its records still linger in the producer.
    const int written = writer.written();
    while (writer.written() == written && written < writer.total())
      std::this_thread::sleep_for(2ms);
    const Lsn floor = writer.newest_batch_floor();
    const Lsn confirmed_before_kill = fx.ConfirmedFlush(slot);
    advanced_between_kills |= confirmed_before_kill > first_position;
    if (floor > Lsn() && confirmed_before_kill <= floor) ++kills_with_rows_unconfirmed;
    REQUIRE(relay->Kill(SIGKILL).ok());
    auto code = relay->Wait(10s);
    REQUIRE(code.ok());
    CHECK(*code == 128 + SIGKILL);  // died of the kill, not of something earlier
    const auto restart = Clock::now();
    fx.WaitSlotFree(slot);
    relay = fx.StartRelay(config);
    longest_restart = std::max(longest_restart, SecondsSince(restart));
  }
  writer.Join();
  REQUIRE(writer.failures() == 0);
  const Lsn end = fx.CurrentWal();
  const auto catch_up = Clock::now();
  const Lsn confirmed = fx.WaitConfirmed(slot, end, 120s);
  CHECK_MESSAGE(confirmed >= end, confirmed.ToString() << " < " << end.ToString());
  const double catch_up_seconds = SecondsSince(catch_up);

  auto records = ReadEverySeq(*fx.Reader(), SeqRange(writer.total()), 120s);
  auto seen = CheckRecords(records);
  const Tally tally = Count(seen, writer.total());
  CHECK_MESSAGE(tally.lost == 0,
                "lost " << tally.lost << " seqs, first: " << Join(tally.lost_seqs));
  std::set<std::tuple<std::string, int32_t, int64_t>> offsets;
  for (const auto& r : records) offsets.insert({r.topic, r.partition, r.offset});
  CHECK(offsets.size() == records.size());  // the reader itself read each Kafka record once
  CHECK(advanced_between_kills);
  // A kill that finds every event confirmed tests nothing; killing right after a commit, with
  // the producer lingering, makes that rare.
  CHECK(kills_with_rows_unconfirmed >= 2);
  CHECK(relay->Running());
  MESSAGE("kill -9 of the relay x"
          << kills << ", " << what << " (" << kills_with_rows_unconfirmed
          << " with committed events not yet confirmed): " << writer.total() << " events -> "
          << records.size() << " records, " << tally.lost << " lost, " << tally.duplicates
          << " duplicates; slowest kill-to-streaming " << longest_restart << " s; slot at the end "
          << catch_up_seconds << " s after the writer finished");
}

}  // namespace

TEST_CASE("real broker: kill -9 of the relay five times while a writer streams loses nothing") {
  RelayFixture fx{RealBroker{}};
  KillRelayWhileStreaming(
      fx, "killloop", {}, 5, 100, [](int seq) { return InsertEvent(seq); }, "outbox rows");
}

TEST_CASE("real broker: outbox events emitted as logical decoding messages survive kill -9 of "
          "the relay (pgoutput)") {
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  KillRelayWhileStreaming(
      fx, "killmsgs",
      {{"transforms", "decode,outbox"},
       {"transforms.decode.type",
        "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"}},
      3, 50, [](int seq) { return EmitEvent(seq); }, "pg_logical_emit_message events");
}

TEST_CASE("real broker: kill -9 of the broker mid-stream; the slot never passes an unacknowledged "
          "transaction") {
  RelayFixture fx{RealBroker{}};
  const std::string slot = "brokerkill";
  const std::string config = fx.WriteConfig(slot, {});
  auto relay = fx.StartRelay(config);

  struct Txn {
    std::vector<int> seqs;
    Lsn upper_bound;  // pg_current_wal_insert_lsn() right after its COMMIT, same session
    bool began_with_broker_dead = false;
  };
  std::mutex mu;
  std::vector<Txn> txns;
  std::atomic<bool> broker_dead{false};
  std::atomic<bool> stop{false};
  std::atomic<int> writer_errors{0};
  std::string writer_error;
  // One session commits one transaction at a time, so commits are ordered as `txns` is and the
  // insert position read right after each COMMIT bounds that transaction's commit end from above.
  std::thread writer([&] {
    PgConnPtr conn(PQconnectdb(fx.pg().ConnInfo().c_str()));
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      writer_errors = 1;
      std::lock_guard lock(mu);
      writer_error = PQerrorMessage(conn.get());
      return;
    }
    int seq = 0;
    while (!stop) {
      Txn txn;
      txn.began_with_broker_dead = broker_dead;
      std::string sql = "BEGIN;";
      for (int i = 0; i < 5; ++i) {
        txn.seqs.push_back(++seq);
        sql += InsertEvent(seq);
      }
      sql += "COMMIT; SELECT pg_current_wal_insert_lsn()::text;";
      PgResultPtr res(PQexec(conn.get(), sql.c_str()));
      if (PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
        writer_errors.fetch_add(1);
        std::lock_guard lock(mu);
        writer_error = PQresultErrorMessage(res.get());
        return;
      }
      txn.upper_bound = *Lsn::Parse(PQgetvalue(res.get(), 0, 0));
      {
        std::lock_guard lock(mu);
        txns.push_back(std::move(txn));
      }
      std::this_thread::sleep_for(10ms);
    }
  });

  // Streaming, with acknowledgements coming back, before the broker dies.
  const auto deadline = Clock::now() + 60s;
  Lsn before_kill;
  bool confirming = false;
  while (!confirming && Clock::now() < deadline && writer_errors == 0) {
    before_kill = fx.ConfirmedFlush(slot);
    Lsn fiftieth;
    {
      std::lock_guard lock(mu);
      if (txns.size() > 100) fiftieth = txns[50].upper_bound;
    }
    confirming = fiftieth > Lsn() && before_kill >= fiftieth;
    if (!confirming) std::this_thread::sleep_for(100ms);
  }
  REQUIRE_MESSAGE(writer_errors == 0, writer_error);
  REQUIRE_MESSAGE(confirming, Log(fx));

  const auto broker_down_at = Clock::now();
  REQUIRE(fx.broker().Kill(1).ok());
  broker_dead = true;
  // Several status intervals (200 ms) and reconnect attempts pass with the broker gone.
  Lsn c_max = before_kill;
  while (SecondsSince(broker_down_at) < 6) {
    c_max = std::max(c_max, fx.ConfirmedFlush(slot));
    std::this_thread::sleep_for(100ms);
  }
  stop = true;
  writer.join();
  REQUIRE_MESSAGE(writer_errors == 0, writer_error);
  REQUIRE_MESSAGE(relay->Running(), Log(fx));
  // The relay dies too before the broker returns, so the topic can only hold what reached the
  // broker before its crash: records in the relay's buffers die with it.
  REQUIRE(relay->Kill(SIGKILL).ok());
  REQUIRE(relay->Wait(10s).ok());
  fx.WaitSlotFree(slot);
  c_max = std::max(c_max, fx.ConfirmedFlush(slot));
  const double outage_seconds = SecondsSince(broker_down_at);

  const auto broker_start = Clock::now();
  Status started = fx.broker().StartNode(1);
  REQUIRE_MESSAGE(started.ok(), started.ToString() << "\n" << fx.broker().LogTail(1));
  const double broker_restart_seconds = SecondsSince(broker_start);

  // Why this check is sound: T's commit record ends at or before upper_bound(T), because the
  // insert position was read after COMMIT returned. The relay may confirm C only once every
  // transaction whose commit ends at or before C is acknowledged, and records a single broker
  // acknowledged survive kill -9 of its JVM (they are in the page cache). So upper_bound(T) <=
  // Cmax implies T was acknowledged and is in the topic now. And it can fail: had the relay
  // confirmed the commit of a transaction produced while the broker was dead, that transaction
  // is absent (the relay died before the broker came back), and with one writer nothing but
  // an occasional background WAL record comes between the COMMIT and the SELECT, so its upper
  // bound equals its commit end and lies at or before Cmax. Blind spot: a record sent before
  // the crash that the broker stored but never acknowledged is present either way, so an early
  // confirmation of it goes unseen; it loses nothing, though.
  std::set<int> must_be_present;
  std::set<int> all_seqs;
  int confirmed_txns = 0;
  int held_txns = 0;
  int txns_after_kill = 0;
  for (const auto& t : txns) {
    all_seqs.insert(t.seqs.begin(), t.seqs.end());
    if (t.began_with_broker_dead) ++txns_after_kill;
    if (t.upper_bound <= c_max) {
      ++confirmed_txns;
      must_be_present.insert(t.seqs.begin(), t.seqs.end());
    } else {
      ++held_txns;
    }
  }
  auto frozen_reader = fx.Reader();
  auto frozen = ReadEverySeq(*frozen_reader, must_be_present, 60s);
  std::set<int> present;
  for (const auto& r : frozen) present.insert(SeqOf(r));
  int missing_confirmed = 0;
  for (const auto& t : txns) {
    if (t.upper_bound > c_max) continue;
    for (int s : t.seqs) {
      if (present.count(s)) continue;
      ++missing_confirmed;
      if (missing_confirmed <= 5)
        FAIL_CHECK("seq " << s << " is in a transaction ending at or before "
                          << t.upper_bound.ToString() << ", the slot was confirmed up to "
                          << c_max.ToString() << ", but Kafka does not have it");
    }
  }
  CHECK(missing_confirmed == 0);
  int present_after_kill = 0;
  for (const auto& t : txns)
    if (t.began_with_broker_dead)
      for (int s : t.seqs) present_after_kill += static_cast<int>(present.count(s));
  // The test is only as strong as its outage: transactions written with the broker dead exist,
  // none of them reached Kafka, and the slot stayed before all of them.
  CHECK(txns_after_kill > 10);
  CHECK(present_after_kill == 0);
  CHECK(held_txns >= txns_after_kill);
  CHECK(confirmed_txns > 50);

  // A fresh relay sends what was held, once the broker is back.
  const auto recovery = Clock::now();
  relay = fx.StartRelay(config);
  auto records = ReadEverySeq(*fx.Reader(), all_seqs, 120s);
  const double recovery_seconds = SecondsSince(recovery);
  auto seen = CheckRecords(records);
  const int total = static_cast<int>(all_seqs.size());
  REQUIRE(*all_seqs.rbegin() == total);
  const Tally tally = Count(seen, total);
  CHECK_MESSAGE(tally.lost == 0,
                "lost " << tally.lost << " seqs, first: " << Join(tally.lost_seqs));
  const Lsn end = fx.CurrentWal();
  CHECK(fx.WaitConfirmed(slot, end, 60s) >= end);
  MESSAGE("broker kill -9: " << txns.size() << " txns / " << total << " rows, " << txns_after_kill
                             << " txns written with the broker dead; Cmax " << c_max.ToString()
                             << " covers " << confirmed_txns << " txns, of whose rows "
                             << missing_confirmed << " are missing from Kafka; outage "
                             << outage_seconds << " s; broker restart on its log dir "
                             << broker_restart_seconds
                             << " s; after a relay restart all rows read in " << recovery_seconds
                             << " s: " << records.size() << " records, " << tally.lost << " lost, "
                             << tally.duplicates << " duplicates");
}

TEST_CASE("real broker, 3 nodes: kill -9 of a partition leader mid-stream loses nothing") {
  devtools::KafkaBrokerOptions three;
  three.nodes = 3;
  RelayFixture fx{RealBroker{three}};
  const std::string slot = "leaderkill";
  for (const auto& topic : OutboxTopics()) {
    Status st = fx.broker().CreateTopic(topic, 3, 3);
    REQUIRE_MESSAGE(st.ok(), st.ToString());
  }
  auto relay = fx.StartRelay(fx.WriteConfig(slot, {}));
  StreamWriter writer(fx, 100, 100ms);
  // Mid-stream: rows confirmed through all three leaders, most rows still to come.
  const auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline && writer.written() < 1500) std::this_thread::sleep_for(50ms);
  const Lsn early = writer.newest_batch_floor();
  const Lsn early_confirmed = fx.WaitConfirmed(slot, early, 60s);
  REQUIRE_MESSAGE(early_confirmed >= early, Log(fx));
  REQUIRE(writer.written() < writer.total());
  auto leader = fx.broker().LeaderOf("outbox.event.Order", 0);
  REQUIRE_MESSAGE(leader.ok(), leader.status().ToString());
  const int victim = *leader;
  const int written_at_kill = writer.written();
  const auto killed_at = Clock::now();
  REQUIRE(fx.broker().Kill(victim).ok());
  // Rows committed after the kill can only be acknowledged by a new leader for the partitions
  // the dead node led; recovered means the slot is confirmed past them.
  while (writer.written() < std::min(written_at_kill + 300, writer.total()) &&
         SecondsSince(killed_at) < 60)
    std::this_thread::sleep_for(50ms);
  const Lsn after_kill = fx.CurrentWal();
  const Lsn passed = fx.WaitConfirmed(slot, after_kill, 120s);
  CHECK_MESSAGE(passed >= after_kill, "slot stuck at " << passed.ToString()
                                                       << " after the leader died\n"
                                                       << Log(fx));
  const double recover_seconds = SecondsSince(killed_at);
  int new_leader = victim;
  while (new_leader == victim && SecondsSince(killed_at) < 60) {
    auto leader_now = fx.broker().LeaderOf("outbox.event.Order", 0);
    if (leader_now.ok()) new_leader = *leader_now;
    if (new_leader == victim) std::this_thread::sleep_for(200ms);
  }
  CHECK(new_leader != victim);

  writer.Join();
  REQUIRE(writer.failures() == 0);
  const Lsn end = fx.CurrentWal();
  CHECK(fx.WaitConfirmed(slot, end, 120s) >= end);
  CHECK(relay->Running());

  const auto node_start = Clock::now();
  Status restarted = fx.broker().StartNode(victim);
  CHECK_MESSAGE(restarted.ok(), restarted.ToString() << "\n" << fx.broker().LogTail(victim));
  const double node_restart_seconds = SecondsSince(node_start);

  auto records = ReadEverySeq(*fx.Reader(), SeqRange(writer.total()), 120s);
  auto seen = CheckRecords(records);
  const Tally tally = Count(seen, writer.total());
  CHECK_MESSAGE(tally.lost == 0,
                "lost " << tally.lost << " seqs, first: " << Join(tally.lost_seqs));
  MESSAGE("3 nodes, leader (node "
          << victim << ") of outbox.event.Order/0 killed after " << written_at_kill
          << " rows written: " << writer.total() << " rows -> " << records.size() << " records, "
          << tally.lost << " lost, " << tally.duplicates << " duplicates; new leader node "
          << new_leader << "; slot past 300 rows written after the kill " << recover_seconds
          << " s after it; node back in " << node_restart_seconds << " s");
}
