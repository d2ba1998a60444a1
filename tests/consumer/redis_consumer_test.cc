// The idempotent consumer with its Redis store, against a real redis-server (Debian's package,
// started on a free port) and librdkafka's mock cluster. Each path of the acquire script is
// driven directly; then the consumer end to end.
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "consumer_fixture.h"
#include "devtools/redis_sandbox.h"

namespace walrelay::testing {
namespace {

std::unique_ptr<devtools::RedisSandbox> StartRedis(const std::vector<std::string>& args = {}) {
  auto r = devtools::RedisSandbox::Start(args);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

std::unique_ptr<wc::RedisStore> Connect(const devtools::RedisSandbox& redis,
                                        const std::string& password = "") {
  wc::RedisStoreOptions o;
  o.port = redis.port();
  o.password = password;
  auto s = wc::RedisStore::Connect(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  return std::move(s).value();
}

std::string Field(const devtools::RedisSandbox& redis, const std::string& key,
                  const std::string& field) {
  auto v = redis.Command({"HGET", "walrelay:consumer:svc:" + key, field});
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *v;
}

wc::Message Msg() {
  wc::Message m;
  m.topic = "orders";
  m.partition = 2;
  m.offset = 17;
  return m;
}

wc::Handler Counting(std::map<std::string, int>& effects, std::mutex& mu) {
  return [&effects, &mu](wc::HandlerContext& ctx) {
    CHECK(ctx.connection() == nullptr);
    std::lock_guard<std::mutex> lock(mu);
    ++effects[ctx.idempotency_key()];
    return wc::HandlerResult::Done("done " + ctx.idempotency_key());
  };
}

TEST_CASE("RedisStore: AUTH with a password; a refusal never shows it") {
  auto redis = StartRedis({"--requirepass", "s3cret-pw"});
  wc::RedisStoreOptions o;
  o.port = redis->port();
  o.password = "wrong-pw";
  auto refused = wc::RedisStore::Connect(o);
  REQUIRE(!refused.ok());
  CHECK(refused.status().message().find("refused AUTH") != std::string::npos);
  CHECK(refused.status().message().find("wrong-pw") == std::string::npos);

  auto store = Connect(*redis, "s3cret-pw");
  auto a = store->Acquire("svc", "a", "o", 10s, Msg());
  REQUIRE_MESSAGE(a.ok(), a.status().ToString());
  CHECK(a->state == wc::Claim::State::kAcquired);
}

TEST_CASE("RedisStore: EVALSHA falls back to SCRIPT LOAD when the server forgot the scripts") {
  auto redis = StartRedis();
  auto store = Connect(*redis);
  REQUIRE(store->Acquire("svc", "a", "o", 10s, Msg()).ok());
  REQUIRE(redis->Command({"SCRIPT", "FLUSH"}).ok());
  auto b = store->Acquire("svc", "b", "o", 10s, Msg());
  REQUIRE_MESSAGE(b.ok(), b.status().ToString());
  CHECK(b->state == wc::Claim::State::kAcquired);
  // A dropped connection is made again on the next call.
  REQUIRE(redis->Command({"CLIENT", "KILL", "TYPE", "normal"}).ok());
  auto c = store->Acquire("svc", "c", "o", 10s, Msg());
  if (!c.ok()) c = store->Acquire("svc", "c", "o", 10s, Msg());  // the first call sees the kill
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->state == wc::Claim::State::kAcquired);
}

TEST_CASE("RedisStore: a connection lost while marking COMPLETED sends the mark again instead of "
          "running the handler again") {
  auto redis = StartRedis();
  std::vector<std::string> log;
  wc::RedisStoreOptions o;
  o.port = redis->port();
  o.log = [&log](const std::string& line) { log.push_back(line); };
  auto made = wc::RedisStore::Connect(o);
  REQUIRE(made.ok());
  auto store = std::move(made).value();
  std::map<std::string, int> runs;
  // The handler's effect happens, then every client connection of the server is cut: the
  // mark that follows goes out on a dead connection.
  auto handler = [&](wc::HandlerContext& ctx) {
    ++runs[ctx.idempotency_key()];
    if (ctx.idempotency_key() != "keep")
      REQUIRE(redis->Command({"CLIENT", "KILL", "TYPE", "normal"}).ok());
    return wc::HandlerResult::Done("done " + ctx.idempotency_key());
  };

  SUBCASE("one record") {
    REQUIRE(store->Acquire("svc", "k", "o", 10s, Msg()).ok());
    auto run = store->Run("svc", "k", "o", 1h, Msg(), 1, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    CHECK(run->kind == wc::RunOutcome::Kind::kCompleted);
    CHECK(runs["k"] == 1);
    CHECK(Field(*redis, "k", "state") == "COMPLETED");
    CHECK(Field(*redis, "k", "done_fence") == "1");
  }
  SUBCASE("a batch: one mark whose reply was lost, one never sent") {
    std::vector<wc::Message> m = {Msg(), Msg(), Msg()};
    std::vector<wc::BatchRecord> records = {
        {&m[0], "keep", {}}, {&m[1], "cut", {}}, {&m[2], "after", {}}};
    auto claims = store->AcquireBatch("svc", records, "o", 10s);
    REQUIRE(claims.ok());
    for (size_t i = 0; i < records.size(); ++i) records[i].claim = (*claims)[i];
    auto run = store->RunBatch("svc", records, "o", 1h, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    REQUIRE(run->size() == 3);
    for (const auto& r : *run) CHECK(r.kind == wc::RunOutcome::Kind::kCompleted);
    CHECK(runs == std::map<std::string, int>{{"keep", 1}, {"cut", 1}, {"after", 1}});
    for (const char* k : {"keep", "cut", "after"}) CHECK(Field(*redis, k, "state") == "COMPLETED");
  }
  SUBCASE("a batch claimed while it runs") {
    std::vector<wc::Message> m = {Msg(), Msg(), Msg()};
    std::vector<wc::BatchRecord> records = {
        {&m[0], "keep", {}}, {&m[1], "cut", {}}, {&m[2], "after", {}}};
    auto run = store->ClaimAndRunBatch(
        "svc", records, "o", 10s, 1h, [](const wc::BatchRecord&, const wc::Claim&) { return true; },
        handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    REQUIRE(run->outcomes.size() == 3);
    for (const auto& r : run->outcomes) CHECK(r.kind == wc::RunOutcome::Kind::kCompleted);
    CHECK(runs == std::map<std::string, int>{{"keep", 1}, {"cut", 1}, {"after", 1}});
    for (const char* k : {"keep", "cut", "after"}) CHECK(Field(*redis, k, "state") == "COMPLETED");
  }
  bool resent = false;
  for (const auto& line : log)
    resent = resent || line.rfind("CONNECTION lost while marking", 0) == 0;
  CHECK(resent);
}

TEST_CASE("RedisStore: a slow but live handler's lease is renewed; nobody takes its key") {
  auto redis = StartRedis();
  wc::RedisStoreOptions o;
  o.port = redis->port();
  auto a = wc::RedisStore::Connect(o);
  REQUIRE(a.ok());
  auto b = Connect(*redis);
  REQUIRE((*a)->Acquire("svc", "k", "member-a", 300ms, Msg()).ok());
  int conflicts = 0, held = 0;
  std::vector<std::chrono::steady_clock::time_point> until;
  auto run = (*a)->Run("svc", "k", "member-a", 1h, Msg(), 1, [&](wc::HandlerContext& ctx) {
    // Three leases long; another member asks for the key all the while.
    for (int i = 0; i < 9; ++i) {
      std::this_thread::sleep_for(100ms);
      auto c = b->Acquire("svc", "k", "member-b", 30s, Msg());
      REQUIRE(c.ok());
      if (c->state == wc::Claim::State::kConflict) ++conflicts;
      if (ctx.claim_held()) ++held;
      until.push_back(ctx.claim_held_until());
    }
    return wc::HandlerResult::Done("by a");
  });
  REQUIRE(run.ok());
  CHECK(run->kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(conflicts == 9);
  // The handler saw its claim held throughout, its end moved on by each renewal.
  CHECK(held == 9);
  CHECK(until.back() > until.front() + 300ms);
  CHECK(Field(*redis, "k", "result") == "by a");
}

TEST_CASE("RedisStore: a handler learns that its claim was taken over from the refused renewal") {
  auto redis = StartRedis();
  auto a = Connect(*redis);
  auto b = Connect(*redis);
  REQUIRE(a->Acquire("svc", "k", "member-a", 600ms, Msg()).ok());
  bool held_at_start = false, lost_seen = false;
  auto run = a->Run("svc", "k", "member-a", 1h, Msg(), 1, [&](wc::HandlerContext& ctx) {
    held_at_start = ctx.claim_held();
    // The lease is ended on the server (as a clock jump or a long pause would) and member B
    // takes the key over; A's next renewal is refused.
    REQUIRE(redis->Command({"HSET", "walrelay:consumer:svc:k", "expires_at", "0"}).ok());
    REQUIRE(b->Acquire("svc", "k", "member-b", 30s, Msg())->state == wc::Claim::State::kTakenOver);
    lost_seen = WaitUntil([&] { return !ctx.claim_held(); }, 2s);
    CHECK(ctx.claim_held_until() == std::chrono::steady_clock::time_point{});
    return wc::HandlerResult::Retry("ClaimLost", "another member holds the key");
  });
  REQUIRE(run.ok());
  CHECK(held_at_start);
  CHECK(lost_seen);
}

TEST_CASE(
    "Consumer + RedisStore: duplicates skipped, a poison record dead-lettered after N tries") {
  ConsumerFixture f;
  auto redis = StartRedis();
  auto store = Connect(*redis);
  REQUIRE(f.kafka().CreateTopic("emails", 1, 1).ok());
  std::map<std::string, int> effects;
  std::mutex mu;
  int poison_runs = 0;
  auto handler = [&](wc::HandlerContext& ctx) {
    if (ctx.message().value == std::optional<std::string>("poison")) {
      ++poison_runs;
      throw std::runtime_error("mail server says no");
    }
    return Counting(effects, mu)(ctx);
  };
  f.producer().Send("emails", "m-1", "hello");
  f.producer().Send("emails", "m-1", "hello");  // redelivered
  f.producer().Send("emails", "m-2", "poison");
  f.producer().Send("emails", "m-3", "bye");

  auto opts = f.Options("svc", "emails");
  opts.max_attempts = 2;
  RunningConsumer c(opts, *store, handler);
  REQUIRE(WaitUntil([&] { return c.stats().completed == 2; }, 30s));
  CHECK(c.Stop().ok());
  CHECK(c.stats().duplicates == 1);
  CHECK(c.stats().dead_lettered == 1);
  CHECK(poison_runs == 2);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(effects["m-1"] == 1);
    CHECK(effects["m-3"] == 1);
  }
  CHECK(Field(*redis, "m-2", "state") == "FAILED");
  CHECK(Field(*redis, "m-2", "last_error") == "exception: mail server says no (after 2 attempts)");

  auto reader = f.Reader();
  auto dlq = reader->ReadAtLeast({"svc.dlq"}, 1, 20s);
  REQUIRE(dlq.ok());
  REQUIRE(dlq->size() == 1);
  CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.error.class") == "exception");
  CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.attempts") == "2");
  CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.original.offset") == "2");
}

TEST_CASE("Consumer + RedisStore: a server answering BUSY for 3 s (a long script) is waited "
          "out: the member keeps running and every effect happens once") {
  ConsumerFixture f;
  // BUSY after 100 ms of a running script instead of Redis 7's default 5 s.
  auto redis = StartRedis({"--busy-reply-threshold", "100"});
  std::atomic<int> busy_seen{0};
  auto count_busy = [&busy_seen](const std::string& line) {
    if (line.find("BUSY") != std::string::npos) ++busy_seen;
  };
  wc::RedisStoreOptions so;
  so.port = redis->port();
  so.log = count_busy;
  auto connected = wc::RedisStore::Connect(so);
  REQUIRE(connected.ok());
  auto store = std::move(connected).value();
  REQUIRE(f.kafka().CreateTopic("orders", 1, 1).ok());
  constexpr int kEvents = 40;
  for (int i = 0; i < kEvents; ++i) f.producer().Send("orders", "b-" + std::to_string(i), "v");
  std::map<std::string, int> effects;
  std::mutex mu;
  std::atomic<int> ran{0};
  auto handler = [&](wc::HandlerContext& ctx) {
    ++ran;
    std::this_thread::sleep_for(100ms);
    return Counting(effects, mu)(ctx);
  };
  auto opts = f.Options("svc", "orders");
  opts.max_batch = 5;
  opts.log = [count_busy](wc::LogLevel, const std::string& line) { count_busy(line); };
  RunningConsumer c(opts, *store, handler);
  REQUIRE(WaitUntil([&] { return ran >= 5; }, 30s));
  // A script that keeps the server busy for 3 s: every other call meanwhile answers BUSY.
  // redis-cli waits for it (the sandbox's own commands time out sooner).
  const std::string script =
      "local t = redis.call('TIME') local stop = t[1] * 1000000 + t[2] + 3000000 "
      "while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] > stop then "
      "break end end return 1";
  const int busy = std::system(
      ("redis-cli -p " + std::to_string(redis->port()) + " EVAL \"" + script + "\" 0 > /dev/null")
          .c_str());
  CHECK(busy == 0);
  const bool all = WaitUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return static_cast<int>(effects.size()) == kEvents;
      },
      60s);
  CHECK(all);
  CHECK(c.Stop().ok());  // Run() did not return on its own
  MESSAGE("store calls answered BUSY and tried again: " << busy_seen.load());
  CHECK(busy_seen > 0);
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& effect : effects) CHECK_MESSAGE(effect.second == 1, effect.first);
}

}  // namespace
}  // namespace walrelay::testing
