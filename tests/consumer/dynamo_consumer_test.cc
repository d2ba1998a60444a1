// The idempotent consumer with its DynamoDB store, against dynalite (a DynamoDB-API server
// from npm, started on a free port) and librdkafka's mock cluster. Each path of the store's
// conditional writes is driven directly and the item read back; then the consumer end to end:
// duplicates, a poison record, a payload mismatch, and a member that crashed holding a key.
#include <map>
#include <mutex>
#include <optional>

#include "consumer/dynamo_client.h"
#include "consumer_fixture.h"
#include "devtools/dynalite_sandbox.h"
#include "throttling_proxy.h"

namespace walrelay::testing {
namespace {

std::unique_ptr<devtools::DynaliteSandbox> StartDynalite() {
  auto d = devtools::DynaliteSandbox::Start();
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(d).value();
}

wc::DynamoStoreOptions StoreOptions(const devtools::DynaliteSandbox& server) {
  wc::DynamoStoreOptions o;
  o.endpoint = server.endpoint();
  o.region = "us-east-1";
  o.access_key_id = "AKIDEXAMPLE";
  o.secret_access_key = "not-a-real-secret";
  return o;
}

std::unique_ptr<wc::DynamoStore> Connect(const wc::DynamoStoreOptions& o) {
  auto s = wc::DynamoStore::Connect(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  REQUIRE_MESSAGE((*s)->CreateSchema().ok(), "CreateSchema");
  return std::move(s).value();
}
std::unique_ptr<wc::DynamoStore> Connect(const devtools::DynaliteSandbox& server) {
  return Connect(StoreOptions(server));
}

// An attribute of the item of consumer "svc", as text ("(none)" when absent), read with a
// client of its own.
std::string Field(const devtools::DynaliteSandbox& server, const std::string& key,
                  const std::string& attribute) {
  wc::DynamoClient::Options o;
  o.endpoint = *wc::ParseDynamoEndpoint(server.endpoint());
  o.region = "us-east-1";
  o.credentials = {"AKIDEXAMPLE", "x", ""};
  wc::DynamoClient client(o);
  auto r = client.Call("GetItem",
                       "{\"TableName\":\"walrelay_consumer_keys\",\"Key\":{\"consumer\":{\"S\":"
                       "\"svc\"},\"idempotency_key\":{\"S\":\"" +
                           key +
                           "\"}},"
                           "\"ConsistentRead\":true}");
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  REQUIRE_MESSAGE(r->error_type.empty(), r->error_type << ": " << r->error_message);
  const rapidjson::Value* item = wc::JsonMember(r->body, "Item");
  if (item == nullptr) return "(none)";
  const rapidjson::Value* a = wc::JsonMember(*item, attribute.c_str());
  if (a == nullptr) return "(none)";
  for (const char* type : {"S", "N"})
    if (const rapidjson::Value* v = wc::JsonMember(*a, type)) return v->GetString();
  return "?";
}

[[maybe_unused]] int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

wc::Message Msg(const std::string& value = "v") {
  wc::Message m;
  m.topic = "orders";
  m.partition = 2;
  m.offset = 17;
  m.value = value;
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

TEST_CASE("DynamoStore: an item past its TTL counts as absent; the fencing token still grows") {
  auto server = StartDynalite();
  auto store = Connect(*server);
  std::map<std::string, int> effects;
  std::mutex mu;
  REQUIRE(store->Acquire("svc", "k", "owner-a", 10s, Msg())->fencing_token == 1);
  REQUIRE(store->Run("svc", "k", "owner-a", 1ms, Msg(), 1, Counting(effects, mu))->kind ==
          wc::RunOutcome::Kind::kCompleted);
  // dynalite never deletes expired items (nor does DynamoDB at once): the store must not
  // take the stale COMPLETED item for a duplicate once its retention is over.
  Result<wc::Claim> c = Status::Internal("not run");
  REQUIRE(WaitUntil(
      [&] {
        c = store->Acquire("svc", "k", "owner-b", 10s, Msg("new"));
        return c.ok() && c->state != wc::Claim::State::kDuplicate;
      },
      5s));
  CHECK(c->state == wc::Claim::State::kAcquired);
  CHECK(c->attempts == 1);
  CHECK(c->fencing_token == 2);
  CHECK(c->payload_hash == wc::PayloadHash(Msg("new")));
  CHECK(Field(*server, "k", "state") == "PENDING");
  CHECK(Field(*server, "k", "owner") == "owner-b");
}

TEST_CASE("DynamoStore: a slow but live handler's lease is renewed; nobody takes its key") {
  auto server = StartDynalite();
  auto a = Connect(*server);
  auto b = Connect(*server);
  REQUIRE(a->Acquire("svc", "k", "member-a", 300ms, Msg()).ok());
  int conflicts = 0;
  auto run = a->Run("svc", "k", "member-a", 1h, Msg(), 1, [&](wc::HandlerContext&) {
    // Three leases long; another member asks for the key all the while.
    for (int i = 0; i < 9; ++i) {
      std::this_thread::sleep_for(100ms);
      auto c = b->Acquire("svc", "k", "member-b", 30s, Msg());
      REQUIRE(c.ok());
      if (c->state == wc::Claim::State::kConflict) ++conflicts;
    }
    return wc::HandlerResult::Done("by a");
  });
  REQUIRE(run.ok());
  CHECK(run->kind == wc::RunOutcome::Kind::kCompleted);
  CHECK(conflicts == 9);
  CHECK(Field(*server, "k", "result") == "by a");
}

TEST_CASE("DynamoStore: credentials from the environment; the secret never shows in errors") {
  wc::DynamoStoreOptions o;
  o.endpoint = "http://127.0.0.1:1";
  o.access_key_id = "AKIDEXAMPLE";
  o.secret_access_key = "very-secret-key";
  o.session_token = "very-secret-token";
  o.timeout = 500ms;
  auto refused = wc::DynamoStore::Connect(o);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == ErrorCode::kConnection);
  CHECK(refused.status().message().find("127.0.0.1:1") != std::string::npos);
  CHECK(refused.status().message().find("very-secret") == std::string::npos);
  o.access_key_id.clear();
  o.secret_access_key.clear();
  o.session_token.clear();
  ::unsetenv("AWS_ACCESS_KEY_ID");
  // Without it, the chain's last source is the instance metadata service.
  ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  auto none = wc::DynamoStore::Connect(o);
  ::unsetenv("AWS_EC2_METADATA_DISABLED");
  CHECK(none.status().code() == ErrorCode::kConfig);
  auto server = StartDynalite();
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "from-env", 1);
  o.endpoint = server->endpoint();
  auto from_env = wc::DynamoStore::Connect(o);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  CHECK_MESSAGE(from_env.ok(), from_env.status().ToString());
}

TEST_CASE(
    "Consumer + DynamoStore: duplicates skipped, a poison record dead-lettered after N tries, "
    "a payload mismatch dead-lettered") {
  ConsumerFixture f;
  auto server = StartDynalite();
  auto store = Connect(*server);
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
  f.producer().Send("emails", "m-3", "bye, changed");  // the same key, another payload

  auto opts = f.Options("svc", "emails");
  opts.max_attempts = 2;
  RunningConsumer c(opts, *store, handler);
  REQUIRE(WaitUntil([&] { return c.stats().dead_lettered == 2; }, 30s));
  CHECK(c.Stop().ok());
  CHECK(c.stats().completed == 2);
  CHECK(c.stats().duplicates == 1);
  CHECK(c.stats().payload_mismatches == 1);
  CHECK(poison_runs == 2);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(effects["m-1"] == 1);
    CHECK(effects["m-3"] == 1);
  }
  CHECK(Field(*server, "m-2", "state") == "FAILED");
  CHECK(Field(*server, "m-2", "last_error") == "exception: mail server says no (after 2 attempts)");
  CHECK(Field(*server, "m-3", "state") == "COMPLETED");  // the mismatch left it as it was

