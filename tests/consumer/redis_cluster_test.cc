// The idempotent consumer's Redis store against a Redis Cluster of three masters and three
// replicas (redis-server --cluster-enabled yes, formed by redis-cli --cluster create, all on
// loopback): keys over every master, a slot migrated by hand while the store works (ASK, then
// MOVED), WAIT for a replica, and a consumer on the mock Kafka cluster while a master is killed
// and its replica promoted.
#include <signal.h>

#include <map>
#include <mutex>

#include "common/rdkafka_handles.h"
#include "consumer/redis_cluster.h"
#include "consumer_fixture.h"
#include "devtools/redis_cluster_sandbox.h"

namespace walrelay::testing {
namespace {

std::unique_ptr<devtools::RedisClusterSandbox> StartCluster(const std::string& password = "") {
  auto r = devtools::RedisClusterSandbox::Start(password);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

// The store's event lines (MOVED, ASK, REFRESH, CONNECTION, WAIT), counted by event.
class EventLog {
 public:
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
    };
  }
  int Count(const std::string& event) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const auto& l : lines_) n += l.rfind(event + " ", 0) == 0 ? 1 : 0;
    return n;
  }
  std::string Last(const std::string& event) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lines_.rbegin(); it != lines_.rend(); ++it)
      if (it->rfind(event + " ", 0) == 0) return *it;
    return "";
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

std::unique_ptr<wc::RedisStore> ConnectCluster(const devtools::RedisClusterSandbox& cluster,
                                               EventLog& log, int wait_replicas = 0,
                                               std::chrono::milliseconds wait_timeout = 1000ms) {
  wc::RedisStoreOptions o;
  // Two seeds only: the store learns the other nodes from the slot map.
  o.cluster_nodes = {cluster.seeds()[0], cluster.seeds()[1]};
  o.timeout = 10s;  // longer than a failover with cluster-node-timeout 1000
  o.wait_replicas = wait_replicas;
  o.wait_timeout = wait_timeout;
  o.log = log.Sink();
  auto s = wc::RedisStore::Connect(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  return std::move(s).value();
}

std::string KeyName(const std::string& key) { return "walrelay:consumer:svc:" + key; }

// A field of a key, read on the node that owns its slot now.
std::string FieldOnOwner(const devtools::RedisClusterSandbox& cluster, const std::string& key,
                         const std::string& field) {
  auto master = cluster.MasterOf(wc::KeySlot(KeyName(key)));
  REQUIRE_MESSAGE(master.ok(), master.status().ToString());
  auto v = cluster.Command(*master, {"HGET", KeyName(key), field});
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *v;
}

wc::Message Msg(int64_t offset) {
  wc::Message m;
  m.topic = "orders";
  m.offset = offset;
  return m;
}

wc::HandlerResult Done(wc::HandlerContext& ctx) {
  return wc::HandlerResult::Done("r-" + ctx.idempotency_key());
}

void Complete(wc::RedisStore& store, const std::string& key, int64_t offset) {
  auto a = store.Acquire("svc", key, "owner", 10s, Msg(offset));
  REQUIRE_MESSAGE(a.ok(), a.status().ToString());
  REQUIRE(a->state == wc::Claim::State::kAcquired);
  auto run = store.Run("svc", key, "owner", 1h, Msg(offset), a->attempts, Done);
  REQUIRE_MESSAGE(run.ok(), run.status().ToString());
  REQUIRE(run->kind == wc::RunOutcome::Kind::kCompleted);
}

TEST_CASE(
    "RedisStore on a Redis Cluster: keys over three masters; a slot migration's ASK and MOVED "
    "followed") {
  auto cluster = StartCluster();
  EventLog log;
  auto store = ConnectCluster(*cluster, log);
  auto masters = cluster->Masters();
  REQUIRE(masters.ok());
  REQUIRE(masters->size() == 3);

  constexpr int kKeys = 300;
  std::map<int, int> keys_per_master;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "k-" + std::to_string(i);
    Complete(*store, key, i);
    const int slot = wc::KeySlot(KeyName(key));
    if (i < 20) CHECK(*cluster->KeySlot(KeyName(key)) == slot);
    ++keys_per_master[*cluster->MasterOf(slot)];
    CHECK(FieldOnOwner(*cluster, key, "state") == "COMPLETED");
  }
  REQUIRE(keys_per_master.size() == 3);
  for (auto [port, n] : keys_per_master) {
    MESSAGE("master " << port << " holds " << n << " keys");
    CHECK(n > kKeys / 6);
  }
  CHECK(log.Count("MOVED") == 0);
  CHECK(log.Count("ASK") == 0);

  // Move k-0's slot to another master, in steps.
  const int slot = wc::KeySlot(KeyName("k-0"));
  const int from = *cluster->MasterOf(slot);
  const int to = (*masters)[0] != from ? (*masters)[0] : (*masters)[1];
  REQUIRE(cluster->BeginSlotMigration(slot, to).ok());
  auto migrated = cluster->MigrateKeys(slot, to);
  REQUIRE_MESSAGE(migrated.ok(), migrated.status().ToString());
  CHECK(*migrated >= 1);

  // Half moved: the old master answers ASK for a key it no longer holds, the store asks the new
  // one (ASKING first) and finds the key COMPLETED there.
  auto dup = store->Acquire("svc", "k-0", "other", 10s, Msg(0));
  REQUIRE_MESSAGE(dup.ok(), dup.status().ToString());
  CHECK(dup->state == wc::Claim::State::kDuplicate);
  CHECK(dup->result == "r-k-0");
  CHECK(log.Count("ASK") >= 1);
  const std::string ask = "ASK " + std::to_string(slot) + " 127.0.0.1:" + std::to_string(to);
  CHECK(log.Last("ASK").rfind(ask, 0) == 0);
  // A new key of that slot is created on the importing node, claim and mark alike.
  std::string fresh;
  for (int j = 0; fresh.empty(); ++j)
    if (wc::KeySlot(KeyName("n-" + std::to_string(j))) == slot) fresh = "n-" + std::to_string(j);
  const int asks_before = log.Count("ASK");
  Complete(*store, fresh, 1000);
  CHECK(log.Count("ASK") >= asks_before + 2);
  CHECK(log.Count("MOVED") == 0);

  // Done: the store's map still names the old master, which now answers MOVED once; the
  // reloaded map sends later calls straight to the new owner.
  REQUIRE(cluster->FinishSlotMigration(slot, to).ok());
  REQUIRE(*cluster->MasterOf(slot) == to);
  auto again = store->Acquire("svc", "k-0", "other", 10s, Msg(0));
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(again->state == wc::Claim::State::kDuplicate);
  CHECK(log.Count("MOVED") == 1);
  auto fresh_again = store->Acquire("svc", fresh, "other", 10s, Msg(1000));
  REQUIRE(fresh_again.ok());
  CHECK(fresh_again->state == wc::Claim::State::kDuplicate);
  CHECK(log.Count("MOVED") == 1);
  CHECK(*cluster->Command(to, {"HGET", KeyName(fresh), "state"}) == "COMPLETED");
  CHECK(*cluster->Command(to, {"HGET", KeyName("k-0"), "state"}) == "COMPLETED");
  MESSAGE("slot " << slot << " moved " << from << " -> " << to << " with " << *migrated
                  << " keys; ASK followed " << log.Count("ASK") << ", MOVED "
                  << log.Count("MOVED"));
}

