// Two members of one group and no fault at all: every key's handler runs once. Member A takes
// every partition and its first batches outlast both the claims' lease and max.poll.interval.ms
// (600 waiting events, 25 ms handlers, lease 3 s, max.poll.interval.ms 7 s); member B joins
// meanwhile and is given partitions whose keys A claimed at the start of its batch. Run for
// each store against its real server (redis-server, dynalite, PostgreSQL) and librdkafka's
// mock cluster, and once more with one of member A's handlers inside its first batch taking
// 8 s, past the lease (its store renews that claim; the batch's later claims age meanwhile).
#include <cstdlib>
#include <map>
#include <mutex>

#include "consumer_fixture.h"
#include "devtools/dynalite_sandbox.h"
#include "devtools/redis_sandbox.h"

namespace walrelay::testing {
namespace {

constexpr int kEvents = 600;

// The suite in CI runs one case per store (about 45 s each); WALRELAY_SECOND_RUNS_ALL=1 (the
// consumer_second_runs_all test, -DWALRELAY_CONSUMER_SLOW=ON) runs the other two as well.
bool AllCases() {
  const char* all = std::getenv("WALRELAY_SECOND_RUNS_ALL");
  return all != nullptr && std::string(all) == "1";
}

// Counts handler runs per key across both members, and the effects they mean.
struct RunLedger {
  std::mutex mu;
  std::map<std::string, int> runs;
  int total = 0;

  void Ran(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    ++runs[key];
    ++total;
  }
  // The first events (ev-<n>) no handler ran for, as "ev-n(partition)".
  std::string Missing() {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    int shown = 0;
    for (int i = 0; i < kEvents && shown < 12; ++i)
      if (runs.count("ev-" + std::to_string(i)) == 0) {
        out += " ev-" + std::to_string(i) + "(p" + std::to_string(i % 4) + ")";
        ++shown;
      }
    return out;
  }
  int Distinct() {
    std::lock_guard<std::mutex> lock(mu);
    return static_cast<int>(runs.size());
  }
  // Keys whose handler ran more than once, with the number of extra runs.
  int SecondRuns(std::string* example) {
    std::lock_guard<std::mutex> lock(mu);
    int extra = 0;
    for (const auto& [key, n] : runs)
      if (n > 1) {
        extra += n - 1;
        if (example->empty()) *example = key + " ran " + std::to_string(n) + " times";
      }
    return extra;
  }
};

class SecondRunFixture : public ConsumerFixture {
 public:
  // Options for one member: the timings.
  wc::ConsumerOptions Member(const std::string& who) {
    wc::ConsumerOptions o = Options("svc", "orders", "svc-group");
    o.lease = 3000ms;
    o.kafka_properties["max.poll.interval.ms"] = "7000";
    o.kafka_properties["session.timeout.ms"] = "6000";
    o.max_attempts = 3;
    o.log = [who](wc::LogLevel level, const std::string& line) {
      if (level != wc::LogLevel::kDebug) MESSAGE(who << ": " << line);
    };
    return o;
  }

  void ProduceEvents() {
    for (int i = 0; i < kEvents; ++i)
      producer().Send("orders", "ev-" + std::to_string(i), "{\"n\":" + std::to_string(i) + "}",
                      i % 4, "key-" + std::to_string(i % 40));
  }

  // A handler that takes 25 ms; `pause_once` makes one run of member A sleep past the lease.
  static wc::Handler Slow(RunLedger& ledger, std::atomic<bool>* pause_once = nullptr) {
    return [&ledger, pause_once](wc::HandlerContext& ctx) {
      ledger.Ran(ctx.idempotency_key());
      std::this_thread::sleep_for(25ms);
      if (pause_once != nullptr && pause_once->exchange(false)) std::this_thread::sleep_for(8s);
      return wc::HandlerResult::Done();
    };
  }