  auto reader = f.Reader();
  auto dlq = reader->ReadAtLeast({"svc.dlq"}, 2, 20s);
  REQUIRE(dlq.ok());
  REQUIRE(dlq->size() == 2);
  CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.error.class") == "exception");
  CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.attempts") == "2");
  CHECK(HeaderOf((*dlq)[0], "__walrelay.consumer.original.offset") == "2");
  CHECK(HeaderOf((*dlq)[1], "__walrelay.consumer.error.class") == "payload-mismatch");
  CHECK(HeaderOf((*dlq)[1], "__walrelay.consumer.key") == "m-3");
}

TEST_CASE("Consumer + DynamoStore: a member that crashed holding a key, then a redelivery of "
          "everything: every effect once") {
  ConsumerFixture f;
  auto server = StartDynalite();
  auto store = Connect(*server);
  REQUIRE(f.kafka().CreateTopic("orders", 1, 1).ok());
  // The crashed member claimed e-2 with a 3 s lease and never completed it (no renewal: its
  // process is gone).
  auto crashed = Connect(*server);
  REQUIRE(crashed->Acquire("svc", "e-2", "crashed-member", 3s, Msg("v-e-2"))->state ==
          wc::Claim::State::kAcquired);
  for (int i = 1; i <= 4; ++i) {
    const std::string id = "e-" + std::to_string(i);
    f.producer().Send("orders", id, "v-" + id);
  }
  std::map<std::string, int> effects;
  std::mutex mu;
  auto opts = f.Options("svc", "orders");
  {
    RunningConsumer c(opts, *store, Counting(effects, mu));
    REQUIRE(WaitUntil([&] { return c.stats().completed == 4; }, 30s));
    CHECK(c.Stop().ok());
    CHECK(c.stats().takeovers == 1);
  }
  CHECK(Field(*server, "e-2", "attempts") == "2");
  CHECK(Field(*server, "e-2", "done_fence") == "2");
  // The relay repeats the whole transaction (at-least-once): another consumer group (a new
  // deployment reading from the start) sees every record again; the store absorbs them.
  for (int i = 1; i <= 4; ++i) {
    const std::string id = "e-" + std::to_string(i);
    f.producer().Send("orders", id, "v-" + id);
  }
  {
    auto again = f.Options("svc", "orders", "svc-second-group");
    again.kafka_properties["auto.offset.reset"] = "earliest";
    RunningConsumer c(again, *store, Counting(effects, mu));
    REQUIRE(WaitUntil([&] { return c.stats().duplicates == 8; }, 30s));
    CHECK(c.Stop().ok());
    CHECK(c.stats().completed == 0);
  }
  std::lock_guard<std::mutex> lock(mu);
  CHECK(effects == std::map<std::string, int>{{"e-1", 1}, {"e-2", 1}, {"e-3", 1}, {"e-4", 1}});
}

}  // namespace
}  // namespace walrelay::testing

