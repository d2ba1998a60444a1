// The idempotent consumer with its PostgreSQL store, against a real PostgreSQL and
// librdkafka's mock cluster: each handler effect (a row in `effects`) must happen exactly once
// per key, however the record arrives.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

#include "consumer_fixture.h"

namespace walrelay::testing {
namespace {

std::string KeyState(ConsumerFixture& f, const std::string& name, const std::string& key) {
  auto rows =
      f.pg().Query("SELECT state || '/' || attempts || '/' || coalesce(locked_by, '-') FROM "
                   "walrelay_consumer_keys WHERE consumer_name = '" +
                   name + "' AND idempotency_key = '" + key + "'");
  REQUIRE(rows.ok());
  return rows->empty() ? "(none)" : *rows->front().front();
}

wc::Message Msg(const std::string& value) {
  wc::Message m;
  m.topic = "t";
  m.value = value;
  return m;
}

TEST_CASE(
    "PostgresStore: a failed run leaves nothing but an attempt; a completed key is a duplicate") {
  ConsumerFixture f;
  auto store = f.Store();
  const auto lease = 10s;
  auto a = store->Acquire("svc", "k1", "owner-a", lease, Msg("v"));
  REQUIRE(a.ok());
  CHECK(a->state == wc::Claim::State::kAcquired);
  CHECK(a->attempts == 1);
  CHECK(KeyState(f, "svc", "k1") == "PENDING/1/owner-a");
  // The lease is measured on the database clock.
  CHECK(f.Value("SELECT round(extract(epoch FROM expires_at - locked_at))::int FROM "
                "walrelay_consumer_keys WHERE idempotency_key = 'k1'") == "10");

  // The handler writes, then fails: its write is rolled back with the run.
  auto failing = [](wc::HandlerContext& ctx) {
    REQUIRE(ctx.Exec("INSERT INTO effects (key) VALUES ($1)", {ctx.idempotency_key()}).ok());
    return wc::HandlerResult::Retry("Flaky", "downstream timed out");
  };
  auto run = store->Run("svc", "k1", "owner-a", 1h, Msg("v"), 1, failing);
  REQUIRE(run.ok());
  CHECK(run->kind == wc::RunOutcome::Kind::kFailed);
  CHECK(f.Count("SELECT count(*) FROM effects") == 0);
  REQUIRE(store->Release("svc", "k1", "owner-a", "Flaky: downstream timed out").ok());
  CHECK(KeyState(f, "svc", "k1") == "PENDING/1/-");
  CHECK(f.Value("SELECT last_error FROM walrelay_consumer_keys WHERE idempotency_key = 'k1'") ==
        "Flaky: downstream timed out");

  // A released key is free for anyone; the attempt count goes on.
  auto b = store->Acquire("svc", "k1", "owner-b", lease, Msg("v"));
  REQUIRE(b.ok());
  CHECK(b->state == wc::Claim::State::kAcquired);
  CHECK(b->attempts == 2);
  CHECK(b->last_error == "Flaky: downstream timed out");
  auto done = store->Run("svc", "k1", "owner-b", 1h, Msg("v"), 2, ConsumerFixture::EffectHandler());
  REQUIRE(done.ok());
  CHECK(done->kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(KeyState(f, "svc", "k1") == "COMPLETED/2/-");
  CHECK(f.Count("SELECT count(*) FROM effects WHERE key = 'k1'") == 1);

  auto dup = store->Acquire("svc", "k1", "owner-c", lease, Msg("v"));
  REQUIRE(dup.ok());
  CHECK(dup->state == wc::Claim::State::kDuplicate);
  CHECK(dup->result == "effect for k1");
  // Another consumer name has its own keys.
  auto other = store->Acquire("other-svc", "k1", "owner-c", lease, Msg("v"));
  REQUIRE(other.ok());
  CHECK(other->state == wc::Claim::State::kAcquired);

  // Only this owner's claim may mark its key FAILED (or a key not there at all); FAILED keys
  // are skipped, and never overwrite a COMPLETED one.
  auto k2 = store->Acquire("svc", "k2", "owner-a", lease, Msg("v"));
  REQUIRE(k2.ok());
  REQUIRE(k2->state == wc::Claim::State::kAcquired);
  auto stale = store->MarkFailed("svc", "k2", "owner-z", 0, "Stale: late failure", 1h);
  REQUIRE(stale.ok());
  CHECK_FALSE(*stale);
  CHECK(KeyState(f, "svc", "k2") == "PENDING/1/owner-a");
  auto marked = store->MarkFailed("svc", "k2", "owner-a", 0, "Poison: bad", 1h);
  REQUIRE(marked.ok());
  CHECK(*marked);
  auto failed = store->Acquire("svc", "k2", "owner-a", lease, Msg("v"));
  REQUIRE(failed.ok());
  CHECK(failed->state == wc::Claim::State::kFailed);
  CHECK(failed->last_error == "Poison: bad");
  auto late_failure = store->MarkFailed("svc", "k1", "owner-a", 0, "late", 1h);
  REQUIRE(late_failure.ok());
  CHECK_FALSE(*late_failure);
  CHECK(KeyState(f, "svc", "k1") == "COMPLETED/2/-");

  // A handler that ends the store's transaction itself is refused, not trusted.
  auto c = store->Acquire("svc", "k3", "owner-a", lease, Msg("v"));
  REQUIRE(c.ok());
  auto rogue = store->Run("svc", "k3", "owner-a", 1h, Msg("v"), 1, [](wc::HandlerContext& ctx) {
    REQUIRE(ctx.Exec("COMMIT").ok());
    return wc::HandlerResult::Done();
  });
  REQUIRE(rogue.ok());
  CHECK(rogue->kind == wc::RunOutcome::Kind::kFailed);
  CHECK(rogue->handler.error_class == "HandlerEndedTransaction");

  // A missing table is named in the error.
  wc::PostgresStoreOptions o;
  o.conninfo = f.pg().ConnInfo();
  o.table = "public.no_such_keys";
  auto missing = wc::PostgresStore::Connect(o);
  REQUIRE(missing.ok());
  auto err = (*missing)->Acquire("svc", "k", "o", lease, Msg("v"));
  REQUIRE(!err.ok());
  CHECK(err.status().message().find("public.no_such_keys does not exist") != std::string::npos);
  // CreateSchema makes it from docs/consumer.sql, under the configured name.
  REQUIRE((*missing)->CreateSchema().ok());
  CHECK((*missing)->Acquire("svc", "k", "o", lease, Msg("v")).ok());
  CHECK(
      f.Count("SELECT count(*) FROM pg_indexes WHERE indexname = 'no_such_keys_expires_at_idx'") ==
      1);
}

TEST_CASE("PostgresStore: Cleanup deletes expired keys in batches through the expires_at index") {
  ConsumerFixture f;
  auto store = f.Store();
  f.Exec("INSERT INTO walrelay_consumer_keys (consumer_name, idempotency_key, state, expires_at) "
         "SELECT 'svc', 'old-' || i, CASE WHEN i % 2 = 0 THEN 'COMPLETED' ELSE 'FAILED' END, "
         "now() - interval '1 hour' FROM generate_series(1, 250) i");
  f.Exec("INSERT INTO walrelay_consumer_keys (consumer_name, idempotency_key, state, expires_at) "
         "VALUES "
         "('svc', 'fresh', 'COMPLETED', now() + interval '1 hour'),"
         "('svc', 'pending-recent', 'PENDING', now() - interval '1 hour'),"
         "('svc', 'pending-abandoned', 'PENDING', now() - interval '2 days')");

  auto first = store->CleanupBatch(100);
  REQUIRE(first.ok());
  CHECK(*first == 100);
  auto total = wc::Cleanup(*store, 100);
  REQUIRE(total.ok());
  CHECK(*total == 151);  // 150 more expired keys and the abandoned PENDING
  auto left = f.pg().Query("SELECT idempotency_key FROM walrelay_consumer_keys ORDER BY 1");
  REQUIRE(left.ok());
  REQUIRE(left->size() == 2);
  CHECK(*(*left)[0][0] == "fresh");
  CHECK(*(*left)[1][0] == "pending-recent");

  // The GC's candidate scan can use the shipped index (forced here: the table is tiny).
  auto plan = f.pg().Query(
      "SET enable_seqscan = off; EXPLAIN SELECT ctid FROM walrelay_consumer_keys "
      "WHERE expires_at < now() AND (state <> 'PENDING' OR expires_at < now() - interval '1 day') "
      "LIMIT 100 FOR UPDATE SKIP LOCKED");
  REQUIRE(plan.ok());
  std::string text;
  for (const auto& row : *plan) text += *row[0] + "\n";
  CHECK_MESSAGE(text.find("walrelay_consumer_keys_expires_at_idx") != std::string::npos, text);
}

TEST_CASE("Consumer + PostgresStore: the same record twice, and two consumers at once, take effect "
          "once") {
  ConsumerFixture f;
  REQUIRE(f.kafka().CreateTopic("orders", 1, 1).ok());
  auto store_a = f.Store();
  auto store_b = f.Store();

  std::mutex mu;
  std::vector<std::string> outcomes_a;
  auto opts_a = f.Options("svc", "orders", "group-a");
  opts_a.on_processed = [&](const wc::Message& m, const wc::RecordOutcome& o) {
    std::lock_guard<std::mutex> lock(mu);
    outcomes_a.push_back(o.idempotency_key + "@" + std::to_string(m.offset) + "=" +
                         wc::RecordOutcomeName(o.kind) + ":" + o.result);
  };

  SUBCASE("sequential redelivery") {
    f.producer().Send("orders", "e-1", "first");
    f.producer().Send("orders", "e-1", "first");  // the relay repeated it
    f.producer().Send("orders", "e-2", "second");
    RunningConsumer c(opts_a, *store_a, ConsumerFixture::EffectHandler());
    REQUIRE(WaitUntil([&] { return c.stats().completed + c.stats().duplicates == 3; }, 30s));
    CHECK(c.Stop().ok());
    CHECK(c.stats().completed == 2);
    CHECK(c.stats().duplicates == 1);
    CHECK(f.Count("SELECT count(*) FROM effects WHERE key = 'e-1'") == 1);
    CHECK(f.Count("SELECT count(*) FROM effects WHERE key = 'e-2'") == 1);
    CHECK(f.Value("SELECT note FROM effects WHERE key = 'e-1'") == "first");
    {
      std::lock_guard<std::mutex> lock(mu);
      CHECK(outcomes_a == std::vector<std::string>{"e-1@0=completed:effect for e-1",
                                                   "e-1@1=duplicate:effect for e-1",
                                                   "e-2@2=completed:effect for e-2"});
    }
    // The group's offsets were committed: a restarted member reads nothing again.
    RunningConsumer again(opts_a, *store_a, ConsumerFixture::EffectHandler());
    f.producer().Send("orders", "e-3", "third");
    REQUIRE(WaitUntil([&] { return again.stats().completed == 1; }, 30s));
    CHECK(again.Stop().ok());
    CHECK(again.stats().duplicates == 0);
    CHECK(f.Count("SELECT count(*) FROM effects") == 3);
  }

  SUBCASE("two consumers race on every record") {
    // Two groups read every record; one consumer name shares the keys. Each handler holds its
    // transaction 150 ms, so the two meet on most keys while one of them is inside.
    const int n = 6;
    for (int i = 0; i < n; ++i) f.producer().Send("orders", "e-" + std::to_string(i), "v");
    auto opts_b = f.Options("svc", "orders", "group-b");
    RunningConsumer a(opts_a, *store_a, ConsumerFixture::EffectHandler(150ms));
    RunningConsumer b(opts_b, *store_b, ConsumerFixture::EffectHandler(150ms));
    REQUIRE(WaitUntil(
        [&] {
          return a.stats().completed + a.stats().duplicates == n &&
                 b.stats().completed + b.stats().duplicates == n;
        },
        60s));
    CHECK(a.Stop().ok());
    CHECK(b.Stop().ok());
    MESSAGE("a: completed " << a.stats().completed << ", duplicates " << a.stats().duplicates
                            << "; b: completed " << b.stats().completed << ", duplicates "
                            << b.stats().duplicates);
    CHECK(a.stats().completed + b.stats().completed == n);
    CHECK(a.stats().duplicates + b.stats().duplicates == n);
    CHECK(f.Count("SELECT count(*) FROM effects") == n);
    CHECK(f.Count("SELECT count(DISTINCT key) FROM effects") == n);
    CHECK(f.Count("SELECT count(*) FROM walrelay_consumer_keys WHERE state = 'COMPLETED'") == n);
  }
}

TEST_CASE("Consumer + PostgresStore: poison, non-retriable and keyless records are dead-lettered") {
  ConsumerFixture f;
  REQUIRE(f.kafka().CreateTopic("orders", 1, 1).ok());
  auto store = f.Store();
  std::map<std::string, int> runs;
  std::mutex mu;
  auto handler = [&](wc::HandlerContext& ctx) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++runs[ctx.idempotency_key()];
    }
    const std::string v = ctx.message().value.value_or("");
    if (v == "poison") return wc::HandlerResult::Retry("Unavailable", "always down for " + v);
    // A value that is not a number fails in SQL with 22P02: a data error, not retriable.
    auto r = ctx.Exec("INSERT INTO effects (key, note) VALUES ($1, ($2::int)::text)",
                      {ctx.idempotency_key(), v});
    if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
    return wc::HandlerResult::Done();
  };
  f.producer().Send("orders", "p-1", "poison");
  f.producer().Send("orders", "n-1", "not a number");
  f.producer().Send("orders", std::nullopt, "no id header");
  f.producer().Send("orders", "g-1", "42");

