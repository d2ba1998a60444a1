// The rules every IdempotencyStore must keep, written once against the interface and run over
// each store (in the manner of LevelDB's table_test: one set of cases, several constructors).
// A "store maker" per store gives the cases a store (and a second connection to the same keys,
// as a second member would have), the state of a key as the store holds it, and a way to let
// a lease end. Where a store differs on purpose, its maker says so in StoreTraits and the case
// checks that store's own expectation.
//
// Built twice (tests/CMakeLists.txt): against every store (integration_consumer_conformance)
// and, with WALRELAY_CONFORMANCE_MEMORY_ONLY, against MemoryStore alone
// (unit_consumer_conformance).
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "consumer_fixture.h"
#include "memory_store.h"

#ifndef WALRELAY_CONFORMANCE_MEMORY_ONLY
#include "consumer/dynamo_client.h"
#include "consumer/redis_cluster.h"
#include "devtools/dynalite_sandbox.h"
#include "devtools/redis_cluster_sandbox.h"
#include "devtools/redis_sandbox.h"
#endif

namespace walrelay::testing {
namespace {

// How a store departs, on purpose, from the lease rules MemoryStore and RedisStore keep.
struct StoreTraits {
  // Claims carry fencing tokens (PostgresStore's row lock makes them needless: always 0).
  bool fencing_tokens = true;
  // A claimant of a key whose handler is running waits for the run's end and then sees the key
  // COMPLETED (PostgresStore: the row lock), instead of a CONFLICT at once.
  bool claim_blocks_while_running = false;
  // A PENDING key is kept a retention past its lease (PostgresStore keeps the lease end as the
  // row's expiry, and its Cleanup applies the retention).
  bool pending_kept_past_lease = true;
  // A handler learns from HandlerContext::claim_held() that its lease ended (MemoryStore gives
  // handlers no lease: always held).
  bool handler_sees_lease = true;
};

// A distinct consumer name per case, so that makers can share one server per process.
std::string FreshConsumer() {
  static std::atomic<int> next{0};
  return "conf-" + std::to_string(next++);
}

wc::Message Msg(const std::string& value = "v") {
  wc::Message m;
  m.topic = "orders";
  m.partition = 2;
  m.offset = 17;
  m.value = value;
  return m;
}

// The row text a maker's State() gives: "<STATE>/<attempts>/<owner or ->", "(none)" if absent.
std::string RowText(const std::string& state, const std::string& attempts,
                    const std::string& owner) {
  // Each server's word for "nothing there" (Redis renders nil as "(nil)").
  auto absent = [](const std::string& v) { return v.empty() || v == "(none)" || v == "(nil)"; };
  if (absent(state)) return "(none)";
  return state + "/" + attempts + "/" + (absent(owner) ? "-" : owner);
}

// MemoryStore on a manual clock: a lease ends when the case moves the clock.
class MemoryMaker {
 public:
  static constexpr const char* kName = "MemoryStore";
  static constexpr StoreTraits kTraits{true, false, true, false};

  wc::IdempotencyStore& store() { return store_; }
  wc::IdempotencyStore& second() { return store_; }
  // A store whose leases are not renewed while a handler runs (a paused process).
  wc::IdempotencyStore& unrenewed() { return store_; }
  std::string State(const std::string& consumer, const std::string& key) {
    auto r = store_.Inspect(consumer, key);
    if (!r) return "(none)";
    const char* names[] = {"PENDING", "COMPLETED", "FAILED"};
    return RowText(names[static_cast<int>(r->state)], std::to_string(r->attempts), r->owner);
  }
  // "<topic>:<offset>:<payload hash>" as stored: the record that claimed the key last.
  std::string Stored(const std::string& consumer, const std::string& key) {
    auto r = store_.Inspect(consumer, key);
    REQUIRE(r);
    return r->topic + ":" + std::to_string(r->offset) + ":" + r->payload_hash;
  }
  // The fencing token the key was marked COMPLETED under (0 for a store without tokens).
  int64_t CompletedToken(const std::string& consumer, const std::string& key) {
    auto r = store_.Inspect(consumer, key);
    REQUIRE(r);
    return r->fencing_token;
  }
  // The key's lease as stored: its end minus the claim's time, on the store's clock.
  std::chrono::milliseconds LeaseLength(const std::string& consumer, const std::string& key) {
    auto r = store_.Inspect(consumer, key);
    REQUIRE(r);
    return std::chrono::duration_cast<std::chrono::milliseconds>(r->lease_until - r->claimed_at);
  }
  // How long the store keeps the key from now.
  std::chrono::milliseconds KeptFor(const std::string& consumer, const std::string& key) {
    auto r = store_.Inspect(consumer, key);
    REQUIRE(r);
    return std::chrono::duration_cast<std::chrono::milliseconds>(r->expires_at - store_.now());
  }
  // Lets `lease` (and a little more) pass for the store.
  void PassLease(std::chrono::milliseconds lease) { clock_.Advance(lease + 1ms); }

 private:
  ManualClock clock_;
  MemoryStore store_{clock_.AsFunction()};
};

#ifndef WALRELAY_CONFORMANCE_MEMORY_ONLY

// Real servers keep time themselves: a lease ends by waiting for it.
void SleepPast(std::chrono::milliseconds lease) { std::this_thread::sleep_for(lease + 150ms); }

// PostgreSQL (the relay tests' server, with the keys table), one per process.
class PostgresMaker {
 public:
  static constexpr const char* kName = "PostgresStore";
  static constexpr StoreTraits kTraits{false, true, false, true};

