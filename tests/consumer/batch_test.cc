// The consumer's poll batches against real PostgreSQL and redis-server (librdkafka's mock
// cluster for Kafka): the batch paths of both stores must give every record the outcome the
// record-by-record path gives, in partition order, with a failing handler undoing only its own
// writes; and the consumer must keep its group membership while it waits inside a record.
#include <map>
#include <mutex>

#include "consumer_fixture.h"
#include "devtools/redis_sandbox.h"

namespace walrelay::testing {
namespace {

std::unique_ptr<devtools::RedisSandbox> StartRedis() {
  auto r = devtools::RedisSandbox::Start();
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

std::unique_ptr<wc::RedisStore> ConnectRedis(const devtools::RedisSandbox& redis,
                                             wc::RedisStoreOptions o = {}) {
  o.port = redis.port();
  auto s = wc::RedisStore::Connect(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  return std::move(s).value();
}

wc::Message Msg(int64_t offset, const std::string& value = "v") {
  wc::Message m;
  m.topic = "orders";
  m.partition = 0;
  m.offset = offset;
  m.value = value;
  return m;
}

std::vector<wc::BatchRecord> Batch(const std::vector<wc::Message>& messages,
                                   const std::vector<std::string>& keys) {
  std::vector<wc::BatchRecord> out;
  for (size_t i = 0; i < keys.size(); ++i) out.push_back({&messages[i], keys[i], {}});
  return out;
}

std::string States(const std::vector<wc::Claim>& claims) {
  std::string out;
  for (const auto& c : claims)
    out += std::string(out.empty() ? "" : ",") + wc::ClaimStateName(c.state) + "/" +
           std::to_string(c.attempts);
  return out;
}

TEST_CASE("PostgresStore batches: claims answer as Acquire does; a failed handler undoes only "
          "itself and gives the later claims back uncounted") {
  ConsumerFixture f;
  auto store = f.Store();
  auto other = f.Store();
  const std::vector<wc::Message> m = {Msg(0), Msg(1), Msg(2), Msg(3), Msg(4), Msg(5), Msg(6)};
  // done: COMPLETED before; held: another owner's live claim; stale: another owner's ended one.
  REQUIRE(store->Acquire("svc", "done", "me", 30s, m[0]).ok());
  REQUIRE(store->Run("svc", "done", "me", 1h, m[0], 1, ConsumerFixture::EffectHandler()).ok());
  REQUIRE(other->Acquire("svc", "held", "other", 30s, m[0])->state == wc::Claim::State::kAcquired);
  REQUIRE(other->Acquire("svc", "stale", "other", 1ms, m[0])->state == wc::Claim::State::kAcquired);
  std::this_thread::sleep_for(20ms);
  f.Exec("DELETE FROM effects");

  auto claims = store->AcquireBatch("svc", Batch(m, {"done", "new", "held", "stale"}), "me", 30s);
  REQUIRE_MESSAGE(claims.ok(), claims.status().ToString());
  CHECK(States(*claims) == "DUPLICATE/1,ACQUIRED/1,CONFLICT/1,TAKEN_OVER/2");
  CHECK((*claims)[0].result == "effect for done");
  CHECK((*claims)[2].previous_owner == "other");
  CHECK((*claims)[2].retry_after > 20s);
  CHECK((*claims)[3].previous_owner == "other");

  // Four new keys; the handler fails on "b" after writing its row.
  auto keys = std::vector<std::string>{"a", "b", "c", "d"};
  claims = store->AcquireBatch("svc", Batch(m, keys), "me", 30s);
  REQUIRE(claims.ok());
  CHECK(States(*claims) == "ACQUIRED/1,ACQUIRED/1,ACQUIRED/1,ACQUIRED/1");
  auto records = Batch(m, keys);
  for (size_t i = 0; i < records.size(); ++i) records[i].claim = (*claims)[i];
  std::vector<std::string> ran;
  auto handler = [&](wc::HandlerContext& ctx) {
    ran.push_back(ctx.idempotency_key());
    auto r = ctx.Exec("INSERT INTO effects (key) VALUES ($1)", {ctx.idempotency_key()});
    if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
    if (ctx.idempotency_key() == "b") return wc::HandlerResult::Retry("Flaky", "try later");
    return wc::HandlerResult::Done("ok " + ctx.idempotency_key());
  };
  auto run = store->RunBatch("svc", records, "me", 1h, handler);
  REQUIRE_MESSAGE(run.ok(), run.status().ToString());
  REQUIRE(run->size() == 2);
  CHECK((*run)[0].kind == wc::RunOutcome::Kind::kCompleted);
  CHECK((*run)[1].kind == wc::RunOutcome::Kind::kFailed);
  CHECK((*run)[1].handler.error_class == "Flaky");
  CHECK(ran == std::vector<std::string>{"a", "b"});
  // a's row and mark committed; b's row rolled back to its savepoint; c, d not run.
  CHECK(f.Value("SELECT string_agg(key, ',' ORDER BY key) FROM effects") == "a");
  auto state = [&](const std::string& key) {
    return f.Value("SELECT state || '/' || attempts || '/' || coalesce(locked_by, '-') FROM "
                   "walrelay_consumer_keys WHERE consumer_name = 'svc' AND idempotency_key = '" +
                   key + "'");
  };
  CHECK(state("a") == "COMPLETED/1/-");
  CHECK(state("b") == "PENDING/1/me");  // the consumer releases it when it retries
  CHECK(state("c") == "PENDING/0/-");   // given back, attempt uncounted
  CHECK(state("d") == "PENDING/0/-");
}

TEST_CASE("PostgresStore batches: a deferred constraint failing at COMMIT sends the batch "
          "record by record") {
  ConsumerFixture f;
  f.Exec("CREATE TABLE uniq (v text, CONSTRAINT uniq_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)");
  f.Exec("INSERT INTO uniq VALUES ('taken')");
  auto store = f.Store();
  const std::vector<wc::Message> m = {Msg(0, "free-1"), Msg(1, "taken"), Msg(2, "free-2")};
  const std::vector<std::string> keys = {"x", "y", "z"};
  auto claims = store->AcquireBatch("svc", Batch(m, keys), "me", 30s);
  REQUIRE(claims.ok());
  auto records = Batch(m, keys);
  for (size_t i = 0; i < records.size(); ++i) records[i].claim = (*claims)[i];
  auto handler = [](wc::HandlerContext& ctx) {
    auto r = ctx.Exec("INSERT INTO uniq VALUES ($1)", {ctx.message().value});
    if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
    return wc::HandlerResult::Done();
  };
  auto run = store->RunBatch("svc", records, "me", 1h, handler);
  REQUIRE(run.ok());
  CHECK(run->empty());  // nothing kept: the caller goes record by record
  CHECK(f.Count("SELECT count(*) FROM uniq") == 1);
  CHECK(f.Count("SELECT count(*) FROM walrelay_consumer_keys WHERE attempts = 0 AND "
                "locked_by IS NULL") == 3);
}

TEST_CASE("PostgresStore batches: a handler that ends the batch's transaction; a COMMIT keeps the "
          "earlier records with their marks, a ROLLBACK sends the batch record by record") {
  ConsumerFixture f;
  auto store = f.Store();
  const std::vector<wc::Message> m = {Msg(0), Msg(1), Msg(2)};
  auto state = [&](const std::string& key) {
    return f.Value("SELECT state || '/' || attempts || '/' || coalesce(locked_by, '-') FROM "
                   "walrelay_consumer_keys WHERE consumer_name = 'svc' AND idempotency_key = '" +
                   key + "'");
  };
  for (const std::string end : {"COMMIT", "  rollback"}) {
    CAPTURE(end);
    f.Exec("DELETE FROM effects");
    const std::string p = end == "COMMIT" ? "c" : "r";
    const std::vector<std::string> keys = {p + "1", p + "2", p + "3"};
    auto claims = store->AcquireBatch("svc", Batch(m, keys), "me", 30s);
    REQUIRE(claims.ok());
    auto records = Batch(m, keys);
    for (size_t i = 0; i < records.size(); ++i) records[i].claim = (*claims)[i];
    auto handler = [&](wc::HandlerContext& ctx) {
      auto r = ctx.Exec("INSERT INTO effects (key) VALUES ($1)", {ctx.idempotency_key()});
      if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
      if (ctx.idempotency_key() == keys[1]) (void)ctx.Exec(end, {});
      return wc::HandlerResult::Done();
    };
    auto run = store->RunBatch("svc", records, "me", 1h, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    if (end == "COMMIT") {
      // The first record's row and mark were committed by the handler's COMMIT itself.
      REQUIRE(run->size() == 2);
      CHECK((*run)[0].kind == wc::RunOutcome::Kind::kCompleted);
      CHECK((*run)[1].kind == wc::RunOutcome::Kind::kFailed);
      CHECK((*run)[1].handler.error_class == "HandlerEndedTransaction");
      CHECK(state("c1") == "COMPLETED/1/-");
      CHECK(state("c3") == "PENDING/0/-");
      CHECK(f.Value("SELECT string_agg(key, ',' ORDER BY key) FROM effects") == "c1,c2");
    } else {
      CHECK(run->empty());  // nothing kept: the caller goes record by record
      CHECK(f.Count("SELECT count(*) FROM effects") == 0);
      CHECK(state("r1") == "PENDING/0/-");
      CHECK(state("r3") == "PENDING/0/-");
    }
  }
}

TEST_CASE("PostgresStore claims and runs a batch in one transaction: duplicates skipped, a failed "
          "handler leaves its claim, the records after it are given back; a handler's COMMIT or "
          "its own use of the connection never commits an unrun record") {
  ConsumerFixture f;
  auto store = f.Store();
  auto other = f.Store();
  const std::vector<wc::Message> m = {Msg(0), Msg(1), Msg(2), Msg(3), Msg(4)};
  REQUIRE(store->Acquire("svc", "done", "me", 30s, m[0]).ok());
  REQUIRE(store->Run("svc", "done", "me", 1h, m[0], 1, ConsumerFixture::EffectHandler()).ok());
  f.Exec("DELETE FROM effects");
  auto state = [&](const std::string& key) {
    return f.Value("SELECT coalesce((SELECT state || '/' || attempts || '/' || "
                   "coalesce(locked_by, '-') || '/' || coalesce(result, '') FROM "
                   "walrelay_consumer_keys WHERE consumer_name = 'svc' AND idempotency_key = '" +
                   key + "'), 'absent')");
  };
  auto accept_all = [](const wc::BatchRecord&, const wc::Claim&) { return true; };
  // The handler writes its row; `fail_on` fails, `end_on` sends `end` itself, `raw` uses the
  // connection directly.
  std::string fail_on, end_on, end = "COMMIT";
  bool raw = false;
  std::vector<std::string> ran;
  auto handler = [&](wc::HandlerContext& ctx) {
    ran.push_back(ctx.idempotency_key());
    if (raw) {
      const std::string sql = "INSERT INTO effects (key) VALUES ('" + ctx.idempotency_key() + "')";
      PQclear(PQexec(ctx.connection(), sql.c_str()));
    } else {
      auto r = ctx.Exec("INSERT INTO effects (key) VALUES ($1)", {ctx.idempotency_key()});
      if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
    }
    if (ctx.idempotency_key() == end_on) (void)ctx.Exec("/* the handler's */ " + end, {});
    if (ctx.idempotency_key() == fail_on) return wc::HandlerResult::Retry("Flaky", "try later");
    return wc::HandlerResult::Done(ctx.idempotency_key() == "a2" ? "" : "ok");
  };
  auto effects = [&] { return f.Value("SELECT string_agg(key, ',' ORDER BY key) FROM effects"); };

  SUBCASE("a failed handler") {
    fail_on = "a2";
    auto run = store->ClaimAndRunBatch("svc", Batch(m, {"done", "a1", "a2", "a3"}), "me", 30s, 1h,
                                       accept_all, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    CHECK(States(run->claims) == "DUPLICATE/1,ACQUIRED/1,ACQUIRED/1,ACQUIRED/1");
    CHECK(run->claims[0].result == "effect for done");
    REQUIRE(run->outcomes.size() == 2);
    CHECK(run->outcomes[0].kind == wc::RunOutcome::Kind::kCompleted);
    CHECK(run->outcomes[1].kind == wc::RunOutcome::Kind::kFailed);
    CHECK(ran == std::vector<std::string>{"a1", "a2"});
    CHECK(effects() == "a1");
    CHECK(state("a1") == "COMPLETED/1/-/ok");
    CHECK(state("a2") == "PENDING/1/me/");  // the consumer releases it when it retries
    CHECK(state("a3") == "absent");         // given back, no attempt counted
  }
  SUBCASE("every record completes; a refused claim ends the batch before it") {
    REQUIRE(other->Acquire("svc", "held", "other", 30s, m[0])->state ==
            wc::Claim::State::kAcquired);
    auto refuse_held = [](const wc::BatchRecord&, const wc::Claim& c) {
      return c.state != wc::Claim::State::kConflict;
    };
    // A PENDING row in the batch: the two-step path answers it, as AcquireBatch does.
    auto run = store->ClaimAndRunBatch("svc", Batch(m, {"a1", "a2", "held", "a3"}), "me", 30s, 1h,
                                       refuse_held, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    CHECK(States(run->claims) == "ACQUIRED/1,ACQUIRED/1,CONFLICT/1");
    CHECK(run->outcomes.size() == 2);
    CHECK(state("a1") == "COMPLETED/1/-/ok");
    CHECK(state("a2") == "COMPLETED/1/-/");
    CHECK(state("a3") == "PENDING/0/-/");
    // Without it, one transaction.
    run = store->ClaimAndRunBatch("svc", Batch(m, {"b1", "b2", "a1"}), "me", 30s, 1h, accept_all,
                                  handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    CHECK(States(run->claims) == "ACQUIRED/1,ACQUIRED/1,DUPLICATE/1");
    CHECK(run->outcomes.size() == 2);
    CHECK(state("b1") == "COMPLETED/1/-/ok");
    CHECK(effects() == "a1,a2,b1,b2");
  }
  SUBCASE("the handler commits") {
    end_on = "a2";
    auto run = store->ClaimAndRunBatch("svc", Batch(m, {"a1", "a2", "a3"}), "me", 30s, 1h,
                                       accept_all, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    REQUIRE(run->outcomes.size() == 2);
    CHECK(run->outcomes[1].handler.error_class == "HandlerEndedTransaction");
    CHECK(state("a1") == "COMPLETED/1/-/ok");
    CHECK(state("a2") == "PENDING/1/me/");
    CHECK(state("a3") == "absent");
    CHECK(effects() == "a1,a2");
  }
  SUBCASE("the handler rolls back") {
    end_on = "a2";
    end = "ROLLBACK";
    auto run = store->ClaimAndRunBatch("svc", Batch(m, {"a1", "a2", "a3"}), "me", 30s, 1h,
                                       accept_all, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    CHECK(run->one_by_one);
    CHECK(state("a1") == "absent");
    CHECK(f.Count("SELECT count(*) FROM effects") == 0);
  }
  SUBCASE("the handler uses the connection itself, and commits unseen") {
    raw = true;
    auto run = store->ClaimAndRunBatch("svc", Batch(m, {"a1", "a2", "a3"}), "me", 30s, 1h,
                                       accept_all, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    CHECK(run->outcomes.size() == 3);
    CHECK(state("a1") == "COMPLETED/1/-/ok");
    CHECK(state("a2") == "COMPLETED/1/-/");
    f.Exec("DELETE FROM effects");
    end_on = "b2";
    ran.clear();
    // PQexec's COMMIT is not seen by the store; the rows of b2 and b3 were claims by then.
    auto committing = [&](wc::HandlerContext& ctx) {
      ran.push_back(ctx.idempotency_key());
      const std::string sql = "INSERT INTO effects (key) VALUES ('" + ctx.idempotency_key() + "')";
      PQclear(PQexec(ctx.connection(), sql.c_str()));
      if (ctx.idempotency_key() == "b2") PQclear(PQexec(ctx.connection(), "COMMIT"));
      return wc::HandlerResult::Done();
    };
    run = store->ClaimAndRunBatch("svc", Batch(m, {"b1", "b2", "b3"}), "me", 30s, 1h, accept_all,
                                  committing);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    REQUIRE(run->outcomes.size() == 2);
    CHECK(run->outcomes[1].handler.error_class == "HandlerEndedTransaction");
    CHECK(state("b1") == "COMPLETED/1/-/");
    CHECK(state("b2") == "PENDING/1/me/");
    CHECK(state("b3") == "absent");
    CHECK(effects() == "b1,b2");
  }
}

TEST_CASE("RedisStore batches: pipelined claims answer as Acquire does; marks are checked "
          "per record; the claims after a failure are given back uncounted") {
  auto redis = StartRedis();
  auto store = ConnectRedis(*redis);
  auto other = ConnectRedis(*redis);
  const std::vector<wc::Message> m = {Msg(0), Msg(1), Msg(2), Msg(3), Msg(4)};
  auto done = [](wc::HandlerContext& ctx) {
    return wc::HandlerResult::Done("ok " + ctx.idempotency_key());
  };
  REQUIRE(store->Acquire("svc", "done", "me", 30s, m[0]).ok());
  REQUIRE(store->Run("svc", "done", "me", 1h, m[0], 1, done)->kind ==
          wc::RunOutcome::Kind::kCompleted);
  REQUIRE(other->Acquire("svc", "held", "other", 30s, m[0]).ok());
  auto claims = store->AcquireBatch("svc", Batch(m, {"done", "new", "held"}), "me", 30s);
  REQUIRE_MESSAGE(claims.ok(), claims.status().ToString());
  CHECK(States(*claims) == "DUPLICATE/1,ACQUIRED/1,CONFLICT/1");
  CHECK((*claims)[0].result == "ok done");
  CHECK((*claims)[1].fencing_token == 1);

  const std::vector<std::string> keys = {"a", "b", "c", "d"};
  claims = store->AcquireBatch("svc", Batch(m, keys), "me", 30s);
  REQUIRE(claims.ok());
  auto records = Batch(m, keys);
  for (size_t i = 0; i < records.size(); ++i) records[i].claim = (*claims)[i];
  // b's claim is taken over behind our back before its mark: its mark must be refused.
  std::vector<std::string> ran;
  auto handler = [&](wc::HandlerContext& ctx) {
    ran.push_back(ctx.idempotency_key() + "#" + std::to_string(ctx.fencing_token()));
    if (ctx.idempotency_key() == "b")
      REQUIRE(
          redis->Command({"HSET", "walrelay:consumer:svc:b", "owner", "thief", "fence", "2"}).ok());
    if (ctx.idempotency_key() == "c") return wc::HandlerResult::Retry("Flaky", "try later");
    return wc::HandlerResult::Done("ok " + ctx.idempotency_key());
  };
  auto run = store->RunBatch("svc", records, "me", 1h, handler);
  REQUIRE_MESSAGE(run.ok(), run.status().ToString());
  REQUIRE(run->size() == 3);
  CHECK((*run)[0].kind == wc::RunOutcome::Kind::kCompleted);
  CHECK((*run)[1].kind == wc::RunOutcome::Kind::kLost);
  CHECK((*run)[2].kind == wc::RunOutcome::Kind::kFailed);
  CHECK(ran == std::vector<std::string>{"a#1", "b#1", "c#1"});
  auto field = [&](const std::string& key, const std::string& name) {
    return *redis->Command({"HGET", "walrelay:consumer:svc:" + key, name});
  };
  CHECK(field("a", "state") == "COMPLETED");
  CHECK(field("a", "result") == "ok a");
  CHECK(field("b", "state") == "PENDING");
  CHECK(field("b", "owner") == "thief");
  CHECK(field("c", "owner") == "me");  // the consumer releases it when it retries
  CHECK(field("d", "owner") == "");    // given back, attempt uncounted
  CHECK(field("d", "attempts") == "0");
}

TEST_CASE("RedisStore claims a batch while it runs: handlers start after the first claims, the "
          "batch stops at a refused claim or a failure, the later claims are given back") {
  auto redis = StartRedis();
  auto store = ConnectRedis(*redis);
  auto other = ConnectRedis(*redis);
  // 120 records: more claim calls than one, so later calls are read while the batch runs.
  std::vector<wc::Message> m;
  std::vector<std::string> keys;
  for (int i = 0; i < 120; ++i) {
    m.push_back(Msg(i));
    keys.push_back("k" + std::to_string(i));
  }
  REQUIRE(other->Acquire("svc", "k100", "other", 30s, m[0]).ok());
  std::string fail_on;
  std::vector<std::string> ran;
  auto handler = [&](wc::HandlerContext& ctx) {
    ran.push_back(ctx.idempotency_key());
    if (ctx.idempotency_key() == fail_on) return wc::HandlerResult::Retry("Flaky", "try later");
    return wc::HandlerResult::Done("ok " + ctx.idempotency_key());
  };
  auto refuse_held = [](const wc::BatchRecord&, const wc::Claim& c) {
    return c.state != wc::Claim::State::kConflict;
  };
  auto field = [&](const std::string& key, const std::string& name) {
    return *redis->Command({"HGET", "walrelay:consumer:svc:" + key, name});
  };

  SUBCASE("a refused claim") {
    auto run = store->ClaimAndRunBatch("svc", Batch(m, keys), "me", 30s, 1h, refuse_held, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    REQUIRE(run->claims.size() == 101);
    CHECK(run->claims[100].state == wc::Claim::State::kConflict);
    CHECK(run->outcomes.size() == 100);
    for (const auto& o : run->outcomes) CHECK(o.kind == wc::RunOutcome::Kind::kCompleted);
    CHECK(ran.size() == 100);
    CHECK(field("k99", "state") == "COMPLETED");
    CHECK(field("k101", "owner") == "");  // given back, attempt uncounted
    CHECK(field("k101", "attempts") == "0");
    CHECK(field("k119", "attempts") == "0");
  }
  SUBCASE("a failed handler") {
    fail_on = "k60";
    auto run = store->ClaimAndRunBatch("svc", Batch(m, keys), "me", 30s, 1h, refuse_held, handler);
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    CHECK(run->claims.size() == 101);
    REQUIRE(run->outcomes.size() == 61);
    CHECK(run->outcomes[60].kind == wc::RunOutcome::Kind::kFailed);
    CHECK(field("k59", "state") == "COMPLETED");
    CHECK(field("k60", "owner") == "me");  // the consumer releases it when it retries
    CHECK(field("k61", "attempts") == "0");
    CHECK(field("k99", "owner") == "");
  }
}

TEST_CASE("Consumer batches: outcomes in partition order, a retried record in place, a key "
          "twice in one batch, every effect once (PostgreSQL and Redis)") {
  ConsumerFixture f;
  REQUIRE(f.kafka().CreateTopic("orders", 2, 1).ok());
  auto redis = StartRedis();
  // 40 records over two partitions, all there before the consumer starts, so they arrive in
  // a few large batches. e-13 fails its first run; e-7 comes twice (a relay repeat).
  std::vector<std::pair<std::string, int>> sent;
  for (int i = 0; i < 40; ++i) sent.push_back({"e-" + std::to_string(i), i % 2});
  sent.insert(sent.begin() + 20, {"e-7", 1});
  for (const auto& [id, partition] : sent) f.producer().Send("orders", id, "v-" + id, partition);

  std::mutex mu;
  std::map<int, std::vector<std::string>> order;  // partition -> keys as finished
  std::map<std::string, int> runs;
  auto opts = f.Options("svc", "orders");
  opts.on_processed = [&](const wc::Message& m, const wc::RecordOutcome& o) {
    std::lock_guard<std::mutex> lock(mu);
    order[m.partition].push_back(o.idempotency_key + ":" + wc::RecordOutcomeName(o.kind));
  };
  auto count_run = [&](const std::string& key) {
    std::lock_guard<std::mutex> lock(mu);
    return ++runs[key];
  };
  auto expected = [&](int partition) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const auto& [id, p] : sent)
      if (p == partition)
        out.push_back(id + (seen.insert(id).second ? ":completed" : ":duplicate"));
    return out;
  };

  SUBCASE("PostgreSQL") {
    auto store = f.Store();
    RunningConsumer c(opts, *store, [&](wc::HandlerContext& ctx) {
      auto r = ctx.Exec("INSERT INTO effects (key, note) VALUES ($1, $2)",
                        {ctx.idempotency_key(), ctx.message().value});
      if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
      if (ctx.idempotency_key() == "e-13" && count_run("e-13") == 1)
        return wc::HandlerResult::Retry("Flaky", "first run fails");
      return wc::HandlerResult::Done();
    });
    REQUIRE(WaitUntil([&] { return c.stats().completed + c.stats().duplicates == 41; }, 30s));
    CHECK(c.Stop().ok());
    CHECK(c.stats().completed == 40);
    CHECK(c.stats().duplicates == 1);
    CHECK(c.stats().retries == 1);
    CHECK(f.Count("SELECT count(*) FROM effects") == 40);
    CHECK(f.Count("SELECT count(DISTINCT key) FROM effects") == 40);
    CHECK(f.Count("SELECT count(*) FROM walrelay_consumer_keys WHERE state = 'COMPLETED'") == 40);
    CHECK(f.Value("SELECT attempts FROM walrelay_consumer_keys WHERE idempotency_key = 'e-13'") ==
          "2");
    CHECK(f.Count("SELECT count(*) FROM walrelay_consumer_keys WHERE attempts <> 1") == 1);
  }
  SUBCASE("Redis") {
    auto store = ConnectRedis(*redis);
    RunningConsumer c(opts, *store, [&](wc::HandlerContext& ctx) {
      const int n = count_run(ctx.idempotency_key());
      if (ctx.idempotency_key() == "e-13" && n == 1)
        return wc::HandlerResult::Retry("Flaky", "first run fails");
      return wc::HandlerResult::Done();
    });
    REQUIRE(WaitUntil([&] { return c.stats().completed + c.stats().duplicates == 41; }, 30s));
    CHECK(c.Stop().ok());
    CHECK(c.stats().completed == 40);
    CHECK(c.stats().duplicates == 1);
    CHECK(c.stats().retries == 1);
    std::lock_guard<std::mutex> lock(mu);
    CHECK(runs.size() == 40);
    for (const auto& run : runs)
      CHECK_MESSAGE(run.second == (run.first == "e-13" ? 2 : 1), run.first);
    CHECK(*redis->Command({"HGET", "walrelay:consumer:svc:e-14", "attempts"}) == "1");
  }
  std::lock_guard<std::mutex> lock(mu);
  CHECK(order[0] == expected(0));
  CHECK(order[1] == expected(1));
}

// A member paused inside its batch transaction (in a handler, between two records) holds the
// row locks of every key of its batch until its connection ends. `PausedBatch` is that member:
// it claims and runs `keys` in one transaction and stops in the first handler until released.
class PausedBatch {
 public:
  PausedBatch(ConsumerFixture& f, const std::vector<std::string>& keys)
      : store_(f.Store()), keys_(keys) {
    for (size_t i = 0; i < keys_.size(); ++i) messages_.push_back(Msg(static_cast<int64_t>(i)));
    thread_ = std::thread([this] {
      auto handler = [this](wc::HandlerContext& ctx) {
        auto r = ctx.Exec("INSERT INTO effects (key) VALUES ($1)", {ctx.idempotency_key()});
        if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
        paused_ = true;
        while (!release_) std::this_thread::sleep_for(5ms);
        return wc::HandlerResult::Done();
      };
      auto accept_all = [](const wc::BatchRecord&, const wc::Claim&) { return true; };
      run_ = store_->ClaimAndRunBatch("svc", Batch(messages_, keys_), "paused-member", 60s, 1h,
                                      accept_all, handler);
    });
    REQUIRE(WaitUntil([&] { return paused_.load(); }, 10s));
  }
  ~PausedBatch() { Release(); }
  // Lets the paused member finish its batch; returns how many of its records completed.
  size_t Release() {
    release_ = true;
    if (thread_.joinable()) thread_.join();
    return run_.ok() ? run_->outcomes.size() : 0;
  }

 private:
  std::unique_ptr<wc::PostgresStore> store_;
  std::vector<std::string> keys_;
  std::vector<wc::Message> messages_;
  std::atomic<bool> paused_{false}, release_{false};
  Result<wc::BatchRun> run_ = Status::Internal("not run");
  std::thread thread_;
};

TEST_CASE("PostgresStore batches: keys locked by a member paused inside its batch cost the next "
          "claimant one lease in all, not one per key") {
  ConsumerFixture f;
  const std::vector<std::string> keys = {"p0", "p1", "p2", "p3", "p4", "p5"};
  PausedBatch paused(f, keys);
  auto store = f.Store();
  std::vector<wc::Message> m;
  for (size_t i = 0; i < keys.size(); ++i) m.push_back(Msg(static_cast<int64_t>(i)));
  const auto lease = 700ms;
  const auto began = std::chrono::steady_clock::now();
  auto claims = store->AcquireBatch("svc", Batch(m, keys), "me", lease);
  const auto waited = std::chrono::steady_clock::now() - began;
  REQUIRE_MESSAGE(claims.ok(), claims.status().ToString());
  // The batch's own statement waits one lease for the first lock; every key then answers at
  // once (a wait of a lease per key would take 7 leases here).
  CHECK(States(*claims) == "CONFLICT/0,CONFLICT/0,CONFLICT/0,CONFLICT/0,CONFLICT/0,CONFLICT/0");
  CHECK(waited >= lease);
  CHECK_MESSAGE(waited < 3 * lease,
                std::chrono::duration_cast<std::chrono::milliseconds>(waited).count(), " ms");
  // Nothing changed for the paused member: once released it completes every record, and the
  // claimant then finds them all done.
  CHECK(paused.Release() == keys.size());
  claims = store->AcquireBatch("svc", Batch(m, keys), "me", lease);
  REQUIRE(claims.ok());
  CHECK(States(*claims) ==
        "DUPLICATE/1,DUPLICATE/1,DUPLICATE/1,DUPLICATE/1,DUPLICATE/1,DUPLICATE/1");
  CHECK(f.Count("SELECT count(*) FROM effects") == static_cast<int64_t>(keys.size()));
}

TEST_CASE("Consumer + PostgresStore: keys locked by a member paused inside its batch keep the "
          "waiting member polling (no max.poll.interval.ms eviction), then are duplicates") {
  ConsumerFixture f;
  REQUIRE(f.kafka().CreateTopic("orders", 1, 1).ok());
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back("e-" + std::to_string(i));
  PausedBatch paused(f, keys);
  for (const std::string& k : keys) f.producer().Send("orders", k, "v");

  std::mutex mu;
  std::vector<std::string> trouble;
  auto opts = f.Options("svc", "orders");
  // A lease well over half of max.poll.interval.ms: two lock waits in one store call (the
  // batch's, then its first key's again) would already exceed it.
  opts.lease = 2500ms;
  opts.kafka_properties["session.timeout.ms"] = "4000";
  opts.kafka_properties["max.poll.interval.ms"] = "4000";
  auto log = opts.log;
  opts.log = [&, log](wc::LogLevel level, const std::string& line) {
    log(level, line);
    if (line.find("lost ") == 0 || line.find("revoked ") == 0 || line.find("Kafka: ") == 0) {
      std::lock_guard<std::mutex> lock(mu);
      trouble.push_back(line);
    }
  };
  auto store = f.Store();
  std::atomic<int> runs{0};
  RunningConsumer c(opts, *store, [&](wc::HandlerContext&) {
    ++runs;
    return wc::HandlerResult::Done();
  });
  // Twice max.poll.interval.ms waiting on the locked keys (a poll's n keys waited for a lease
  // each would keep the member inside one store call for (n + 1) leases).
  REQUIRE(WaitUntil([&] { return c.stats().conflicts > 0; }, 20s));
  std::this_thread::sleep_for(8500ms);
  CHECK(c.stats().completed == 0);
  CHECK(paused.Release() == keys.size());
  REQUIRE(
      WaitUntil([&] { return c.stats().duplicates == static_cast<int64_t>(keys.size()); }, 20s));
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK_MESSAGE(trouble.empty(), (trouble.empty() ? "" : trouble.front()));
  }
  CHECK(c.Stop().ok());
  CHECK(runs.load() == 0);
  CHECK(f.Count("SELECT count(*) FROM effects") == static_cast<int64_t>(keys.size()));
}

TEST_CASE("Consumer: waiting on a key held by a stuck handler keeps the group membership "
          "(no max.poll.interval.ms eviction)") {
  ConsumerFixture f;
  REQUIRE(f.kafka().CreateTopic("orders", 1, 1).ok());
  auto redis = StartRedis();
  auto store = ConnectRedis(*redis);
  auto stuck = ConnectRedis(*redis);
  // Another member's handler holds e-1 with a long lease and never finishes.
  const wc::Message m = Msg(0);
  REQUIRE(stuck->Acquire("svc", "e-1", "stuck-member", 60s, m)->state ==
          wc::Claim::State::kAcquired);
  f.producer().Send("orders", "e-1", "v");

  std::mutex mu;
  std::vector<std::string> trouble;
  auto opts = f.Options("svc", "orders");
  opts.kafka_properties["session.timeout.ms"] = "3000";
  opts.kafka_properties["max.poll.interval.ms"] = "3000";
  auto log = opts.log;
  opts.log = [&, log](wc::LogLevel level, const std::string& line) {
    log(level, line);
    if (line.find("lost ") == 0 || line.find("revoked ") == 0 || line.find("Kafka: ") == 0) {
      std::lock_guard<std::mutex> lock(mu);
      trouble.push_back(line);
    }
  };
  RunningConsumer c(opts, *store, [](wc::HandlerContext&) { return wc::HandlerResult::Done(); });
  // Twice max.poll.interval.ms waiting on the key.
  REQUIRE(WaitUntil([&] { return c.stats().conflicts > 0; }, 20s));
  std::this_thread::sleep_for(6500ms);
  CHECK(c.stats().completed == 0);
  // The stuck member's lease is ended by hand: the waiting consumer takes the key over.
  REQUIRE(redis->Command({"HSET", "walrelay:consumer:svc:e-1", "expires_at", "0"}).ok());
  REQUIRE(WaitUntil([&] { return c.stats().completed == 1; }, 10s));
  {
    // Neither evicted nor rebalanced while it waited (Stop() revokes, afterwards).
    std::lock_guard<std::mutex> lock(mu);
    CHECK_MESSAGE(trouble.empty(), (trouble.empty() ? "" : trouble.front()));
  }
  CHECK(c.Stop().ok());
  CHECK(c.stats().takeovers == 1);
}

// One run of the payload-mismatch case: consumer `name` on topic `name`.
void PayloadMismatchRun(ConsumerFixture& f, wc::IdempotencyStore& store, bool postgres,
                        const devtools::RedisSandbox& redis, const std::string& name, bool skip) {
  CAPTURE(name);
  REQUIRE(f.kafka().CreateTopic(name, 1, 1).ok());
  f.producer().Send(name, "e-1", "amount=10");
  f.producer().Send(name, "e-1", "amount=10");    // a plain repeat: a duplicate
  f.producer().Send(name, "e-1", "amount=9999");  // the same key, another payload
  f.producer().Send(name, "e-2", "amount=20");

  std::mutex mu;
  std::vector<std::string> errors, outcomes;
  auto opts = f.Options(name, name);
  if (skip) opts.payload_mismatch = wc::PayloadMismatch::kSkip;
  auto log = opts.log;
  opts.log = [&, log](wc::LogLevel level, const std::string& line) {
    log(level, line);
    std::lock_guard<std::mutex> lock(mu);
    if (level == wc::LogLevel::kError) errors.push_back(line);
  };
  opts.on_processed = [&](const wc::Message& m, const wc::RecordOutcome& o) {
    std::lock_guard<std::mutex> lock(mu);
    outcomes.push_back(std::to_string(m.offset) + ":" + wc::RecordOutcomeName(o.kind));
  };
  std::map<std::string, int> runs;
  auto handler = [&](wc::HandlerContext& ctx) {
    std::lock_guard<std::mutex> lock(mu);
    ++runs[ctx.idempotency_key()];
    return wc::HandlerResult::Done();
  };
  std::string pushed;  // the metrics hook's latest text
  opts.metrics_interval = 1ms;
  opts.metrics_hook = [&](const std::string& text) {
    std::lock_guard<std::mutex> lock(mu);
    pushed = text;
  };
  {
    RunningConsumer c(opts, store, handler);
    REQUIRE(WaitUntil(
        [&] {
          auto s = c.stats();
          return s.completed + s.duplicates + s.dead_lettered == 4;
        },
        30s));
    CHECK(c.Stop().ok());
    CHECK(c.stats().payload_mismatches == 1);
    CHECK(c.stats().completed == 2);
    CHECK(c.stats().claims == 2);
    CHECK(c.stats().handler_runs == 2);
    CHECK(c.stats().dead_lettered == (skip ? 0 : 1));
    const std::string text = c.consumer().MetricsText();
    const std::string label = "{consumer=\"" + name + "\"}";
    for (const std::string& line : std::vector<std::string>{
             "walrelay_consumer_payload_mismatches_total" + label + " 1",
             "walrelay_consumer_claims_total" + label + " 2",
             "walrelay_consumer_completed_total" + label + " 2",
             "walrelay_consumer_duplicates_total" + label + (skip ? " 2" : " 1"),
             "walrelay_consumer_dead_letters_total" + label + (skip ? " 0" : " 1"),
             "walrelay_consumer_handler_seconds_count" + label + " 2",
             std::string("# TYPE walrelay_consumer_handler_seconds histogram")})
      CHECK_MESSAGE(text.find(line + "\n") != std::string::npos, line);
    CHECK(text.find("walrelay_consumer_handler_seconds_bucket{consumer=\"" + name +
                    "\",le=\"+Inf\"} 2\n") != std::string::npos);
    std::lock_guard<std::mutex> lock(mu);
    CHECK(pushed.find("walrelay_consumer_completed_total" + label) != std::string::npos);
  }
  std::lock_guard<std::mutex> lock(mu);
  CHECK(runs == std::map<std::string, int>{{"e-1", 1}, {"e-2", 1}});
  CHECK(outcomes == std::vector<std::string>{"0:completed", "1:duplicate",
                                             skip ? "2:duplicate" : "2:dead-lettered",
                                             "3:completed"});
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("key 'e-1'") != std::string::npos);
  CHECK(errors[0].find("another payload") != std::string::npos);
  // The key keeps its first payload's outcome.
  const wc::Message first = Msg(0, "amount=10");
  if (postgres) {
    CHECK(f.Value("SELECT state || ' ' || payload_hash FROM walrelay_consumer_keys WHERE "
                  "consumer_name = '" +
                  name + "' AND idempotency_key = 'e-1'") == "COMPLETED " + wc::PayloadHash(first));
  } else {
    const std::string key = "walrelay:consumer:" + name + ":e-1";
    CHECK(*redis.Command({"HGET", key, "state"}) == "COMPLETED");
    CHECK(*redis.Command({"HGET", key, "payload_hash"}) == wc::PayloadHash(first));
  }
  if (!skip) {
    auto reader = f.Reader();
    auto dlq = reader->ReadAtLeast({name + ".dlq"}, 1, 20s);
    REQUIRE(dlq.ok());
    REQUIRE(dlq->size() == 1);
    CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.error.class") == "payload-mismatch");
    CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.key") == "e-1");
    CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.original.offset") == "2");
  }
}

TEST_CASE("Consumer: a key that comes back with another payload is dead-lettered as "
          "payload-mismatch (or skipped when configured), counted and logged naming the key; "
          "the metrics count it") {
  ConsumerFixture f;
  auto redis = StartRedis();
  SUBCASE("PostgreSQL") {
    auto store = f.Store();
    PayloadMismatchRun(f, *store, true, *redis, "pg-default", false);
    PayloadMismatchRun(f, *store, true, *redis, "pg-skip", true);
  }
  SUBCASE("Redis") {
    auto store = ConnectRedis(*redis);
    PayloadMismatchRun(f, *store, false, *redis, "redis-default", false);
    PayloadMismatchRun(f, *store, false, *redis, "redis-skip", true);
  }
}

TEST_CASE("PayloadHash: SHA-256 of the value, a null value distinct from an empty one") {
  wc::Message m;
  m.value = "abc";
  CHECK(wc::PayloadHash(m) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  m.value = "";
  const std::string empty = wc::PayloadHash(m);
  m.value.reset();
  CHECK(wc::PayloadHash(m) == "null:" + empty);
}

}  // namespace
}  // namespace walrelay::testing