  auto opts = f.Options("svc", "orders");
  opts.max_attempts = 3;
  RunningConsumer c(opts, *store, handler);
  // The good record behind the poison one still gets through.
  REQUIRE(WaitUntil([&] { return c.stats().completed == 1; }, 30s));
  CHECK(c.Stop().ok());
  CHECK(c.stats().dead_lettered == 3);
  CHECK(c.stats().retries == 2);
  CHECK(runs["p-1"] == 3);
  CHECK(runs["n-1"] == 1);
  CHECK(f.Value("SELECT note FROM effects WHERE key = 'g-1'") == "42");
  CHECK(KeyState(f, "svc", "p-1") == "FAILED/3/-");
  CHECK(KeyState(f, "svc", "n-1") == "FAILED/1/-");
  CHECK(f.Value("SELECT last_error FROM walrelay_consumer_keys WHERE idempotency_key = 'n-1'")
            .rfind("sqlstate:22P02: ", 0) == 0);

  auto reader = f.Reader();
  auto dlq = reader->ReadAtLeast({"svc.dlq"}, 3, 20s);
  REQUIRE(dlq.ok());
  REQUIRE(dlq->size() == 3);
  const auto& poison = (*dlq)[0];
  CHECK(*poison.value == "poison");
  CHECK(HeaderOf(poison, "id") == "p-1");
  CHECK(HeaderOf(poison, "__walrelay.consumer.name") == "svc");
  CHECK(HeaderOf(poison, "__walrelay.consumer.key") == "p-1");
  CHECK(HeaderOf(poison, "__walrelay.consumer.error.class") == "Unavailable");
  CHECK(HeaderOf(poison, "__walrelay.consumer.error.message") ==
        "always down for poison (after 3 attempts)");
  CHECK(HeaderOf(poison, "__walrelay.consumer.attempts") == "3");
  CHECK(HeaderOf(poison, "__walrelay.consumer.original.topic") == "orders");
  CHECK(HeaderOf(poison, "__walrelay.consumer.original.partition") == "0");
  CHECK(HeaderOf(poison, "__walrelay.consumer.original.offset") == "0");
  CHECK(HeaderOf((*dlq)[1], "__walrelay.consumer.error.class") == "sqlstate:22P02");
  CHECK(HeaderOf((*dlq)[1], "__walrelay.consumer.attempts") == "1");
  CHECK(HeaderOf((*dlq)[2], "__walrelay.consumer.error.class") == "InvalidIdempotencyKey");
  CHECK(HeaderOf((*dlq)[2], "__walrelay.consumer.original.offset") == "2");