  PostgresMaker() : first_(Server().Store()), second_(Server().Store()) {}
  wc::IdempotencyStore& store() { return *first_; }
  wc::IdempotencyStore& second() { return *second_; }
  wc::IdempotencyStore& unrenewed() { return *first_; }
  std::string State(const std::string& consumer, const std::string& key) {
    auto rows = Server().pg().Query(
        "SELECT state, attempts::text, coalesce(locked_by, '') FROM walrelay_consumer_keys WHERE "
        "consumer_name = '" +
        consumer + "' AND idempotency_key = '" + key + "'");
    REQUIRE(rows.ok());
    if (rows->empty()) return "(none)";
    const auto& row = rows->front();
    return RowText(*row[0], *row[1], *row[2]);
  }
  std::string Stored(const std::string& consumer, const std::string& key) {
    return Server().Value(
        "SELECT topic || ':' || kafka_offset || ':' || payload_hash FROM walrelay_consumer_keys "
        "WHERE consumer_name = '" +
        consumer + "' AND idempotency_key = '" + key + "'");
  }
  int64_t CompletedToken(const std::string&, const std::string&) { return 0; }
  std::chrono::milliseconds LeaseLength(const std::string& consumer, const std::string& key) {
    return Millis(consumer, key, "expires_at - locked_at");
  }
  std::chrono::milliseconds KeptFor(const std::string& consumer, const std::string& key) {
    return Millis(consumer, key, "expires_at - now()");
  }
  void PassLease(std::chrono::milliseconds lease) { SleepPast(lease); }
  // The rows handlers wrote to `effects` for `key`, with the store's transactions.
  static int Effects(const std::string& key) {
    return Server().Count("SELECT count(*) FROM effects WHERE key = '" + key + "'");
  }
  // Whether a session waits on a row lock (the blocked claimant).
  static bool ClaimantWaits() {
    return Server().Count("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") ==
           1;
  }

 private:
  static ConsumerFixture& Server() {
    static ConsumerFixture fixture;
    return fixture;
  }
  // An interval expression over the key's row, in milliseconds.
  static std::chrono::milliseconds Millis(const std::string& consumer, const std::string& key,
                                          const std::string& interval) {
    return std::chrono::milliseconds(std::stoll(
        Server().Value("SELECT round(extract(epoch FROM " + interval +
                       ") * 1000)::bigint FROM walrelay_consumer_keys WHERE consumer_name = '" +
                       consumer + "' AND idempotency_key = '" + key + "'")));
  }
  std::unique_ptr<wc::PostgresStore> first_, second_;
};

// A redis-server, one per process.
class RedisMaker {
 public:
  static constexpr const char* kName = "RedisStore";
  static constexpr StoreTraits kTraits{};

  RedisMaker() : first_(Connect(true)), second_(Connect(true)), unrenewed_(Connect(false)) {}
  wc::IdempotencyStore& store() { return *first_; }
  wc::IdempotencyStore& second() { return *second_; }
  wc::IdempotencyStore& unrenewed() { return *unrenewed_; }
  std::string State(const std::string& consumer, const std::string& key) {
    return RowText(Hget(consumer, key, "state"), Hget(consumer, key, "attempts"),
                   Hget(consumer, key, "owner"));
  }
  std::string Stored(const std::string& consumer, const std::string& key) {
    return Hget(consumer, key, "topic") + ":" + Hget(consumer, key, "offset") + ":" +
           Hget(consumer, key, "payload_hash");
  }
  int64_t CompletedToken(const std::string& consumer, const std::string& key) {
    return std::stoll(Hget(consumer, key, "done_fence"));
  }
  std::chrono::milliseconds LeaseLength(const std::string& consumer, const std::string& key) {
    return std::chrono::milliseconds(std::stoll(Hget(consumer, key, "expires_at")) -
                                     std::stoll(Hget(consumer, key, "locked_at")));
  }
  std::chrono::milliseconds KeptFor(const std::string& consumer, const std::string& key) {
    return std::chrono::milliseconds(std::stoll(Run({"PTTL", Name(consumer, key)})));
  }
  void PassLease(std::chrono::milliseconds lease) { SleepPast(lease); }

 private:
  static devtools::RedisSandbox& Server() {
    static std::unique_ptr<devtools::RedisSandbox> server = [] {
      auto r = devtools::RedisSandbox::Start({});
      REQUIRE_MESSAGE(r.ok(), r.status().ToString());
      return std::move(r).value();
    }();
    return *server;
  }
  static std::string Name(const std::string& consumer, const std::string& key) {
    return "walrelay:consumer:" + consumer + ":" + key;
  }
  static std::string Run(const std::vector<std::string>& command) {
    auto v = Server().Command(command);
    REQUIRE_MESSAGE(v.ok(), v.status().ToString());
    return *v;
  }
  static std::string Hget(const std::string& consumer, const std::string& key, const char* field) {
    return Run({"HGET", Name(consumer, key), field});
  }
  static std::unique_ptr<wc::RedisStore> Connect(bool renew_leases) {
    wc::RedisStoreOptions o;
    o.port = Server().port();
    o.renew_leases = renew_leases;
    auto s = wc::RedisStore::Connect(o);
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    return std::move(s).value();
  }
  std::unique_ptr<wc::RedisStore> first_, second_, unrenewed_;
};

// A Redis Cluster of three masters and three replicas, one per process: the store's
// record-by-record paths (its batch pipelines are single-node only).
class RedisClusterMaker {
 public:
  static constexpr const char* kName = "RedisStore (cluster)";
  static constexpr StoreTraits kTraits{};

