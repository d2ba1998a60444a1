// The relay's loop never waits on a Kafka transaction (delivery/exactly_once.h), against a real
// PostgreSQL and a real Apache Kafka broker: while the broker is frozen (SIGSTOP) for 4 s, an
// exactly-once relay's transaction can neither be acknowledged nor committed; /healthz answers
// within 1 s and the standby status updates go on (PostgreSQL's reply_time stays within 1 s)
// all the while, and the transaction is confirmed once the broker runs again. The same holds
// for a commit or an abort that the end of a stream (POST /restart) leaves to the next connect
// attempt.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

}  // namespace

TEST_CASE("exactly once: a Kafka transaction waiting on a frozen broker: /healthz within 1 s, "
          "standby status updates go on, confirmed once the broker runs again") {
  RelayFixture fx{RealBroker{}};
  const std::string slot = "frozen";
  auto relay = fx.StartRelay(fx.WriteConfig(slot, {{"exactly.once.support", "required"},
                                                   {"offsets.storage.topic", "walrelay-offsets"},
                                                   {"offsets.storage.replication.factor", "1"}}));
  const int port = RestPort(fx);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn first = fx.CurrentWal();
  REQUIRE_MESSAGE(fx.WaitConfirmed(slot, first, 30s) >= first, Log(fx));

  REQUIRE(fx.broker().Kill(1, SIGSTOP).ok());
  fx.Exec("BEGIN;" + InsertEvent(2) + InsertEvent(3) + "COMMIT;");
  const Lsn second = fx.CurrentWal();
  std::chrono::milliseconds slowest_health{0};
  double oldest_reply = 0;
  int answers = 0;
  const auto thaw = Clock::now() + 4s;
  while (Clock::now() < thaw) {
    const auto asked = Clock::now();
    const Reply health = Http(port, "GET", "/healthz", {}, 3000ms);
    slowest_health = std::max(slowest_health, Since(asked));
    if (health.status == 200) ++answers;
    oldest_reply = std::max(
        oldest_reply,
        std::stod(fx.Value("SELECT coalesce(max(extract(epoch FROM now() - reply_time)), 0) FROM "
                           "pg_stat_replication")));
    std::this_thread::sleep_for(100ms);
  }
  const Lsn confirmed_frozen = fx.ConfirmedFlush(slot);
  REQUIRE(fx.broker().Kill(1, SIGCONT).ok());
  MESSAGE("broker frozen 4 s: " << answers << " /healthz answers, slowest "
                                << slowest_health.count() << " ms; oldest standby status update "
                                << oldest_reply << " s");
  CHECK(slowest_health < 1000ms);
  CHECK(oldest_reply < 1.0);
  CHECK(confirmed_frozen < second);  // nothing of it is confirmed before Kafka committed it

  CHECK_MESSAGE(fx.WaitConfirmed(slot, second, 60s) >= second, Log(fx));
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), 3, 30s);
  REQUIRE(records.ok());
  auto seen = CheckRecords(*records);
  for (int seq = 1; seq <= 3; ++seq) CHECK_MESSAGE(seen[seq] == 1, "seq " << seq);
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(30000ms);
  REQUIRE(code.ok());
  CHECK(*code == 0);
}

// An abort waits for the coordinator too: here the stream ends (POST /restart) inside a source
// transaction while the broker is frozen, so the Kafka transaction holding its first part is
// aborted, and the abort cannot complete before the broker runs again. The loop leaves it to
// the next connect attempt, which completes it before streaming anything.
TEST_CASE("exactly once: an abort waiting on a frozen broker: POST /restart within 2 s, /healthz "
          "within 1 s; once the broker runs again every row arrives once") {
  RelayFixture fx{RealBroker{}};
  const std::string slot = "frozenabort";
  const int rows = 200000;
  // A short queue keeps the relay inside the transaction for seconds: it moves on only as
  // Kafka acknowledges.
  auto relay = fx.StartRelay(fx.WriteConfig(slot, {{"exactly.once.support", "required"},
                                                   {"offsets.storage.topic", "walrelay-offsets"},
                                                   {"offsets.storage.replication.factor", "1"},
                                                   {"max.queue.size", "200"}}));
  const int port = RestPort(fx);
  fx.Exec(InsertEventsInOneStatement(rows));
  const Lsn end = fx.CurrentWal();
  // Freeze the broker once the relay is inside the source transaction.
  const auto deadline = Clock::now() + 60s;
  double relayed = 0;
  while (Clock::now() < deadline && relayed < 2000) {
    const Reply metrics = Http(port, "GET", "/metrics", {}, 3000ms);
    relayed =
        Metric(metrics.body, "walrelay_source_records_total{table=\"public.outbox\"}").value_or(0);
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE_MESSAGE(relayed >= 2000, Log(fx));
  REQUIRE(fx.broker().Kill(1, SIGSTOP).ok());
  const double at_freeze = Metric(Http(port, "GET", "/metrics", {}, 3000ms).body,
                                  "walrelay_source_records_total{table=\"public.outbox\"}")
                               .value_or(0);
  REQUIRE_MESSAGE(at_freeze < rows, "the transaction was relayed before the freeze");

  auto asked = Clock::now();
  const Reply restarted = Http(port, "POST", "/connectors/itest-" + slot + "/restart", {}, 5000ms);
  const auto restart_took = Since(asked);
  std::chrono::milliseconds slowest_health{0};
  int answers = 0;
  const auto thaw = Clock::now() + 4s;
  while (Clock::now() < thaw) {
    asked = Clock::now();
    const Reply health = Http(port, "GET", "/healthz", {}, 3000ms);
    slowest_health = std::max(slowest_health, Since(asked));
    if (health.status == 200 || health.status == 503) ++answers;
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE(fx.broker().Kill(1, SIGCONT).ok());
  MESSAGE("broker frozen 4 s after "
          << at_freeze << " rows of a " << rows << "-row source transaction: POST /restart "
          << restarted.status << " after " << restart_took.count() << " ms; " << answers
          << " /healthz answers, slowest " << slowest_health.count() << " ms");
  CHECK(restarted.status == 204);
  CHECK(restart_took < 2000ms);
  CHECK(slowest_health < 1000ms);
  CHECK(answers >= 20);

  REQUIRE_MESSAGE(fx.WaitConfirmed(slot, end, 180s) >= end, Log(fx));
  CHECK(Log(fx).find("the Kafka transaction is aborted") != std::string::npos);
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), rows, 120s);
  REQUIRE(records.ok());
  auto seen = CheckRecords(*records);
  int missing = 0, repeated = 0;
  for (int seq = 1; seq <= rows; ++seq) {
    if (seen[seq] == 0) ++missing;
    if (seen[seq] > 1) repeated += seen[seq] - 1;
  }
  CHECK(missing == 0);
  CHECK(repeated == 0);
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(30000ms);
  REQUIRE(code.ok());
  CHECK(*code == 0);
}