TEST_CASE("RedisStore on a Redis Cluster: one password for every node; a refusal never shows it") {
  auto cluster = StartCluster("cluster-s3cret");
  wc::RedisStoreOptions o;
  o.cluster_nodes = {cluster->seeds()[0]};
  o.password = "wrong-s3cret";
  auto refused = wc::RedisStore::Connect(o);
  REQUIRE(!refused.ok());
  CHECK(refused.status().message().find("refused AUTH") != std::string::npos);
  CHECK(refused.status().message().find("wrong-s3cret") == std::string::npos);

  o.password = "cluster-s3cret";
  auto store = wc::RedisStore::Connect(o);
  REQUIRE_MESSAGE(store.ok(), store.status().ToString());
  std::map<int, int> keys_per_master;  // every master is reached, each with the password
  for (int i = 0; i < 30; ++i) {
    const std::string key = "a-" + std::to_string(i);
    Complete(**store, key, i);
    ++keys_per_master[*cluster->MasterOf(wc::KeySlot(KeyName(key)))];
    CHECK(FieldOnOwner(*cluster, key, "state") == "COMPLETED");
  }
  CHECK(keys_per_master.size() == 3);
}

TEST_CASE("RedisStore on a Redis Cluster: wait_replicas holds Run until the replica has the mark") {
  auto cluster = StartCluster();
  EventLog log;
  auto store = ConnectCluster(*cluster, log, 1, 300ms);
  const std::string key = "w-1";
  const int master = *cluster->MasterOf(wc::KeySlot(KeyName(key)));
  auto replica = cluster->ReplicaOf(master);
  REQUIRE_MESSAGE(replica.ok(), replica.status().ToString());

  // WAIT returns once the replica acknowledged: the mark is there when Run returns.
  Complete(*store, key, 1);
  CHECK(*cluster->Command(*replica, {"KEYS", KeyName(key)}) == KeyName(key));
  CHECK(log.Count("WAIT") == 0);

  // A replica that does not answer costs wait_timeout per completion, and is reported; the
  // record still counts as completed (the mark is on the master).
  std::string held;  // another key of the same slot, so of the same master
  for (int j = 0; held.empty(); ++j)
    if (wc::KeySlot(KeyName("h-" + std::to_string(j))) == wc::KeySlot(KeyName(key)))
      held = "h-" + std::to_string(j);
  REQUIRE(cluster->Signal(*replica, SIGSTOP).ok());
  const auto start = std::chrono::steady_clock::now();
  Complete(*store, held, 2);
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(cluster->Signal(*replica, SIGCONT).ok());
  CHECK(took >= 300ms);
  CHECK(log.Count("WAIT") == 1);
  CHECK(log.Last("WAIT").find("reached 0 of 1 replicas within 300 ms") != std::string::npos);
  CHECK(WaitUntil(
      [&] {
        auto k = cluster->Command(*replica, {"KEYS", KeyName(held)});
        return k.ok() && *k == KeyName(held);
      },
      10s));
}

