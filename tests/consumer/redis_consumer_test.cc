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

int64_t Ttl(const devtools::RedisSandbox& redis, const std::string& key) {
  auto v = redis.Command({"PTTL", "walrelay:consumer:svc:" + key});
  REQUIRE(v.ok());
  return std::stoll(*v);
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

TEST_CASE("RedisStore: acquired, conflict, stale takeover, duplicate, released and failed") {
  auto redis = StartRedis();
  auto store = Connect(*redis);
  std::map<std::string, int> effects;
  std::mutex mu;

  // ACQUIRED: a new key, one attempt, a lease on the server's clock.
  auto a = store->Acquire("svc", "k", "owner-a", 700ms, Msg());
  REQUIRE(a.ok());
  CHECK(a->state == wc::Claim::State::kAcquired);
  CHECK(a->attempts == 1);
  CHECK(Field(*redis, "k", "state") == "PENDING");
  CHECK(Field(*redis, "k", "owner") == "owner-a");
  CHECK(Field(*redis, "k", "topic") == "orders");
  CHECK(Field(*redis, "k", "offset") == "17");
  const int64_t locked_at = std::stoll(Field(*redis, "k", "locked_at"));
  CHECK(std::stoll(Field(*redis, "k", "expires_at")) - locked_at == 700);
  auto now = redis->Command({"TIME"});
  REQUIRE(now.ok());
  const int64_t server_ms = std::stoll(now->substr(0, now->find('\n'))) * 1000;
  CHECK(std::llabs(server_ms - locked_at) < 2000);
  // The PENDING key outlives its lease by the retention (24 h by default).
  CHECK(Ttl(*redis, "k") > 86'000'000);

  // CONFLICT: another owner while the lease runs; nothing changes.
  auto b = store->Acquire("svc", "k", "owner-b", 10s, Msg());
  REQUIRE(b.ok());
  CHECK(b->state == wc::Claim::State::kConflict);
  CHECK(b->previous_owner == "owner-a");
  CHECK(b->retry_after > 0ms);
  CHECK(b->retry_after <= 700ms);
  CHECK(Field(*redis, "k", "attempts") == "1");

  // TAKEN_OVER once the lease has ended by the server's clock.
  Result<wc::Claim> taken = Status::Internal("not run");
  REQUIRE(WaitUntil(
      [&] {
        taken = store->Acquire("svc", "k", "owner-b", 10s, Msg());
        return taken.ok() && taken->state != wc::Claim::State::kConflict;
      },
      5s));
  CHECK(taken->state == wc::Claim::State::kTakenOver);
  CHECK(taken->previous_owner == "owner-a");
  CHECK(taken->attempts == 2);
  CHECK(Field(*redis, "k", "owner") == "owner-b");

  // The old owner's late completion is refused (its effect has happened, though: the
  // documented limit of this store).
  auto late = store->Run("svc", "k", "owner-a", 1h, Msg(), 1, Counting(effects, mu));
  REQUIRE(late.ok());
  CHECK(late->kind == wc::RunOutcome::Kind::kLost);
  auto run = store->Run("svc", "k", "owner-b", 1h, Msg(), 2, Counting(effects, mu));
  REQUIRE(run.ok());
  CHECK(run->kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(Field(*redis, "k", "state") == "COMPLETED");
  const int64_t ttl = Ttl(*redis, "k");
  CHECK(ttl > 3'590'000);
  CHECK(ttl <= 3'600'000);

  // DUPLICATE, with the stored result.
  auto dup = store->Acquire("svc", "k", "owner-c", 10s, Msg());
  REQUIRE(dup.ok());
  CHECK(dup->state == wc::Claim::State::kDuplicate);
  CHECK(dup->result == "done k");
  CHECK(Field(*redis, "k", "attempts") == "2");

  // A failed run is released: free for anyone, attempts kept, last error recorded.
  REQUIRE(store->Acquire("svc", "r", "owner-a", 10s, Msg())->state == wc::Claim::State::kAcquired);
  REQUIRE(store->Release("svc", "r", "owner-a", "Flaky: timeout").ok());
  CHECK(Field(*redis, "r", "owner") == "");
  auto again = store->Acquire("svc", "r", "owner-b", 10s, Msg());
  REQUIRE(again.ok());
  CHECK(again->state == wc::Claim::State::kAcquired);
  CHECK(again->attempts == 2);
  CHECK(again->last_error == "Flaky: timeout");

  // Only the current claim may mark its key FAILED: a stale holder (another owner, or this
  // owner's older token) is refused and the claim stays.
  auto stale_owner = store->MarkFailed("svc", "r", "owner-a", 0, "Stale: late failure", 2h);
  REQUIRE(stale_owner.ok());
  CHECK_FALSE(*stale_owner);
  auto stale_token =
      store->MarkFailed("svc", "r", "owner-b", again->fencing_token - 1, "Stale: late failure", 2h);
  REQUIRE(stale_token.ok());
  CHECK_FALSE(*stale_token);
  CHECK(Field(*redis, "r", "state") == "PENDING");
  CHECK(Field(*redis, "r", "owner") == "owner-b");

  // FAILED keys are skipped and expire after failed_ttl; COMPLETED ones are never failed.
  auto marked = store->MarkFailed("svc", "r", "owner-b", again->fencing_token, "Poison: bad", 2h);
  REQUIRE(marked.ok());
  CHECK(*marked);
  auto failed = store->Acquire("svc", "r", "owner-c", 10s, Msg());
  REQUIRE(failed.ok());
  CHECK(failed->state == wc::Claim::State::kFailed);
  CHECK(failed->last_error == "Poison: bad");
  CHECK(Ttl(*redis, "r") > 7'190'000);
  auto late_failure = store->MarkFailed("svc", "k", "owner-a", 0, "late", 2h);
  REQUIRE(late_failure.ok());
  CHECK_FALSE(*late_failure);
  CHECK(Field(*redis, "k", "state") == "COMPLETED");

  CHECK(effects["k"] == 2);  // the late owner's run and the real one
  auto cleaned = wc::Cleanup(*store, 100);
  REQUIRE(cleaned.ok());
  CHECK(*cleaned == 0);
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

TEST_CASE("RedisStore fencing: a handler stalled past its lease while another member claims "
          "the key: exactly one completes, the stale one's mark is refused") {
  auto redis = StartRedis();
  // A stalled process renews nothing: member A's renewal is off, as if its process paused.
  wc::RedisStoreOptions stalled;
  stalled.port = redis->port();
  stalled.renew_leases = false;
  auto a = wc::RedisStore::Connect(stalled);
  REQUIRE(a.ok());
  auto b = Connect(*redis);
  auto claim_a = (*a)->Acquire("svc", "k", "member-a", 300ms, Msg());
  REQUIRE(claim_a.ok());
  CHECK(claim_a->fencing_token == 1);
  std::vector<std::string> effects;  // (member, token) as a downstream system would see them
  auto effect_b = [&](wc::HandlerContext& ctx) {
    effects.push_back("b#" + std::to_string(ctx.fencing_token()));
    return wc::HandlerResult::Done("by b");
  };
  bool b_first = false;
  SUBCASE("B completes while A is stalled") { b_first = true; }
  SUBCASE("A's mark comes before B completes") { b_first = false; }
  std::optional<wc::RunOutcome> outcome_b;
  auto claim_and_run_b = [&] {
    auto claim_b = b->Acquire("svc", "k", "member-b", 30s, Msg());
    REQUIRE(claim_b.ok());
    CHECK(claim_b->state == wc::Claim::State::kTakenOver);
    CHECK(claim_b->fencing_token == 2);
    auto run = b->Run("svc", "k", "member-b", 1h, Msg(), claim_b->attempts, effect_b);
    REQUIRE(run.ok());
    outcome_b = *run;
  };
  auto run_a = (*a)->Run("svc", "k", "member-a", 1h, Msg(), 1, [&](wc::HandlerContext& ctx) {
    effects.push_back("a#" + std::to_string(ctx.fencing_token()));
    CHECK(ctx.claim_held());
    std::this_thread::sleep_for(500ms);  // stalled past its 300 ms lease
    CHECK(!ctx.claim_held());            // the handler can tell, though nothing renewed or refused
    if (b_first) claim_and_run_b();      // B claims and completes while A is stalled
    else REQUIRE(b->Acquire("svc", "k", "member-b", 30s, Msg())->fencing_token == 2);
    return wc::HandlerResult::Done("by a");
  });
  REQUIRE(run_a.ok());
  CHECK(run_a->kind == wc::RunOutcome::Kind::kLost);  // the stale token's mark is refused
  if (!b_first) {
    // B claimed while A was stalled and completes after A's refused mark: the B side of
    // claim_and_run_b without its claim, which A's handler already made.
    auto run = b->Run("svc", "k", "member-b", 1h, Msg(), 2, effect_b);
    REQUIRE(run.ok());
    outcome_b = *run;
  }
  REQUIRE(outcome_b);
  CHECK(outcome_b->kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(effects == std::vector<std::string>{"a#1", "b#2"});
  CHECK(Field(*redis, "k", "state") == "COMPLETED");
  CHECK(Field(*redis, "k", "result") == "by b");
  CHECK(Field(*redis, "k", "done_fence") == "2");
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
  for (const auto& [key, n] : effects) CHECK_MESSAGE(n == 1, key);
}

}  // namespace
}  // namespace walrelay::testing