namespace walrelay::testing {
namespace {

TEST_CASE("Consumer + DynamoStore: 15 s of throttling, longer than the store's timeout: the "
          "member keeps running and every effect happens once") {
  ConsumerFixture f;
  auto server = StartDynalite();
  ThrottlingProxy proxy(server->port());
  wc::DynamoStoreOptions o = StoreOptions(*server);
  o.endpoint = proxy.endpoint();
  o.timeout = 2s;
  auto store = Connect(o);
  REQUIRE(f.kafka().CreateTopic("orders", 1, 1).ok());
  constexpr int kEvents = 60;
  for (int i = 0; i < kEvents; ++i) f.producer().Send("orders", "t-" + std::to_string(i), "v");

  std::map<std::string, int> effects;
  std::mutex mu;
  std::atomic<int> ran{0};
  auto handler = [&](wc::HandlerContext& ctx) {
    ++ran;
    std::this_thread::sleep_for(20ms);
    return Counting(effects, mu)(ctx);
  };
  auto opts = f.Options("svc", "orders");
  opts.store_retry_backoff = 500ms;
  opts.max_batch = 10;
  RunningConsumer c(opts, *store, handler);
  REQUIRE(WaitUntil([&] { return ran >= 15; }, 30s));
  // Claims, marks and renewals all refused for 15 s, several times the store's timeout.
  proxy.Throttle(true);
  std::this_thread::sleep_for(15s);
  proxy.Throttle(false);
  MESSAGE("requests throttled: " << proxy.throttled());
  CHECK(proxy.throttled() > 10);
  const bool all = WaitUntil(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return static_cast<int>(effects.size()) == kEvents;
      },
      60s);
  CHECK(all);
  CHECK(c.Stop().ok());  // Run() did not return on its own
  std::lock_guard<std::mutex> lock(mu);
  int twice = 0;
  for (const auto& [key, n] : effects) twice += n > 1 ? 1 : 0;
  CHECK(twice == 0);
  CHECK(c.stats().completed + c.stats().duplicates >= kEvents);
}

}  // namespace
}  // namespace walrelay::testing