// Produces records with id headers p-0..p-<count-1> over `partitions`, flushing once at the end
// (TestProducer flushes per record, which takes ~10 ms each on the mock cluster).
void ProduceAll(const std::string& bootstrap, const std::string& topic, int partitions, int count) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  REQUIRE(rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof(err)) ==
          RD_KAFKA_CONF_OK);
  KafkaHandlePtr rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err)));
  REQUIRE_MESSAGE(rk != nullptr, err);
  for (int i = 0; i < count; ++i) {
    const std::string id = "p-" + std::to_string(i);
    rd_kafka_headers_t* hdrs = rd_kafka_headers_new(1);
    rd_kafka_header_add(hdrs, "id", -1, id.data(), static_cast<ssize_t>(id.size()));
    const rd_kafka_resp_err_t e = rd_kafka_producev(
        rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(i % partitions),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(const_cast<char*>("v"), 1),
        RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
    REQUIRE_MESSAGE(e == RD_KAFKA_RESP_ERR_NO_ERROR, rd_kafka_err2str(e));
  }
  REQUIRE(rd_kafka_flush(rk.get(), 30000) == RD_KAFKA_RESP_ERR_NO_ERROR);
}

TEST_CASE(
    "Consumer + RedisStore on a Redis Cluster: a master killed mid-run, its replica promoted") {
  ConsumerFixture f;
  auto cluster = StartCluster();
  EventLog log;
  auto store = ConnectCluster(*cluster, log);
  constexpr int kRecords = 3000;
  REQUIRE(f.kafka().CreateTopic("payments", 3, 1).ok());
  ProduceAll(f.kafka().bootstrap_servers(), "payments", 3, kRecords);

  std::mutex mu;
  std::map<std::string, int> runs;
  auto handler = [&](wc::HandlerContext& ctx) {
    std::lock_guard<std::mutex> lock(mu);
    ++runs[ctx.idempotency_key()];
    return Done(ctx);
  };
  auto opts = f.Options("svc", "payments");
  RunningConsumer c(opts, *store, handler);
  REQUIRE(WaitUntil([&] { return c.stats().completed >= kRecords / 3; }, 60s));
  const int64_t before_kill = c.stats().completed;
  const auto kill_started = std::chrono::steady_clock::now();
  auto promoted = cluster->KillMasterOf(wc::KeySlot(KeyName("p-0")));
  REQUIRE_MESSAGE(promoted.ok(), promoted.status().ToString());
  const auto failover_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - kill_started);
  CHECK(before_kill < kRecords);
  REQUIRE(WaitUntil(
      [&] {
        const auto s = c.stats();
        return s.completed + s.duplicates >= kRecords;
      },
      90s));
  CHECK(c.Stop().ok());
  CHECK(c.stats().dead_lettered == 0);
  CHECK(log.Count("CONNECTION") >= 1);  // the store did see its master go

  // Every record took effect; the record in flight on the killed master may run twice
  // (docs/consumer.md: one repeat per consumer per failover).
  int repeats = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(runs.size() == kRecords);
    for (const auto& entry : runs) {
      const auto& key = entry.first;
      const auto& n = entry.second;
      CHECK_MESSAGE(n >= 1, key);
      repeats += n - 1;
    }
  }
  CHECK(repeats <= 1);

  // Replaying every record (a new group, same consumer name): COMPLETED marks the old master
  // acknowledged but had not passed to its replica are gone, and those records run again.
  auto replay_opts = f.Options("svc", "payments", "svc-replay");
  RunningConsumer replay(replay_opts, *store, handler);
  REQUIRE(WaitUntil(
      [&] {
        const auto s = replay.stats();
        return s.completed + s.duplicates >= kRecords;
      },
      60s));
  CHECK(replay.Stop().ok());
  const int64_t lost_marks = replay.stats().completed;
  MESSAGE(kRecords << " records, " << before_kill << " completed before the kill, failover took "
                   << failover_ms.count() << " ms, repeats " << repeats << ", marks lost "
                   << lost_marks << ", store events: CONNECTION " << log.Count("CONNECTION")
                   << ", MOVED " << log.Count("MOVED") << ", REFRESH " << log.Count("REFRESH"));
  CHECK(replay.stats().duplicates + lost_marks == kRecords);
}

}  // namespace
}  // namespace walrelay::testing