// A stream that ends with whole source transactions in its Kafka transaction commits it, and
// that commit waits for the broker too: here POST /restart ends the stream while the broker is
// frozen and the transaction's records are not acknowledged. The loop leaves the commit to the
// next connect attempt's worker, which commits before it connects again.
TEST_CASE("exactly once: a commit left by the end of a stream on a frozen broker: POST /restart "
          "within 2 s, /healthz within 1 s; committed once the broker runs again") {
  RelayFixture fx{RealBroker{}};
  const std::string slot = "frozenend";
  auto relay = fx.StartRelay(fx.WriteConfig(slot, {{"exactly.once.support", "required"},
                                                   {"offsets.storage.topic", "walrelay-offsets"},
                                                   {"offsets.storage.replication.factor", "1"}}));
  const int port = RestPort(fx);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn first = fx.CurrentWal();
  REQUIRE_MESSAGE(fx.WaitConfirmed(slot, first, 30s) >= first, Log(fx));

  REQUIRE(fx.broker().Kill(1, SIGSTOP).ok());
  fx.Exec("BEGIN;" + InsertEvent(2) + InsertEvent(3) + "COMMIT;");
  const Lsn second = fx.CurrentWal();
  // The relay has read the transaction: its commit is due, waiting for the frozen broker.
  const auto deadline = Clock::now() + 10s;
  double relayed = 0;
  while (Clock::now() < deadline && relayed < 3) {
    relayed = Metric(Http(port, "GET", "/metrics", {}, 3000ms).body,
                     "walrelay_source_records_total{table=\"public.outbox\"}")
                  .value_or(0);
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE_MESSAGE(relayed >= 3, Log(fx));

  auto asked = Clock::now();
  const Reply restarted = Http(port, "POST", "/connectors/itest-" + slot + "/restart", {}, 5000ms);
  const auto restart_took = Since(asked);
  std::chrono::milliseconds slowest_health{0};
  int answers = 0;
  const auto thaw = Clock::now() + 4s;
  while (Clock::now() < thaw) {
    asked = Clock::now();
    const Reply health = Http(port, "GET", "/healthz", {}, 3000ms);
    slowest_health = std::max(slowest_health, Since(asked));
    if (health.status == 200 || health.status == 503) ++answers;
    std::this_thread::sleep_for(100ms);
  }
  const Lsn confirmed_frozen = fx.ConfirmedFlush(slot);
  REQUIRE(fx.broker().Kill(1, SIGCONT).ok());
  MESSAGE("broker frozen 4 s with a commit due: POST /restart "
          << restarted.status << " after " << restart_took.count() << " ms; " << answers
          << " /healthz answers, slowest " << slowest_health.count() << " ms");
  CHECK(restarted.status == 204);
  CHECK(restart_took < 2000ms);
  CHECK(slowest_health < 1000ms);
  CHECK(answers >= 20);
  CHECK(confirmed_frozen < second);  // nothing of it is confirmed before Kafka committed it

  REQUIRE_MESSAGE(fx.WaitConfirmed(slot, second, 60s) >= second, Log(fx));
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), 3, 30s);
  REQUIRE(records.ok());
  auto seen = CheckRecords(*records);
  for (int seq = 1; seq <= 3; ++seq) CHECK_MESSAGE(seen[seq] == 1, "seq " << seq);
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(30000ms);
  REQUIRE(code.ok());
  CHECK(*code == 0);
}
