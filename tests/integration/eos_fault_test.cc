// Exactly-once delivery (exactly.once.support=required, docs/exactly-once.md) under faults, on a
// real Apache Kafka broker and a real PostgreSQL: kill -9 of the relay, kill -9 and restart of
// the broker, a standby fencing a frozen active relay. What counts is what a read_committed
// consumer reads: every outbox event once, in per-key order, nothing lost. A read_uncommitted
// consumer's view of the kill loop shows what the aborted transactions held, and the same kill
// loop without exactly.once.support shows the duplicates the harness exists to catch.
//
// Records are counted by the outbox seq in their payload (and the id header, checked against
// it). Order is strict here: within a partition a key's seqs must only grow, with no allowance
// for replays, since exactly-once has none.
//
// Every case starts its own PostgreSQL and broker, as broker_delivery does.
#include <libpq-fe.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sstream>
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
using devtools::IsolationLevel;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What one reader saw of seqs 1..rows.
struct Counts {
  int rows = 0;
  size_t records = 0;
  int lost = 0;
  int duplicates = 0;
  int order_violations = 0;  // a record whose seq is not above its key's previous one
  int keys_on_two_partitions = 0;
  int malformed = 0;           // topic, key or id header not the seq's
  int reread_offsets = 0;      // the reader returned one Kafka record twice
  std::vector<int> lost_seqs;  // the first few
  std::string first_violation;
};

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string Describe(const Counts& c) {
  std::ostringstream out;
  out << c.rows << " rows -> " << c.records << " records, " << c.lost << " lost, " << c.duplicates
      << " duplicates, " << c.order_violations << " order violations";
  return out.str();
}

Counts CountRecords(const std::vector<ConsumedRecord>& records, int rows) {
  Counts c;
  c.rows = rows;
  c.records = records.size();
  std::map<int, int> seen;
  std::map<std::tuple<std::string, int32_t, std::string>, int> last_seq;
  std::map<std::string, std::set<std::pair<std::string, int32_t>>> partitions_of_key;
  std::set<std::tuple<std::string, int32_t, int64_t>> offsets;
  for (const auto& r : records) {
    if (!offsets.insert({r.topic, r.partition, r.offset}).second) ++c.reread_offsets;
    if (!r.key || !r.value) {
      ++c.malformed;
      continue;
    }
    const int seq = SeqOf(r);
    const std::string& type = kAggregateTypes[seq % 3];
    char id[40];
    std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", seq);
    if (r.topic != "outbox.event." + type || *r.key != type + "-" + std::to_string(seq % 17) ||
        HeaderValue(r, "id") != id)
      ++c.malformed;
    ++seen[seq];
    partitions_of_key[*r.key].insert({r.topic, r.partition});
    int& last = last_seq[{r.topic, r.partition, *r.key}];
    if (seq <= last) {
      ++c.order_violations;
      if (c.first_violation.empty())
        c.first_violation = "key " + *r.key + ": seq " + std::to_string(seq) + " at " + r.topic +
                            "/" + std::to_string(r.partition) + "@" + std::to_string(r.offset) +
                            " after seq " + std::to_string(last);
    }
    last = std::max(last, seq);
  }
  for (const auto& [key, parts] : partitions_of_key)
    if (parts.size() > 1) ++c.keys_on_two_partitions;
  for (int s = 1; s <= rows; ++s) {
    auto it = seen.find(s);
    if (it == seen.end()) {
      ++c.lost;
      if (c.lost_seqs.size() < 20) c.lost_seqs.push_back(s);
    } else {
      c.duplicates += it->second - 1;
    }
  }
  for (const auto& [seq, n] : seen)
    if (seq < 1 || seq > rows) c.duplicates += n;  // not written by this case: never expected
  return c;
}

// Reads the outbox topics with a fresh reader of `isolation` until every seq 1..rows was seen,
// then 1.5 s longer, so records that follow (duplicates) are counted too.
Counts ReadAndCount(RelayFixture& fx, IsolationLevel isolation, int rows,
                    std::chrono::seconds timeout) {
  auto reader = fx.Reader(isolation);
  return CountRecords(ReadEverySeq(*reader, SeqRange(rows), timeout), rows);
}