  RedisClusterMaker() : first_(Connect(true)), second_(Connect(true)), unrenewed_(Connect(false)) {}
  wc::IdempotencyStore& store() { return *first_; }
  wc::IdempotencyStore& second() { return *second_; }
  wc::IdempotencyStore& unrenewed() { return *unrenewed_; }
  std::string State(const std::string& consumer, const std::string& key) {
    return RowText(Hget(consumer, key, "state"), Hget(consumer, key, "attempts"),
                   Hget(consumer, key, "owner"));
  }
  std::string Stored(const std::string& consumer, const std::string& key) {
    return Hget(consumer, key, "topic") + ":" + Hget(consumer, key, "offset") + ":" +
           Hget(consumer, key, "payload_hash");
  }
  int64_t CompletedToken(const std::string& consumer, const std::string& key) {
    return std::stoll(Hget(consumer, key, "done_fence"));
  }
  std::chrono::milliseconds LeaseLength(const std::string& consumer, const std::string& key) {
    return std::chrono::milliseconds(std::stoll(Hget(consumer, key, "expires_at")) -
                                     std::stoll(Hget(consumer, key, "locked_at")));
  }
  std::chrono::milliseconds KeptFor(const std::string& consumer, const std::string& key) {
    return std::chrono::milliseconds(std::stoll(OnOwner(consumer, key, {"PTTL"})));
  }
  void PassLease(std::chrono::milliseconds lease) { SleepPast(lease); }

 private:
  static devtools::RedisClusterSandbox& Cluster() {
    static std::unique_ptr<devtools::RedisClusterSandbox> cluster = [] {
      auto r = devtools::RedisClusterSandbox::Start("");
      REQUIRE_MESSAGE(r.ok(), r.status().ToString());
      return std::move(r).value();
    }();
    return *cluster;
  }
  // `command` followed by the key's name, on the master of the key's slot.
  static std::string OnOwner(const std::string& consumer, const std::string& key,
                             std::vector<std::string> command) {
    const std::string name = "walrelay:consumer:" + consumer + ":" + key;
    auto master = Cluster().MasterOf(wc::KeySlot(name));
    REQUIRE_MESSAGE(master.ok(), master.status().ToString());
    command.insert(command.begin() + 1, name);
    auto v = Cluster().Command(*master, command);
    REQUIRE_MESSAGE(v.ok(), v.status().ToString());
    return *v;
  }
  static std::string Hget(const std::string& consumer, const std::string& key, const char* field) {
    return OnOwner(consumer, key, {"HGET", field});
  }
  static std::unique_ptr<wc::RedisStore> Connect(bool renew_leases) {
    wc::RedisStoreOptions o;
    o.cluster_nodes = {Cluster().seeds()[0], Cluster().seeds()[1]};
    o.timeout = 10s;
    o.renew_leases = renew_leases;
    auto s = wc::RedisStore::Connect(o);
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    return std::move(s).value();
  }
  std::unique_ptr<wc::RedisStore> first_, second_, unrenewed_;
};

// dynalite, one per process. DynamoDB compares the lease with the members' clocks, which here
// are one clock.
class DynamoMaker {
 public:
  static constexpr const char* kName = "DynamoStore";
  static constexpr StoreTraits kTraits{};

  DynamoMaker() : first_(Connect(true)), second_(Connect(true)), unrenewed_(Connect(false)) {}
  wc::IdempotencyStore& store() { return *first_; }
  wc::IdempotencyStore& second() { return *second_; }
  wc::IdempotencyStore& unrenewed() { return *unrenewed_; }
  std::string State(const std::string& consumer, const std::string& key) {
    return RowText(Field(consumer, key, "state"), Field(consumer, key, "attempts"),
                   Field(consumer, key, "owner"));
  }
  std::string Stored(const std::string& consumer, const std::string& key) {
    return Field(consumer, key, "topic") + ":" + Field(consumer, key, "kafka_offset") + ":" +
           Field(consumer, key, "payload_hash");
  }
  int64_t CompletedToken(const std::string& consumer, const std::string& key) {
    return std::stoll(Field(consumer, key, "done_fence"));
  }
  std::chrono::milliseconds LeaseLength(const std::string& consumer, const std::string& key) {
    return std::chrono::milliseconds(std::stoll(Field(consumer, key, "lease_until_ms")) -
                                     std::stoll(Field(consumer, key, "locked_at_ms")));
  }
  // DynamoDB's TTL counts in seconds: to within a second.
  std::chrono::milliseconds KeptFor(const std::string& consumer, const std::string& key) {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    return std::chrono::seconds(std::stoll(Field(consumer, key, "expires_at"))) - now;
  }
  void PassLease(std::chrono::milliseconds lease) { SleepPast(lease); }