  // Runs members A and B (B joins once A has run 40 handlers) until every event ran, then
  // checks that none ran twice.
  void RunTwoMembers(wc::IdempotencyStore& store_a, wc::IdempotencyStore& store_b, bool pause) {
    ProduceEvents();
    RunLedger ledger;
    std::atomic<bool> pause_once{false};
    RunningConsumer a(Member("A"), store_a, Slow(ledger, &pause_once));
    REQUIRE(WaitUntil([&] { return ledger.Distinct() >= 40; }, 60s));
    pause_once = pause;
    RunningConsumer b(Member("B"), store_b, Slow(ledger));
    const bool all = WaitUntil([&] { return ledger.Distinct() >= kEvents; }, 240s);
    // Let any stale run still under way show itself.
    std::this_thread::sleep_for(4s);
    CHECK(b.Stop().ok());
    CHECK(a.Stop().ok());
    std::string example;
    const int second = ledger.SecondRuns(&example);
    MESSAGE("distinct keys run: " << ledger.Distinct() << ", runs: " << ledger.total
                                  << ", second runs: " << second << " " << example
                                  << "; A completed " << a.stats().completed << ", B completed "
                                  << b.stats().completed << ", takeovers "
                                  << a.stats().takeovers + b.stats().takeovers);
    CHECK_MESSAGE(all, "never run:" << ledger.Missing());
    CHECK_MESSAGE(second == 0, example);
  }
};

std::unique_ptr<wc::RedisStore> RedisStoreOn(const devtools::RedisSandbox& redis) {
  wc::RedisStoreOptions o;
  o.port = redis.port();
  auto s = wc::RedisStore::Connect(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  return std::move(s).value();
}

std::unique_ptr<wc::DynamoStore> DynamoStoreOn(const devtools::DynaliteSandbox& server) {
  wc::DynamoStoreOptions o;
  o.endpoint = server.endpoint();
  o.region = "us-east-1";
  o.access_key_id = "AKIDEXAMPLE";
  o.secret_access_key = "not-a-real-secret";
  auto s = wc::DynamoStore::Connect(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  REQUIRE_MESSAGE((*s)->CreateSchema().ok(), "CreateSchema");
  return std::move(s).value();
}

TEST_CASE_FIXTURE(SecondRunFixture, "RedisStore: no second run when a batch outlasts the lease") {
  auto redis = devtools::RedisSandbox::Start({});
  REQUIRE_MESSAGE(redis.ok(), redis.status().ToString());
  auto a = RedisStoreOn(**redis);
  auto b = RedisStoreOn(**redis);
  RunTwoMembers(*a, *b, false);
}

TEST_CASE_FIXTURE(SecondRunFixture, "RedisStore: no second run with a member paused in a batch" *
                                        doctest::skip(!AllCases())) {
  auto redis = devtools::RedisSandbox::Start({});
  REQUIRE_MESSAGE(redis.ok(), redis.status().ToString());
  auto a = RedisStoreOn(**redis);
  auto b = RedisStoreOn(**redis);
  RunTwoMembers(*a, *b, true);
}

TEST_CASE_FIXTURE(SecondRunFixture, "DynamoStore: no second run when a batch outlasts the lease" *
                                        doctest::skip(!AllCases())) {
  auto server = devtools::DynaliteSandbox::Start();
  REQUIRE_MESSAGE(server.ok(), server.status().ToString());
  auto a = DynamoStoreOn(**server);
  auto b = DynamoStoreOn(**server);
  RunTwoMembers(*a, *b, false);
}

TEST_CASE_FIXTURE(SecondRunFixture, "DynamoStore: no second run with a member paused in a batch") {
  auto server = devtools::DynaliteSandbox::Start();
  REQUIRE_MESSAGE(server.ok(), server.status().ToString());
  auto a = DynamoStoreOn(**server);
  auto b = DynamoStoreOn(**server);
  RunTwoMembers(*a, *b, true);
}

TEST_CASE_FIXTURE(SecondRunFixture,
                  "PostgresStore: no second effect when a batch outlasts the lease") {
  auto a = Store();
  auto b = Store();
  RunTwoMembers(*a, *b, false);
}

}  // namespace
}  // namespace walrelay::testing