// Checks the counts an exactly-once case must reach; `what` names the case.
void CheckExactlyOnce(const Counts& c, const std::string& what) {
  INFO(what);
  CHECK_MESSAGE(c.lost == 0, "lost " << c.lost << " seqs, first: " << Join(c.lost_seqs));
  CHECK(c.duplicates == 0);
  CHECK_MESSAGE(c.order_violations == 0, "first: " << c.first_violation);
  CHECK(c.records == static_cast<size_t>(c.rows));
  CHECK(c.keys_on_two_partitions == 0);
  CHECK(c.malformed == 0);
  CHECK(c.reread_offsets == 0);
}

// Streams `txns` transactions of 10 outbox events from a thread, one at a time with `pause`
// after each, so faults land while events are being written, decoded and produced. Short
// pauses keep records in flight all the time (the relay's producer lingers 100 ms), so the
// relay confirms on its status timer rather than whenever it has caught up.
class StreamWriter {
 public:
  StreamWriter(RelayFixture& fx, int txns, std::chrono::milliseconds pause)
      : total_(txns * kRowsPerTxn), thread_([this, &fx, txns, pause] {
          PgConnPtr conn(PQconnectdb(fx.pg().ConnInfo().c_str()));
          if (PQstatus(conn.get()) != CONNECTION_OK) {
            failures_.fetch_add(1);
            written_.store(total_);
            return;
          }
          for (int t = 0; t < txns; ++t) {
            std::string sql = "BEGIN;";
            for (int i = 1; i <= kRowsPerTxn; ++i) sql += InsertEvent(t * kRowsPerTxn + i);
            sql += "COMMIT; SELECT pg_current_wal_insert_lsn()::text;";
            PgResultPtr res(PQexec(conn.get(), sql.c_str()));
            auto lsn = PQresultStatus(res.get()) == PGRES_TUPLES_OK
                           ? Lsn::Parse(PQgetvalue(res.get(), 0, 0))
                           : Result<Lsn>(Status::Internal(PQresultErrorMessage(res.get())));
            if (!lsn.ok()) {
              failures_.fetch_add(1);
            } else {
              newest_txn_floor_.store(newest_txn_upper_.load());
              newest_txn_upper_.store(lsn->value());
            }
            written_.store((t + 1) * kRowsPerTxn);
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
  // The newest committed transaction's commit ends after this position (read before it began),
  // so a slot confirmed below it has committed rows not yet confirmed.
  Lsn newest_txn_floor() const { return Lsn(newest_txn_floor_.load()); }
  // Returns once the next transaction has committed (or the writer is done).
  void WaitNextTxn() const {
    const int now = written();
    while (written() == now && now < total_) std::this_thread::sleep_for(1ms);
  }

 private:
  static constexpr int kRowsPerTxn = 10;
  const int total_;
  std::atomic<int> written_{0};
  std::atomic<int> failures_{0};
  std::atomic<uint64_t> newest_txn_floor_{0};
  std::atomic<uint64_t> newest_txn_upper_{0};
  std::thread thread_;
};

std::map<std::string, std::string> ExactlyOnce(std::map<std::string, std::string> more = {}) {
  more["exactly.once.support"] = "required";
  more["offsets.storage.topic"] = "walrelay-offsets";
  return more;
}

// Lines of a relay log that say why it stopped or what went wrong, for messages.
std::string Notable(const std::string& log) {
  std::string out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find("error") != std::string::npos || line.find("fenced") != std::string::npos ||
        line.find("fatal") != std::string::npos || line.find("warn") != std::string::npos ||
        line.find("exit") != std::string::npos || line.find("abort") != std::string::npos)
      out += line + "\n";
  }
  return out;
}

// Starts `walrelay run` and waits until it streams, failing at once (with its exit code and
// log) if it exits first: a relay that refuses the config must not cost a 20 s wait.
std::unique_ptr<devtools::ChildProcess> StartRelay(RelayFixture& fx, const std::string& config) {
  auto relay = fx.SpawnRelay(config);
  const std::string log = fx.log_path();
  const auto deadline = Clock::now() + 20s;
  while (Clock::now() < deadline) {
    if (devtools::ReadFile(log).find("streaming slot") != std::string::npos) return relay;
    if (!relay->Running()) {
      auto code = relay->Wait(1s);
      FAIL("walrelay exited with " << (code.ok() ? std::to_string(*code) : code.status().ToString())
                                   << " before streaming:\n"
                                   << devtools::ReadFile(log));
    }
    std::this_thread::sleep_for(20ms);
  }
  FAIL("walrelay is not streaming 20 s after start:\n" << devtools::ReadFile(log));
  return relay;
}

struct KillLoopResult {
  Counts committed;    // read_committed
  Counts uncommitted;  // read_uncommitted, when asked for
  int kills_with_rows_unconfirmed = 0;
  // Restarts that found Kafka ahead of the slot and started the stream past it (exactly once).
  int restarts_past_slot = 0;
  double longest_restart = 0;
  double catch_up_seconds = 0;
  double seconds = 0;
};

// Kills the relay `kills` times with SIGKILL while a writer streams `txns` 10-event
// transactions (`pause` after each), restarting it each time; then waits for the slot to reach
// the end and reads the topics back. With `alternate_overrides`, every other instance (the
// 2nd, 4th, ...) runs with those keys added: same connector, same slot, another setting.
KillLoopResult KillRelayWhileStreaming(
    RelayFixture& fx, const std::string& slot, std::map<std::string, std::string> config_overrides,
    int kills, int txns, std::chrono::milliseconds pause, bool read_uncommitted_too,
    const std::map<std::string, std::string>& alternate_overrides = {}) {
  const auto start = Clock::now();
  KillLoopResult result;
  // Without transactions, records linger between produce and acknowledgement, so most kills
  // find some in flight; with them, the open Kafka transaction plays that part.
  config_overrides["kafka.linger.ms"] = "100";
  // Positions reach the slot on the status timer while records are in flight: a second (the
  // default is 10) leaves acknowledged, or committed, records unconfirmed at most kills, which
  // is what a restart must not repeat.
  config_overrides["status.update.interval.ms"] = "1000";
  const std::string config = fx.WriteConfig(slot, config_overrides);
  std::string alternate = config;
  if (!alternate_overrides.empty()) {
    auto more = config_overrides;
    for (const auto& [k, v] : alternate_overrides) more[k] = v;
    alternate = fx.WriteConfig(slot, more);
  }
  auto relay = StartRelay(fx, config);  // creates the slot before the first event is written
  StreamWriter writer(fx, txns, pause);
  const Lsn first_position = fx.ConfirmedFlush(slot);
  bool advanced_between_kills = false;
  std::vector<std::string> restart_logs;
  for (int kill = 0; kill < kills; ++kill) {
    // Long enough for an instance to start, commit and confirm some transactions.
    std::this_thread::sleep_for(1300ms + 150ms * kill);
    // Kill at varying distances after a transaction commits.
    writer.WaitNextTxn();
    std::this_thread::sleep_for(5ms * (kill % 4));
    const Lsn floor = writer.newest_txn_floor();
    const Lsn confirmed_before_kill = fx.ConfirmedFlush(slot);
    advanced_between_kills |= confirmed_before_kill > first_position;
    if (floor > Lsn() && confirmed_before_kill <= floor) ++result.kills_with_rows_unconfirmed;
    REQUIRE_MESSAGE(relay->Running(), "relay stopped before kill " << kill + 1 << ":\n" << Log(fx));
    REQUIRE(relay->Kill(SIGKILL).ok());
    auto code = relay->Wait(10s);
    REQUIRE(code.ok());
    CHECK(*code == 128 + SIGKILL);  // died of the kill, not of something earlier
    const auto restart = Clock::now();
    fx.WaitSlotFree(slot);
    relay = StartRelay(fx, kill % 2 == 0 ? alternate : config);
    result.longest_restart = std::max(result.longest_restart, SecondsSince(restart));
    restart_logs.push_back(fx.log_path());
  }
  writer.Join();
  REQUIRE(writer.failures() == 0);
  const Lsn end = fx.CurrentWal();
  const auto catch_up = Clock::now();
  const Lsn confirmed = fx.WaitConfirmed(slot, end, 90s);
  CHECK_MESSAGE(confirmed >= end, "slot at " << confirmed.ToString() << " < " << end.ToString()
                                             << "\n"
                                             << Notable(Log(fx)));
  result.catch_up_seconds = SecondsSince(catch_up);
  for (const auto& path : restart_logs)
    if (devtools::ReadFile(path).find("exactly-once: offsets topic") != std::string::npos)
      ++result.restarts_past_slot;
  result.committed = ReadAndCount(fx, IsolationLevel::kReadCommitted, writer.total(), 90s);
  if (read_uncommitted_too)
    result.uncommitted = ReadAndCount(fx, IsolationLevel::kReadUncommitted, writer.total(), 60s);
  CHECK(advanced_between_kills);
  // A kill that finds every event confirmed tests nothing.
  CHECK(result.kills_with_rows_unconfirmed >= 2);
  CHECK_MESSAGE(relay->Running(), Log(fx));
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace

TEST_CASE("exactly once: kill -9 of the relay ten times during a 20,000-row stream; read_committed "
          "sees every row once, in key order; read_uncommitted sees the aborted transactions") {
  RelayFixture fx{RealBroker{}};
  // Every other instance commits at every source commit instead of on the default interval.
  // With `interval` most kills find an open Kafka transaction, which the next instance aborts;
  // with `source.commit` the relay is committing most of the time, so kills may also land after
  // a Kafka commit and before the slot's confirmation (a window of milliseconds), and the next
  // instance starts past the slot, where the offsets topic says. Whether a kill hits that window
  // is chance, so it is reported, not asserted; exactly_once_relay_test.cc puts a slot behind
  // the offsets topic for certain.
  const auto r = KillRelayWhileStreaming(fx, "eoskill", ExactlyOnce(), 10, 2000, 8ms, true,
                                         {{"transaction.boundary", "source.commit"}});
  CheckExactlyOnce(r.committed, "read_committed after 10 kills");
  MESSAGE("exactly once, kill -9 of the relay x10, boundary interval and source.commit in turn ("
          << r.kills_with_rows_unconfirmed << " with committed rows not yet confirmed; "
          << r.restarts_past_slot << " restarts started past the slot, from the offsets topic), "
          << "read_committed: " << Describe(r.committed) << "; slowest kill-to-streaming "
          << r.longest_restart << " s; slot at the end " << r.catch_up_seconds
          << " s after the writer finished; " << r.seconds << " s in all");
  // What a read_uncommitted consumer of the same topics gets: the committed records plus those
  // of the transactions the kills left open (aborted when the next relay initialised).
  const Counts& u = r.uncommitted;
  CHECK_MESSAGE(u.lost == 0,
                "read_uncommitted lost " << u.lost << ", first: " << Join(u.lost_seqs));
  CHECK(u.records >= r.committed.records);
  CHECK(u.malformed == 0);
  MESSAGE("exactly once, kill -9 of the relay x10, read_uncommitted: "
          << Describe(u) << " (" << u.records - r.committed.records
          << " records of aborted transactions)");
}

TEST_CASE("exactly once: kill -9 and restart of the broker mid-stream; read_committed sees every "
          "row once, in key order") {
  RelayFixture fx{RealBroker{}};
  const auto start = Clock::now();
  const std::string slot = "eosbroker";
  const std::string config = fx.WriteConfig(slot, ExactlyOnce());
  auto relay = StartRelay(fx, config);
  StreamWriter writer(fx, 500, 15ms);
  // Mid-stream, with transactions committed and confirmed before the broker dies.
  const auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline && writer.written() < 1500) std::this_thread::sleep_for(50ms);
  const Lsn early = writer.newest_txn_floor();
  REQUIRE_MESSAGE(fx.WaitConfirmed(slot, early, 30s) >= early, Log(fx));
  writer.WaitNextTxn();
  const int written_at_kill = writer.written();
  REQUIRE(written_at_kill < writer.total());
  const auto killed_at = Clock::now();
  REQUIRE(fx.broker().Kill(1).ok());
  // Transactions Kafka committed just before the kill may still be confirmed at the next status
  // update (200 ms); after that the slot must stand still.
  std::this_thread::sleep_for(1s);
  const Lsn confirmed_at_kill = fx.ConfirmedFlush(slot);
  std::this_thread::sleep_for(2s);
  // Nothing may be confirmed that Kafka did not commit: with the broker dead nothing commits.
  const Lsn confirmed_while_down = fx.ConfirmedFlush(slot);
  CHECK_MESSAGE(confirmed_while_down == confirmed_at_kill,
                "slot moved from " << confirmed_at_kill.ToString() << " to "
                                   << confirmed_while_down.ToString() << " with the broker dead");
  const int written_while_down = writer.written() - written_at_kill;
  const auto broker_start = Clock::now();
  Status started = fx.broker().StartNode(1);
  REQUIRE_MESSAGE(started.ok(), started.ToString() << "\n" << fx.broker().LogTail(1));
  const double broker_restart_seconds = SecondsSince(broker_start);
  const auto broker_back = Clock::now();
  const double outage_seconds = SecondsSince(killed_at);

  // The relay should ride the outage out. Should it stop instead (a fatal producer error), it
  // is started again, as a supervisor would; the test reports how often and why.
  std::vector<std::string> exits;
  writer.Join();
  REQUIRE(writer.failures() == 0);
  const Lsn end = fx.CurrentWal();
  const auto catch_up = Clock::now();
  while (fx.ConfirmedFlush(slot) < end && SecondsSince(catch_up) < 90) {
    if (!relay->Running()) {
      auto code = relay->Wait(1s);
      exits.push_back("exit " + std::to_string(code.ok() ? *code : -1) + ": " + Notable(Log(fx)));
      REQUIRE(exits.size() <= 3);
      fx.WaitSlotFree(slot);
      relay = StartRelay(fx, config);
    }
    std::this_thread::sleep_for(100ms);
  }
  const Lsn confirmed = fx.ConfirmedFlush(slot);
  CHECK_MESSAGE(confirmed >= end, "slot at " << confirmed.ToString() << " < " << end.ToString()
                                             << "\n"
                                             << Notable(Log(fx)));
  const double catch_up_seconds = SecondsSince(catch_up);
  const double recovery_seconds = SecondsSince(broker_back);
  const Counts c = ReadAndCount(fx, IsolationLevel::kReadCommitted, writer.total(), 90s);
  CheckExactlyOnce(c, "read_committed after the broker restart");
  std::string exit_lines;
  for (const auto& e : exits) exit_lines += "\n  " + e;
  CHECK_MESSAGE(exits.empty(), "the relay stopped during the broker outage:" << exit_lines);
  CHECK(relay->Running());
  MESSAGE("exactly once, kill -9 of the broker after "
          << written_at_kill << " rows (" << written_while_down
          << " more written while it was down, outage " << outage_seconds << " s, broker restart "
          << broker_restart_seconds << " s), read_committed: " << Describe(c) << "; relay restarts "
          << exits.size() << "; slot at the end " << catch_up_seconds
          << " s after the writer finished, " << recovery_seconds
          << " s after the broker was back; " << SecondsSince(start) << " s in all");
}

TEST_CASE("exactly once: a standby takes over from a frozen relay and fences it; the woken relay "
          "commits nothing and waits as a standby") {
  RelayFixture fx{RealBroker{}};
  const auto start = Clock::now();
  // PostgreSQL drops the frozen relay's walsender after 3 s without a reply.
  fx.Exec("ALTER SYSTEM SET wal_sender_timeout = '3s'");
  fx.Exec("SELECT pg_reload_conf()");
  const std::string slot = "eosfence";
  // A long interval keeps a Kafka transaction open with records in it most of the time, so the
  // frozen relay holds one when the standby fences it.
  const std::string config = fx.WriteConfig(
      slot,
      ExactlyOnce({{"slot.retry.delay.ms", "300"}, {"transaction.boundary.interval.ms", "2000"}}));
  auto active = StartRelay(fx, config);
  const std::string active_log = fx.log_path();
  auto standby = fx.SpawnRelay(config);
  const std::string standby_log = fx.log_path();
  REQUIRE_MESSAGE(devtools::WaitForFileContains(standby_log, "standby:", 20s),
                  devtools::ReadFile(standby_log));

  StreamWriter writer(fx, 500, 15ms);
  const auto deadline = Clock::now() + 60s;
  while (Clock::now() < deadline && writer.written() < 1500) std::this_thread::sleep_for(50ms);
  const Lsn early = writer.newest_txn_floor();
  REQUIRE_MESSAGE(fx.WaitConfirmed(slot, early, 30s) >= early, devtools::ReadFile(active_log));
  // A standby must not fence the active relay merely by starting.
  REQUIRE_MESSAGE(active->Running(), devtools::ReadFile(active_log));
  CHECK(standby->Running());
  CHECK(devtools::ReadFile(standby_log).find("took over") == std::string::npos);

  // Freeze the active relay just after a batch was committed, while its records sit in an
  // open Kafka transaction.
  writer.WaitNextTxn();
  std::this_thread::sleep_for(150ms);
  const int written_at_stop = writer.written();
  const auto stopped_at = Clock::now();
  REQUIRE(active->Kill(SIGSTOP).ok());
  const Lsn confirmed_at_stop = fx.ConfirmedFlush(slot);
  const bool took_over = devtools::WaitForFileContains(standby_log, "took over", 30s);
  const double takeover_seconds = SecondsSince(stopped_at);
  REQUIRE_MESSAGE(took_over, devtools::ReadFile(standby_log));
  {
    // The standby initialised transactions (fencing) only once it had the slot.
    const std::string log = devtools::ReadFile(standby_log);
    const size_t waited = log.find("standby:");
    const size_t initialised = log.find("initialised transactions");
    CHECK_MESSAGE((initialised != std::string::npos && initialised > waited), log);
  }
  // The standby streams and confirms past what the frozen relay had been given.
  const Lsn past_freeze = writer.newest_txn_floor();
  const Lsn moved = fx.WaitConfirmed(slot, past_freeze, 60s);
  CHECK_MESSAGE(moved >= past_freeze, devtools::ReadFile(standby_log));
  const double standby_streaming_seconds = SecondsSince(stopped_at);

  // Wake the frozen relay: it finds its stream gone and its producers fenced. It drops what it
  // held open, replaces its producers and waits as a standby: no exit, nothing committed.
  const auto woken_at = Clock::now();
  REQUIRE(active->Kill(SIGCONT).ok());
  const size_t standby_lines_before = Count(devtools::ReadFile(active_log), "standby:");
  const bool waits = Eventually(
      [&] { return Count(devtools::ReadFile(active_log), "standby:") > standby_lines_before; },
      30s);
  const double standby_seconds = SecondsSince(woken_at);
  const std::string woken_log = devtools::ReadFile(active_log);
  CHECK_MESSAGE(waits, "the woken relay is no standby 30 s after SIGCONT:\n" << Notable(woken_log));
  CHECK_MESSAGE(active->Running(), Notable(woken_log));
  CHECK(woken_log.find("error fenced: ") == std::string::npos);

  writer.Join();
  REQUIRE(writer.failures() == 0);
  const Lsn end = fx.CurrentWal();
  const Lsn confirmed = fx.WaitConfirmed(slot, end, 60s);
  CHECK_MESSAGE(confirmed >= end, "slot at " << confirmed.ToString() << " < " << end.ToString()
                                             << "\n"
                                             << Notable(devtools::ReadFile(standby_log)));
  CHECK_MESSAGE(standby->Running(), devtools::ReadFile(standby_log));
  const Counts c = ReadAndCount(fx, IsolationLevel::kReadCommitted, writer.total(), 90s);
  CheckExactlyOnce(c, "read_committed after the takeover");
  // Anything the woken relay committed would be a duplicate of what the standby replayed; the
  // slot's position it confirmed before freezing is all PostgreSQL may have from it.
  MESSAGE("exactly once, standby takeover: relay frozen (SIGSTOP) after "
          << written_at_stop << " rows at slot " << confirmed_at_stop.ToString()
          << "; standby took over " << takeover_seconds
          << " s later, confirmed past the freeze after " << standby_streaming_seconds
          << " s; woken relay waited as a standby " << standby_seconds
          << " s after SIGCONT; read_committed: " << Describe(c) << "; " << SecondsSince(start)
          << " s in all");
  MESSAGE("woken relay's last lines:\n" << Notable(woken_log));
}

// A slot free for a moment (a terminated walsender, a PostgreSQL restart, POST /restart of the
// active) is no takeover: a standby initialises the transactional ids only once the slot is its
// own, so it never fences a healthy active; and a process whose producers were fenced while it
// waited replaces them and initialises again when it takes the slot, instead of exiting.
TEST_CASE("exactly once: the active's walsender terminated 30 times with a standby polling every "
          "200 ms under load: no exit, read_committed sees every row once") {
  RelayFixture fx{RealBroker{}};
  const auto start = Clock::now();
  const std::string slot = "eosflap";
  const std::string config =
      fx.WriteConfig(slot, ExactlyOnce({{"slot.retry.delay.ms", "200"},
                                        {"status.update.interval.ms", "1000"},
                                        {"kafka.linger.ms", "50"}}));
  auto first = StartRelay(fx, config);
  const std::string first_log = fx.log_path();
  auto second = fx.SpawnRelay(config);
  const std::string second_log = fx.log_path();
  REQUIRE_MESSAGE(devtools::WaitForFileContains(second_log, "standby:", 20s),
                  devtools::ReadFile(second_log));

  StreamWriter writer(fx, 1200, 20ms);
  const std::string terminate =
      "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE "
      "slot_name = '" +
      slot + "' AND active";
  int terminated = 0;
  int attempts = 0;
  while (terminated < 30 && attempts < 600) {
    ++attempts;
    std::this_thread::sleep_for(std::chrono::milliseconds(400 + 150 * (attempts % 5)));
    writer.WaitNextTxn();
    if (fx.Value(terminate) == "1") ++terminated;
    REQUIRE_MESSAGE(first->Running(), Notable(devtools::ReadFile(first_log)));
    REQUIRE_MESSAGE(second->Running(), Notable(devtools::ReadFile(second_log)));
  }
  CHECK(terminated == 30);
  writer.Join();
  REQUIRE(writer.failures() == 0);
  const Lsn end = fx.CurrentWal();
  const Lsn confirmed = fx.WaitConfirmed(slot, end, 90s);
  const std::string logs = devtools::ReadFile(first_log) + devtools::ReadFile(second_log);
  CHECK_MESSAGE(confirmed >= end, "slot at " << confirmed.ToString() << " < " << end.ToString()
                                             << "\n"
                                             << Notable(logs));
  CHECK_MESSAGE(first->Running(), Notable(devtools::ReadFile(first_log)));
  CHECK_MESSAGE(second->Running(), Notable(devtools::ReadFile(second_log)));
  CHECK(logs.find("error fenced: ") == std::string::npos);
  const Counts c = ReadAndCount(fx, IsolationLevel::kReadCommitted, writer.total(), 90s);
  CheckExactlyOnce(c, "read_committed after 30 walsender terminations");
  MESSAGE("exactly once, " << terminated << " walsender terminations under a " << writer.total()
                           << "-row stream: takeovers " << Count(logs, "took over slot")
                           << ", producers replaced " << Count(logs, "new Kafka producers")
                           << ", fenced while streaming "
                           << Count(logs, "another process of this connector initialised")
                           << ", initialisations " << Count(logs, "initialised transactions")
                           << "; read_committed: " << Describe(c) << "; " << SecondsSince(start)
                           << " s in all");
  REQUIRE(first->Kill(SIGTERM).ok());
  REQUIRE(second->Kill(SIGTERM).ok());
  REQUIRE(first->Wait(20s).ok());
  REQUIRE(second->Wait(20s).ok());
}

TEST_CASE("contrast: the same kill loop without exactly.once.support gives read_committed "
          "consumers duplicates") {
  RelayFixture fx{RealBroker{}};
  const auto r = KillRelayWhileStreaming(fx, "alokill", {}, 5, 500, 20ms, false);
  const Counts& c = r.committed;
  CHECK_MESSAGE(c.lost == 0, "lost " << c.lost << " seqs, first: " << Join(c.lost_seqs));
  CHECK(c.malformed == 0);
  CHECK(c.reread_offsets == 0);
  // At least once: the kills repeat records, and the harness sees them.
  CHECK(c.duplicates > 0);
  MESSAGE("at least once (exactly.once.support unset), kill -9 of the relay x5 ("
          << r.kills_with_rows_unconfirmed << " with committed rows not yet confirmed), "
          << "read_committed: " << Describe(c) << "; " << r.seconds << " s in all");
}

namespace {

int SplitLines(const std::string& log) {
  int n = 0;
  for (size_t at = log.find("outgrew its Kafka transaction"); at != std::string::npos;
       at = log.find("outgrew its Kafka transaction", at + 1))
    ++n;
  return n;
}

// Waits until the relay whose log is `log` committed a split, failing if it exits first or if
// it relayed the rest of the transaction (ending at `end`) within one split interval.
void WaitForSplit(RelayFixture& fx, devtools::ChildProcess& relay, const std::string& log,
                  const std::string& slot, Lsn end, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline && SplitLines(devtools::ReadFile(log)) == 0) {
    REQUIRE_MESSAGE(relay.Running(), "the relay stopped before it split the transaction:\n"
                                         << Notable(devtools::ReadFile(log)));
    REQUIRE_MESSAGE(fx.ConfirmedFlush(slot) < end,
                    "the rest of the transaction was relayed within one split interval: make "
                    "WALRELAY_TEST_SPLIT_ROWS larger");
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE_MESSAGE(SplitLines(devtools::ReadFile(log)) > 0, "no split within "
                                                               << timeout.count() << " s:\n"
                                                               << Notable(devtools::ReadFile(log)));
}

}  // namespace

// The size of this case's one transaction: WALRELAY_TEST_SPLIT_ROWS (600,000 by default, with a
// 3 s Kafka transaction timeout; tests/CMakeLists.txt registers the 2,000,000-row, 10 s run as
// broker_large_transaction). Each of the first two instances must still be relaying when its
// first split (after a second) commits: on an idle 2-core machine a relay passes about 190,000
// rows a second, so 300,000 rows left the second instance nothing to split.
TEST_CASE("exactly once: one source transaction that outlives kafka.transaction.timeout.ms is "
          "split over Kafka transactions; kill -9 twice while it streams; read_committed sees "
          "every row once, in key order") {
  const char* env_rows = std::getenv("WALRELAY_TEST_SPLIT_ROWS");
  const int rows = env_rows && *env_rows ? std::atoi(env_rows) : 600000;
  const char* env_timeout = std::getenv("WALRELAY_TEST_SPLIT_TIMEOUT_MS");
  const std::string timeout = env_timeout && *env_timeout ? env_timeout : "3000";
  RelayFixture fx{RealBroker{}};
  fx.UsePlugin("pgoutput");
  const auto start = Clock::now();
  const std::string slot = "eossplit";
  // The default split: a third of the timeout.
  const std::string config =
      fx.WriteConfig(slot, ExactlyOnce({{"kafka.transaction.timeout.ms", timeout}}));
  auto relay = StartRelay(fx, config);
  const auto insert_start = Clock::now();
  fx.Exec(InsertEventsInOneStatement(rows));
  const double insert_seconds = SecondsSince(insert_start);
  const Lsn end = fx.CurrentWal();
  // Kill each instance once it committed a part of the transaction (more than one kill may
  // land in the same part; the second instance must first skip what the first committed).
  std::vector<int> splits;
  for (int kill = 0; kill < 2; ++kill) {
    const std::string log = fx.log_path();
    WaitForSplit(fx, *relay, log, slot, end, 120s);
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + 100 * kill));
    REQUIRE_MESSAGE(relay->Running(), Notable(devtools::ReadFile(log)));
    // The transaction is still streaming: each kill lands inside it.
    REQUIRE_MESSAGE(fx.ConfirmedFlush(slot) < end,
                    "the transaction was relayed before kill " << kill + 1 << ": make it larger");
    REQUIRE(relay->Kill(SIGKILL).ok());
    auto code = relay->Wait(10s);
    REQUIRE(code.ok());
    CHECK(*code == 128 + SIGKILL);
    splits.push_back(SplitLines(devtools::ReadFile(log)));
    // The slot never passed the transaction: its end was not committed.
    CHECK(fx.ConfirmedFlush(slot) < end);
    fx.WaitSlotFree(slot);
    relay = StartRelay(fx, config);
  }
  const std::string last_log = fx.log_path();
  const Lsn confirmed = fx.WaitConfirmed(slot, end, 600s);
  REQUIRE_MESSAGE(confirmed >= end, "slot at " << confirmed.ToString() << " < " << end.ToString()
                                               << "\n"
                                               << Notable(devtools::ReadFile(last_log)));
  const double relay_seconds = SecondsSince(insert_start) - insert_seconds;
  splits.push_back(SplitLines(devtools::ReadFile(last_log)));
  const std::string skipped_line = "the stream skips those changes";
  CHECK(devtools::ReadFile(last_log).find(skipped_line) != std::string::npos);
  const Counts c = ReadAndCount(fx, IsolationLevel::kReadCommitted, rows, 600s);
  CheckExactlyOnce(c, "read_committed after 2 kills inside one " + std::to_string(rows) +
                          "-row source transaction");
  CHECK_MESSAGE(relay->Running(), Notable(devtools::ReadFile(last_log)));
  MESSAGE("exactly once, one source transaction of "
          << rows << " rows, kafka.transaction.timeout.ms=" << timeout << ": inserted in "
          << insert_seconds << " s; split " << splits[0] << ", " << splits[1] << " and "
          << splits[2] << " times by the three instances (kill -9 after the first two); slot "
          << "past the transaction " << relay_seconds << " s after its commit; read_committed: "
          << Describe(c) << "; " << SecondsSince(start) << " s in all");
}