 private:
  static devtools::DynaliteSandbox& Server() {
    static std::unique_ptr<devtools::DynaliteSandbox> server = [] {
      auto d = devtools::DynaliteSandbox::Start();
      REQUIRE_MESSAGE(d.ok(), d.status().ToString());
      return std::move(d).value();
    }();
    return *server;
  }
  // An attribute of the key's item as text ("" when absent; "(none)" when there is no item),
  // read with a client of its own.
  static std::string Field(const std::string& consumer, const std::string& key,
                           const char* attribute) {
    wc::DynamoClient::Options o;
    o.endpoint = *wc::ParseDynamoEndpoint(Server().endpoint());
    o.region = "us-east-1";
    o.credentials = {"AKIDEXAMPLE", "x", ""};
    wc::DynamoClient client(o);
    auto r = client.Call("GetItem", "{\"TableName\":\"walrelay_consumer_keys\",\"Key\":{"
                                    "\"consumer\":{\"S\":\"" +
                                        consumer + "\"},\"idempotency_key\":{\"S\":\"" + key +
                                        "\"}},\"ConsistentRead\":true}");
    REQUIRE_MESSAGE(r.ok(), r.status().ToString());
    REQUIRE_MESSAGE(r->error_type.empty(), r->error_type << ": " << r->error_message);
    const rapidjson::Value* item = wc::JsonMember(r->body, "Item");
    if (item == nullptr) return "(none)";
    const rapidjson::Value* a = wc::JsonMember(*item, attribute);
    if (a == nullptr) return "";
    for (const char* type : {"S", "N"})
      if (const rapidjson::Value* v = wc::JsonMember(*a, type)) return v->GetString();
    return "?";
  }
  static std::unique_ptr<wc::DynamoStore> Connect(bool renew_leases) {
    wc::DynamoStoreOptions o;
    o.endpoint = Server().endpoint();
    o.region = "us-east-1";
    o.access_key_id = "AKIDEXAMPLE";
    o.secret_access_key = "not-a-real-secret";
    o.renew_leases = renew_leases;
    auto s = wc::DynamoStore::Connect(o);
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    REQUIRE_MESSAGE((*s)->CreateSchema().ok(), "CreateSchema");
    return std::move(s).value();
  }
  std::unique_ptr<wc::DynamoStore> first_, second_, unrenewed_;
};

#define WALRELAY_CONFORMING_STORES \
  MemoryMaker, PostgresMaker, RedisMaker, RedisClusterMaker, DynamoMaker
#else
#define WALRELAY_CONFORMING_STORES MemoryMaker
#endif

// A handler that counts its runs and completes with "done <key>"; where the store gives it a
// connection (PostgresStore), it also writes a row to `effects` in the store's transaction.
wc::Handler Counting(std::atomic<int>& runs) {
  return [&runs](wc::HandlerContext& ctx) {
    ++runs;
    if (ctx.has_connection()) {
      auto r = ctx.Exec("INSERT INTO effects (key) VALUES ($1)", {ctx.idempotency_key()});
      if (!r.ok()) return wc::HandlerContext::SqlFailure(r.status());
    }
    return wc::HandlerResult::Done("done " + ctx.idempotency_key());
  };
}

// The token a store with fencing tokens gives the n-th claim of a new key; 0 for the others.
template <typename Maker>
int64_t Token(int64_t n) {
  return Maker::kTraits.fencing_tokens ? n : 0;
}

TEST_CASE_TEMPLATE("conformance: a new key is ACQUIRED with attempt 1, a fencing token and the "
                   "payload's hash; consumer names are independent",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  auto a = m.store().Acquire(svc, "k", "owner-a", 10s, Msg());
  REQUIRE_MESSAGE(a.ok(), a.status().ToString());
  CHECK(a->state == wc::Claim::State::kAcquired);
  CHECK(a->attempts == 1);
  CHECK(a->fencing_token == Token<Maker>(1));
  CHECK(a->payload_hash == wc::PayloadHash(Msg()));
  CHECK(a->last_error.empty());
  CHECK(m.State(svc, "k") == "PENDING/1/owner-a");
  CHECK(m.Stored(svc, "k") == "orders:17:" + wc::PayloadHash(Msg()));
  // Another consumer name has its own keys.
  auto other = m.store().Acquire(svc + "-other", "k", "owner-c", 10s, Msg());
  REQUIRE(other.ok());
  CHECK(other->state == wc::Claim::State::kAcquired);
  CHECK(other->attempts == 1);
}

TEST_CASE_TEMPLATE("conformance: conflict while the lease runs, takeover after it; the stale "
                   "owner's run is LOST; a completed key is a DUPLICATE with its result",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  const auto lease = 700ms;
  // The key names the case: PostgreSQL's `effects` rows are counted by key.
  const std::string k = "taken-" + svc;
  std::atomic<int> runs{0};
  auto a = m.store().Acquire(svc, k, "owner-a", lease, Msg());
  REQUIRE(a.ok());
  REQUIRE(a->state == wc::Claim::State::kAcquired);

  // CONFLICT: another owner while the lease runs; nothing changes.
  auto b = m.second().Acquire(svc, k, "owner-b", 10s, Msg());
  REQUIRE(b.ok());
  CHECK(b->state == wc::Claim::State::kConflict);
  CHECK(b->previous_owner == "owner-a");
  CHECK(b->retry_after > 0ms);
  CHECK(b->retry_after <= lease);
  CHECK(m.State(svc, k) == "PENDING/1/owner-a");

  // TAKEN_OVER once the lease has ended: attempts + 1 and a larger token.
  m.PassLease(lease);
  auto taken = m.second().Acquire(svc, k, "owner-b", 10s, Msg());
  REQUIRE(taken.ok());
  CHECK(taken->state == wc::Claim::State::kTakenOver);
  CHECK(taken->previous_owner == "owner-a");
  CHECK(taken->attempts == 2);
  if (Maker::kTraits.fencing_tokens) CHECK(taken->fencing_token > a->fencing_token);
  else CHECK(taken->fencing_token == 0);
  CHECK(m.State(svc, k) == "PENDING/2/owner-b");

  // The old owner's late completion is refused; the new owner's goes through.
  auto late = m.store().Run(svc, k, "owner-a", 1h, Msg(), 1, Counting(runs));
  REQUIRE(late.ok());
  CHECK(late->kind == wc::RunOutcome::Kind::kLost);
  CHECK(m.State(svc, k) == "PENDING/2/owner-b");
  auto run = m.second().Run(svc, k, "owner-b", 1h, Msg(), 2, Counting(runs));
  REQUIRE_MESSAGE(run.ok(), run.status().ToString());
  CHECK(run->kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(run->handler.result == "done " + k);
  CHECK(m.State(svc, k) == "COMPLETED/2/-");
  if (Maker::kTraits.claim_blocks_while_running) {
#ifndef WALRELAY_CONFORMANCE_MEMORY_ONLY
    // PostgresStore: the stale run's writes went with its refused transaction.
    if constexpr (std::is_same_v<Maker, PostgresMaker>) CHECK(PostgresMaker::Effects(k) == 1);
#endif
  } else {
    // Lease stores: the stale owner's handler ran, its effect happened (the documented limit
    // of these stores: a fencing token downstream is what keeps it out).
    CHECK(runs == 2);
  }

  // DUPLICATE, with the stored result and the first payload's hash, whatever the payload now.
  auto dup = m.store().Acquire(svc, k, "owner-c", 10s, Msg("another payload"));
  REQUIRE(dup.ok());
  CHECK(dup->state == wc::Claim::State::kDuplicate);
  CHECK(dup->result == "done " + k);
  CHECK(dup->attempts == 2);
  CHECK(dup->payload_hash == wc::PayloadHash(Msg()));
  CHECK(m.State(svc, k) == "COMPLETED/2/-");
}

TEST_CASE_TEMPLATE("conformance: Release keeps the attempt and the error; Unclaim uncounts the "
                   "attempt",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  REQUIRE(m.store().Acquire(svc, "r", "owner-a", 10s, Msg())->state == wc::Claim::State::kAcquired);
  REQUIRE(m.store().Release(svc, "r", "owner-a", "Flaky: timeout").ok());
  CHECK(m.State(svc, "r") == "PENDING/1/-");
  // A released key is free for anyone; the attempt count goes on.
  auto again = m.second().Acquire(svc, "r", "owner-b", 10s, Msg());
  REQUIRE(again.ok());
  CHECK(again->state == wc::Claim::State::kAcquired);
  CHECK(again->attempts == 2);
  CHECK(again->last_error == "Flaky: timeout");
  CHECK(m.State(svc, "r") == "PENDING/2/owner-b");
  // A claim no handler used is given back with its attempt uncounted.
  REQUIRE(m.second().Unclaim(svc, "r", "owner-b").ok());
  CHECK(m.State(svc, "r") == "PENDING/1/-");
  auto third = m.store().Acquire(svc, "r", "owner-c", 10s, Msg());
  REQUIRE(third.ok());
  CHECK(third->state == wc::Claim::State::kAcquired);
  CHECK(third->attempts == 2);
}

TEST_CASE_TEMPLATE("conformance: MarkFailed marks only the current claim FAILED; FAILED keys are "
                   "skipped, COMPLETED ones never failed",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  std::atomic<int> runs{0};
  REQUIRE(m.store().Acquire(svc, "r", "owner-a", 10s, Msg())->state == wc::Claim::State::kAcquired);
  REQUIRE(m.store().Release(svc, "r", "owner-a", "Flaky: timeout").ok());
  // A key nobody holds is not the former owner's to fail.
  auto unheld = m.store().MarkFailed(svc, "r", "owner-a", 0, "Stale: late failure", 2h);
  REQUIRE(unheld.ok());
  CHECK_FALSE(*unheld);
  auto holder = m.second().Acquire(svc, "r", "owner-b", 10s, Msg());
  REQUIRE(holder.ok());
  REQUIRE(holder->state == wc::Claim::State::kAcquired);
  // Another owner's late failure is refused and the claim stays.
  auto stale_owner = m.store().MarkFailed(svc, "r", "owner-a", 0, "Stale: late failure", 2h);
  REQUIRE(stale_owner.ok());
  CHECK_FALSE(*stale_owner);
  CHECK(m.State(svc, "r") == "PENDING/2/owner-b");
  if (Maker::kTraits.fencing_tokens) {
    // So is this owner's under an older token.
    auto stale_token = m.second().MarkFailed(svc, "r", "owner-b", holder->fencing_token - 1,
                                             "Stale: late failure", 2h);
    REQUIRE(stale_token.ok());
    CHECK_FALSE(*stale_token);
    CHECK(m.State(svc, "r") == "PENDING/2/owner-b");
  } else {
    MESSAGE(std::string(Maker::kName) << " has no fencing tokens: the owner alone is checked");
  }
  auto marked =
      m.second().MarkFailed(svc, "r", "owner-b", holder->fencing_token, "Poison: bad", 2h);
  REQUIRE(marked.ok());
  CHECK(*marked);
  CHECK(m.State(svc, "r") == "FAILED/2/-");
  auto failed = m.store().Acquire(svc, "r", "owner-c", 10s, Msg());
  REQUIRE(failed.ok());
  CHECK(failed->state == wc::Claim::State::kFailed);
  CHECK(failed->last_error == "Poison: bad");
  CHECK(failed->attempts == 2);

  // A COMPLETED key is never marked FAILED.
  REQUIRE(m.store().Acquire(svc, "k", "owner-a", 10s, Msg())->state == wc::Claim::State::kAcquired);
  REQUIRE(m.store().Run(svc, "k", "owner-a", 1h, Msg(), 1, Counting(runs))->kind ==
          wc::RunOutcome::Kind::kCompleted);
  auto late_failure = m.store().MarkFailed(svc, "k", "owner-a", 0, "late", 2h);
  REQUIRE(late_failure.ok());
  CHECK_FALSE(*late_failure);
  CHECK(m.State(svc, "k") == "COMPLETED/1/-");
  CHECK(runs == 1);
}

TEST_CASE_TEMPLATE("conformance: a claim while another owner's handler runs", Maker,
                   WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  const std::string k = "running-" + svc;  // PostgreSQL's `effects` rows are counted by key
  REQUIRE(m.store().Acquire(svc, k, "owner-a", 10s, Msg())->state == wc::Claim::State::kAcquired);
  std::atomic<bool> in_handler{false}, release{false}, claimed{false};
  std::thread holder([&] {
    auto run = m.store().Run(svc, k, "owner-a", 1h, Msg(), 1, [&](wc::HandlerContext& ctx) {
      CHECK(ctx.claim_held());
      // The row lock holds the key until the transaction ends, however long that is.
      if (Maker::kTraits.claim_blocks_while_running)
        CHECK(ctx.claim_held_until() == std::chrono::steady_clock::time_point::max());
      if (ctx.has_connection())
        REQUIRE(ctx.Exec("INSERT INTO effects (key) VALUES ($1)", {ctx.idempotency_key()}).ok());
      in_handler = true;
      while (!release) std::this_thread::sleep_for(5ms);
      return wc::HandlerResult::Done("first");
    });
    REQUIRE(run.ok());
    CHECK(run->kind == wc::RunOutcome::Kind::kCompleted);
  });
  REQUIRE(WaitUntil([&] { return in_handler.load(); }, 10s));
  Result<wc::Claim> second = Status::Internal("not run");
  std::thread claimant([&] {
    second = m.second().Acquire(svc, k, "owner-b", 10s, Msg());
    claimed = true;
  });
  if (Maker::kTraits.claim_blocks_while_running) {
    // PostgresStore: the claimant waits on the key's row lock while the handler runs...
#ifndef WALRELAY_CONFORMANCE_MEMORY_ONLY
    if constexpr (std::is_same_v<Maker, PostgresMaker>)
      REQUIRE(WaitUntil([] { return PostgresMaker::ClaimantWaits(); }, 10s));
#endif
    std::this_thread::sleep_for(200ms);
    CHECK(!claimed);
    release = true;
    holder.join();
    claimant.join();
    // ...and answers only once the run committed, seeing its result.
    REQUIRE(second.ok());
    CHECK(second->state == wc::Claim::State::kDuplicate);
    CHECK(second->result == "first");
#ifndef WALRELAY_CONFORMANCE_MEMORY_ONLY
    if constexpr (std::is_same_v<Maker, PostgresMaker>) CHECK(PostgresMaker::Effects(k) == 1);
#endif
  } else {
    // Lease stores: CONFLICT at once, while the handler still runs.
    REQUIRE(WaitUntil([&] { return claimed.load(); }, 10s));
    CHECK(!release);
    REQUIRE(second.ok());
    CHECK(second->state == wc::Claim::State::kConflict);
    CHECK(second->previous_owner == "owner-a");
    release = true;
    holder.join();
    claimant.join();
  }
  CHECK(m.State(svc, k) == "COMPLETED/1/-");
}

TEST_CASE_TEMPLATE("conformance fencing: a handler stalled past its lease while another member "
                   "claims the key: exactly one completes, the stale one's mark is refused",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  if (Maker::kTraits.claim_blocks_while_running) {
    // A running handler holds PostgresStore's row lock whatever its lease: no other member can
    // claim the key meanwhile ("a claim while another owner's handler runs" checks that).
    MESSAGE(std::string(Maker::kName)
            << ": the row lock excludes a second claimant; no stale run exists");
    return;
  }
  const std::string svc = FreshConsumer();
  const auto lease = 300ms;
  auto claim_a = m.unrenewed().Acquire(svc, "k", "member-a", lease, Msg());
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
  auto claim_b = [&] {
    auto c = m.second().Acquire(svc, "k", "member-b", 30s, Msg());
    REQUIRE(c.ok());
    CHECK(c->state == wc::Claim::State::kTakenOver);
    CHECK(c->fencing_token == 2);
    CHECK(c->attempts == 2);
  };
  auto run_b = [&] {
    auto run = m.second().Run(svc, "k", "member-b", 1h, Msg(), 2, effect_b);
    REQUIRE(run.ok());
    outcome_b = *run;
  };
  auto run_a = m.unrenewed().Run(svc, "k", "member-a", 1h, Msg(), 1, [&](wc::HandlerContext& ctx) {
    effects.push_back("a#" + std::to_string(ctx.fencing_token()));
    CHECK(ctx.claim_held());
    m.PassLease(lease);  // stalled past its lease
    // The handler can tell, though nothing renewed or refused (MemoryStore gives it no lease).
    if (Maker::kTraits.handler_sees_lease) CHECK(!ctx.claim_held());
    claim_b();
    if (b_first) run_b();  // B completes while A is stalled
    return wc::HandlerResult::Done("by a");
  });
  REQUIRE(run_a.ok());
  CHECK(run_a->kind == wc::RunOutcome::Kind::kLost);  // the stale token's mark is refused
  if (!b_first) {
    // B claimed while A was stalled and completes after A's refused mark, which changed nothing.
    CHECK(m.State(svc, "k") == "PENDING/2/member-b");
    run_b();
  }
  REQUIRE(outcome_b);
  CHECK(outcome_b->kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(effects == std::vector<std::string>{"a#1", "b#2"});
  CHECK(m.State(svc, "k") == "COMPLETED/2/-");
  CHECK(m.CompletedToken(svc, "k") == 2);  // marked under B's token
  auto dup = m.store().Acquire(svc, "k", "member-c", 10s, Msg());
  REQUIRE(dup.ok());
  CHECK(dup->state == wc::Claim::State::kDuplicate);
  CHECK(dup->result == "by b");
}

TEST_CASE_TEMPLATE("conformance: a lease is stored as claimed; COMPLETED and FAILED keys are kept "
                   "for their ttl, PENDING ones past their lease",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  std::atomic<int> runs{0};
  REQUIRE(m.store().Acquire(svc, "k", "owner-a", 700ms, Msg())->state ==
          wc::Claim::State::kAcquired);
  // The lease's end is the claim's time plus the lease, both on the store's clock.
  CHECK(m.LeaseLength(svc, "k") == 700ms);
  if (Maker::kTraits.pending_kept_past_lease) {
    CHECK(m.KeptFor(svc, "k") > 86'390'000ms);  // the 24 h retention past the lease
  } else {
    // PostgresStore: the row expires with its lease; Cleanup applies the retention.
    CHECK(m.KeptFor(svc, "k") > 0ms);
    CHECK(m.KeptFor(svc, "k") <= 700ms);
  }
  REQUIRE(m.store().Run(svc, "k", "owner-a", 1h, Msg(), 1, Counting(runs))->kind ==
          wc::RunOutcome::Kind::kCompleted);
  CHECK(m.KeptFor(svc, "k") > 3'590'000ms);
  CHECK(m.KeptFor(svc, "k") <= 3'601'000ms);

  auto r = m.store().Acquire(svc, "r", "owner-a", 10s, Msg());
  REQUIRE(r.ok());
  REQUIRE(*m.store().MarkFailed(svc, "r", "owner-a", r->fencing_token, "Poison: bad", 2h));
  CHECK(m.KeptFor(svc, "r") > 7'190'000ms);
  CHECK(m.KeptFor(svc, "r") <= 7'201'000ms);
  // Nothing has expired: Cleanup removes nothing (and nothing for the stores whose server
  // expires keys itself).
  auto cleaned = wc::Cleanup(m.store(), 100);
  REQUIRE(cleaned.ok());
  CHECK(*cleaned == 0);
}

// Keys in every state a claim can answer: "new" (absent), "held" (another owner's live claim),
// "done" (COMPLETED with "done done"), "dead" (FAILED with "Poison").
template <typename Maker>
void PrepareKeys(Maker& m, const std::string& svc) {
  std::atomic<int> runs{0};
  REQUIRE(m.second().Acquire(svc, "held", "owner-z", 30s, Msg())->state ==
          wc::Claim::State::kAcquired);
  REQUIRE(m.second().Acquire(svc, "done", "owner-z", 30s, Msg())->state ==
          wc::Claim::State::kAcquired);
  REQUIRE(m.second().Run(svc, "done", "owner-z", 1h, Msg(), 1, Counting(runs))->kind ==
          wc::RunOutcome::Kind::kCompleted);
  auto dead = m.second().Acquire(svc, "dead", "owner-z", 30s, Msg());
  REQUIRE(dead.ok());
  REQUIRE(*m.second().MarkFailed(svc, "dead", "owner-z", dead->fencing_token, "Poison", 1h));
}

TEST_CASE_TEMPLATE("conformance: AcquireBatch and RunBatch answer as Acquire and Run do", Maker,
                   WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  PrepareKeys(m, svc);
  std::vector<wc::Message> msgs = {Msg(), Msg(), Msg(), Msg(), Msg("new payload")};
  std::vector<wc::BatchRecord> records = {{&msgs[0], "new", {}},
                                          {&msgs[1], "held", {}},
                                          {&msgs[2], "done", {}},
                                          {&msgs[3], "dead", {}},
                                          {&msgs[4], "new2", {}}};
  auto claims = m.store().AcquireBatch(svc, records, "owner-a", 10s);
  REQUIRE_MESSAGE(claims.ok(), claims.status().ToString());
  REQUIRE(claims->size() == records.size());
  const auto& c = *claims;
  CHECK(c[0].state == wc::Claim::State::kAcquired);
  CHECK(c[0].attempts == 1);
  CHECK(c[0].fencing_token == Token<Maker>(1));
  CHECK(c[0].payload_hash == wc::PayloadHash(msgs[0]));
  CHECK(c[1].state == wc::Claim::State::kConflict);
  CHECK(c[1].previous_owner == "owner-z");
  CHECK(c[1].retry_after > 0ms);
  CHECK(c[1].retry_after <= 30s);
  CHECK(c[2].state == wc::Claim::State::kDuplicate);
  CHECK(c[2].result == "done done");
  CHECK(c[3].state == wc::Claim::State::kFailed);
  CHECK(c[3].last_error == "Poison");
  CHECK(c[4].state == wc::Claim::State::kAcquired);
  CHECK(c[4].payload_hash == wc::PayloadHash(msgs[4]));
  CHECK(m.State(svc, "new") == "PENDING/1/owner-a");
  CHECK(m.State(svc, "held") == "PENDING/1/owner-z");

  // RunBatch over the granted records: each completes as Run would have it.
  std::vector<wc::BatchRecord> granted = {records[0], records[4]};
  granted[0].claim = c[0];
  granted[1].claim = c[4];
  std::atomic<int> runs{0};
  auto outcomes = m.store().RunBatch(svc, granted, "owner-a", 1h, Counting(runs));
  REQUIRE_MESSAGE(outcomes.ok(), outcomes.status().ToString());
  if (outcomes->empty()) {
    // The store asked for the records one by one, which the caller must then do.
    MESSAGE(std::string(Maker::kName) << ": RunBatch asked for one-by-one processing");
    for (const auto& r : granted)
      CHECK(m.store().Run(svc, r.key, "owner-a", 1h, *r.message, 1, Counting(runs))->kind ==
            wc::RunOutcome::Kind::kCompleted);
  } else {
    REQUIRE(outcomes->size() == 2);
    for (const auto& o : *outcomes) CHECK(o.kind == wc::RunOutcome::Kind::kCompleted);
  }
  CHECK(runs == 2);
  CHECK(m.State(svc, "new") == "COMPLETED/1/-");
  CHECK(m.State(svc, "new2") == "COMPLETED/1/-");
  auto dup = m.second().Acquire(svc, "new2", "owner-b", 10s, Msg());
  REQUIRE(dup.ok());
  CHECK(dup->state == wc::Claim::State::kDuplicate);
  CHECK(dup->result == "done new2");
}

TEST_CASE_TEMPLATE("conformance: RunBatch stops at a failed handler and gives the rest back "
                   "uncounted",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  std::vector<wc::Message> msgs = {Msg(), Msg(), Msg()};
  std::vector<wc::BatchRecord> records = {
      {&msgs[0], "ok", {}}, {&msgs[1], "fails", {}}, {&msgs[2], "after", {}}};
  auto claims = m.store().AcquireBatch(svc, records, "owner-a", 10s);
  REQUIRE(claims.ok());
  for (size_t i = 0; i < records.size(); ++i) records[i].claim = (*claims)[i];
  std::vector<std::string> ran;
  auto handler = [&](wc::HandlerContext& ctx) {
    ran.push_back(ctx.idempotency_key());
    if (ctx.idempotency_key() == "fails") return wc::HandlerResult::Retry("Flaky", "down");
    return wc::HandlerResult::Done("done " + ctx.idempotency_key());
  };
  auto outcomes = m.store().RunBatch(svc, records, "owner-a", 1h, handler);
  REQUIRE_MESSAGE(outcomes.ok(), outcomes.status().ToString());
  if (outcomes->empty()) {
    MESSAGE(std::string(Maker::kName) << ": RunBatch asked for one-by-one processing");
    return;
  }
  REQUIRE(outcomes->size() == 2);
  CHECK((*outcomes)[0].kind == wc::RunOutcome::Kind::kCompleted);
  CHECK((*outcomes)[1].kind == wc::RunOutcome::Kind::kFailed);
  CHECK((*outcomes)[1].handler.error_class == "Flaky");
  CHECK(ran == std::vector<std::string>{"ok", "fails"});
  CHECK(m.State(svc, "ok") == "COMPLETED/1/-");
  // The failed record is still this owner's claim (the caller releases it); the one after was
  // given back uncounted.
  CHECK(m.State(svc, "fails") == "PENDING/1/owner-a");
  REQUIRE(m.store().Release(svc, "fails", "owner-a", "Flaky: down").ok());
  auto after = m.second().Acquire(svc, "after", "owner-b", 10s, Msg());
  REQUIRE(after.ok());
  CHECK(after->state == wc::Claim::State::kAcquired);
  CHECK(after->attempts == 1);
  auto fails = m.second().Acquire(svc, "fails", "owner-b", 10s, Msg());
  REQUIRE(fails.ok());
  CHECK(fails->attempts == 2);
  CHECK(fails->last_error == "Flaky: down");
}

TEST_CASE_TEMPLATE("conformance: ClaimAndRunBatch with an accept that refuses CONFLICT runs the "
                   "prefix before it and gives the rest back uncounted",
                   Maker, WALRELAY_CONFORMING_STORES) {
  Maker m;
  const std::string svc = FreshConsumer();
  PrepareKeys(m, svc);
  std::vector<wc::Message> msgs = {Msg(), Msg(), Msg(), Msg(), Msg()};
  std::vector<wc::BatchRecord> records = {{&msgs[0], "a", {}},
                                          {&msgs[1], "done", {}},
                                          {&msgs[2], "b", {}},
                                          {&msgs[3], "held", {}},
                                          {&msgs[4], "c", {}}};
  auto refuse_conflict = [](const wc::BatchRecord&, const wc::Claim& claim) {
    return claim.state != wc::Claim::State::kConflict;
  };
  std::atomic<int> runs{0};
  auto run =
      m.store().ClaimAndRunBatch(svc, records, "owner-a", 10s, 1h, refuse_conflict, Counting(runs));
  REQUIRE_MESSAGE(run.ok(), run.status().ToString());
  if (run->one_by_one) {
    MESSAGE(std::string(Maker::kName) << ": ClaimAndRunBatch asked for one-by-one processing");
    return;
  }
  // Claims up to and including the refused one, as Acquire answers them.
  REQUIRE(run->claims.size() == 4);
  CHECK(run->claims[0].state == wc::Claim::State::kAcquired);
  CHECK(run->claims[0].attempts == 1);
  CHECK(run->claims[1].state == wc::Claim::State::kDuplicate);
  CHECK(run->claims[1].result == "done done");
  CHECK(run->claims[2].state == wc::Claim::State::kAcquired);
  CHECK(run->claims[3].state == wc::Claim::State::kConflict);
  CHECK(run->claims[3].previous_owner == "owner-z");
  // The granted records before the refused one ran and completed.
  REQUIRE(run->outcomes.size() == 2);
  for (const auto& o : run->outcomes) CHECK(o.kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(runs == 2);
  CHECK(m.State(svc, "a") == "COMPLETED/1/-");
  CHECK(m.State(svc, "b") == "COMPLETED/1/-");
  CHECK(m.State(svc, "held") == "PENDING/1/owner-z");
  // The record after the refused one is not claimed: its next claim is its first attempt.
  auto c = m.second().Acquire(svc, "c", "owner-b", 10s, Msg());
  REQUIRE(c.ok());
  CHECK(c->state == wc::Claim::State::kAcquired);
  CHECK(c->attempts == 1);
}

}  // namespace
}  // namespace walrelay::testing