  // A redelivered dead letter is skipped, not dead-lettered again.
  f.producer().Send("orders", "p-1", "poison");
  RunningConsumer again(opts, *store, handler);
  REQUIRE(WaitUntil([&] { return again.stats().duplicates == 1; }, 30s));
  CHECK(again.Stop().ok());
  CHECK(again.stats().dead_lettered == 0);
  CHECK(runs["p-1"] == 3);
}

TEST_CASE("Consumer options are checked") {
  ConsumerFixture f;
  auto store = f.Store();
  auto handler = ConsumerFixture::EffectHandler();
  auto bad = [&](auto edit) {
    auto o = f.Options("svc", "orders");
    edit(o);
    auto c = wc::Consumer::Create(o, *store, handler);
    REQUIRE(!c.ok());
    return c.status().message();
  };
  CHECK(bad([](auto& o) { o.name = ""; }).find("name") != std::string::npos);
  CHECK(bad([](auto& o) { o.max_attempts = 0; }).find("max_attempts") != std::string::npos);
  CHECK(bad([](auto& o) {
          o.kafka_properties["enable.auto.commit"] = "true";
        }).find("enable.auto.commit must be false") != std::string::npos);
  CHECK(bad([](auto& o) {
          o.max_attempts = 100;
          o.backoff_max = 10s;
        }).find("max.poll.interval.ms") != std::string::npos);
  CHECK(bad([](auto& o) {
          o.kafka_properties["no.such.property"] = "1";
        }).find("ConsumerOptions.kafka_properties.no.such.property") != std::string::npos);
}

}  // namespace
}  // namespace walrelay::testing
