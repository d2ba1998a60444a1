// The building blocks of exactly-once delivery (src/delivery/) on a real Apache Kafka broker:
// transactions as read_committed and read_uncommitted consumers see them, the offsets topic
// read back, and fencing by transactional.id. One broker serves every case.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/rdkafka_handles.h"
#include "delivery/offset_store.h"
#include "delivery/source_offsets.h"
#include "delivery/transactional_producer.h"
#include "devtools/kafka_broker.h"

namespace walrelay {
namespace {

using namespace std::chrono_literals;

constexpr auto kTxnTimeout = 30s;

devtools::KafkaBroker& Broker() {
  static std::unique_ptr<devtools::KafkaBroker> broker = [] {
    auto started = devtools::KafkaBroker::Start();
    REQUIRE_MESSAGE(started.ok(), started.status().ToString());
    MESSAGE("Apache Kafka " << devtools::KafkaBroker::Version() << " started in "
                            << (*started)->start_seconds() << " s");
    return std::move(started).value();
  }();
  return *broker;
}

std::map<std::string, std::string> ClientProperties() {
  return {{"bootstrap.servers", Broker().bootstrap_servers()}};
}

// Every record value of `topic`, read from the beginning to the end of each partition as a
// consumer with `isolation` ("read_committed" or "read_uncommitted") sees it.
std::vector<std::string> ReadValues(const std::string& topic, const std::string& isolation) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  static int readers = 0;
  const std::string group =
      "eos-test-" + std::to_string(::getpid()) + "-" + std::to_string(readers++);
  for (const auto& [k, v] :
       std::map<std::string, std::string>{{"bootstrap.servers", Broker().bootstrap_servers()},
                                          {"group.id", group},
                                          {"isolation.level", isolation},
                                          {"enable.auto.commit", "false"},
                                          {"enable.partition.eof", "true"}})
    REQUIRE(rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) == RD_KAFKA_CONF_OK);
  KafkaConsumerPtr rk(rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err));
  REQUIRE_MESSAGE(rk, err);
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
  REQUIRE(rd_kafka_metadata(rk.get(), 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR);
  const int partitions = md->topics[0].partition_cnt;
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(rkt);
  REQUIRE(partitions > 0);
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p)
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  REQUIRE(rd_kafka_assign(rk.get(), list) == RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_destroy(list);
  std::vector<std::string> values;
  std::set<int32_t> at_end;
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (static_cast<int>(at_end.size()) < partitions &&
         std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 200);
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      at_end.insert(m->partition);
    } else if (!m->err) {
      at_end.erase(m->partition);
      values.emplace_back(m->payload ? std::string(static_cast<const char*>(m->payload), m->len)
                                     : "");
    }
    rd_kafka_message_destroy(m);
  }
  REQUIRE_MESSAGE(static_cast<int>(at_end.size()) == partitions,
                  topic << " not read to its end in 15 s");
  return values;
}

// Commit markers are written after the commit returns; readers see the records once they are.
std::vector<std::string> ReadCommittedOnce(const std::string& topic, size_t expected) {
  std::vector<std::string> values;
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  do {
    values = ReadValues(topic, "read_committed");
    if (values.size() >= expected) break;
    std::this_thread::sleep_for(100ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return values;
}

SourceOffset OffsetAt(uint64_t commit_lsn,
                      const std::string& system_identifier = "7300000000000000001",
                      const std::string& slot = "walrelay") {
  SourceOffset o;
  o.lsn = Lsn(commit_lsn + 8);
  o.lsn_commit = Lsn(commit_lsn);
  o.tx_id = static_cast<int64_t>(commit_lsn % 1000);
  o.ts_usec = 1700000000000000;
  o.system_identifier = system_identifier;
  o.timeline = 1;
  o.slot = slot;
  return o;
}

Record DataRecord(const std::string& topic, const std::string& value) {
  Record r;
  r.topic = topic;
  r.key = "k";
  r.value = value;
  return r;
}

std::unique_ptr<TransactionalProducer> InitializedProducer(
    const std::string& transactional_id, TransactionalProducer::DeliveryHandler handler = {}) {
  auto producer =
      TransactionalProducer::Create(ClientProperties(), transactional_id, std::move(handler));
  REQUIRE_MESSAGE(producer.ok(), producer.status().ToString());
  const TxnStatus init = (*producer)->InitTransactions(kTxnTimeout);
  REQUIRE_MESSAGE(init.ok(), init.status.ToString());
  return std::move(producer).value();
}

void RequireOk(const TxnStatus& st) { REQUIRE_MESSAGE(st.ok(), st.status.ToString()); }

// One transaction: `values` into `topic` and `offset` into the store's topic.
void Transaction(TransactionalProducer& p, const OffsetStore& store, const std::string& topic,
                 const std::vector<std::string>& values, const SourceOffset& offset, bool commit) {
  RequireOk(p.Begin());
  uint64_t ticket = 0;
  for (const auto& v : values) RequireOk(p.Produce(DataRecord(topic, v), ticket++));
  RequireOk(p.SendOffset(store.MakeRecord(offset, 1)));
  if (commit) {
    RequireOk(p.Commit(kTxnTimeout));
  } else {
    // Flushed first, so the aborted records are in the log for a read_uncommitted reader.
    RequireOk(p.Flush(kTxnTimeout));
    RequireOk(p.Abort(kTxnTimeout));
  }
}

std::vector<std::string> Values(const std::string& prefix, int count) {
  std::vector<std::string> values;
  for (int i = 0; i < count; ++i) values.push_back(prefix + std::to_string(i));
  return values;
}

}  // namespace

TEST_CASE("committed: visible to read_committed with its offset record; aborted: to "
          "read_uncommitted only") {
  const std::string data = "eos.visibility.data";
  REQUIRE(Broker().CreateTopic(data, 1, 1).ok());
  const OffsetStore store(ClientProperties(), "eos.visibility.offsets",
                          SourceOffsetKey("visibility", "db1"));
  auto partitions = store.EnsureTopic(1, 1, 10s);
  REQUIRE_MESSAGE(partitions.ok(), partitions.status().ToString());
  int acknowledged = 0;
  auto producer =
      InitializedProducer("walrelay-visibility", [&](const TransactionDeliveryReport& r) {
        if (r.error == RD_KAFKA_RESP_ERR_NO_ERROR) ++acknowledged;
      });

  Transaction(*producer, store, data, Values("committed-", 10), OffsetAt(0x1000), true);
  Transaction(*producer, store, data, Values("aborted-", 7), OffsetAt(0x2000), false);
  // A later committed transaction moves the last stable offset past the aborted records, so
  // read_committed readers below have read beyond them, not stopped before them.
  Transaction(*producer, store, data, {"committed-last"}, OffsetAt(0x3000), true);
  CHECK(acknowledged == 18);

  const auto committed = ReadCommittedOnce(data, 11);
  CHECK(committed.size() == 11);
  CHECK(std::none_of(committed.begin(), committed.end(),
                     [](const std::string& v) { return v.rfind("aborted-", 0) == 0; }));
  CHECK(committed.back() == "committed-last");
  const auto uncommitted = ReadValues(data, "read_uncommitted");
  CHECK(uncommitted.size() == 18);
  MESSAGE("data topic: read_committed sees " << committed.size() << ", read_uncommitted sees "
                                             << uncommitted.size() << " (7 of them aborted)");

  const auto committed_offsets = ReadCommittedOnce(store.topic(), 2);
  CHECK(committed_offsets.size() == 2);
  CHECK(ReadValues(store.topic(), "read_uncommitted").size() == 3);
  auto last = store.ReadLast(10s);
  REQUIRE_MESSAGE(last.ok(), last.status().ToString());
  REQUIRE(last->has_value());
  CHECK(**last == OffsetAt(0x3000));
}

TEST_CASE(
    "the offset store: none before the first commit, the last committed one, aborted ignored") {
  const OffsetStore missing(ClientProperties(), "eos.store.never-created",
                            SourceOffsetKey("store", "db1"));
  auto nothing = missing.ReadLast(10s);
  REQUIRE_MESSAGE(nothing.ok(), nothing.status().ToString());
  CHECK_FALSE(nothing->has_value());

  const OffsetStore store(ClientProperties(), "eos.store.offsets", SourceOffsetKey("store", "db1"));
  REQUIRE(store.EnsureTopic(1, 1, 10s).ok());
  auto again = store.EnsureTopic(3, 1, 10s);  // exists, compacted: its own partition count, not 3
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(*again == 1);
  // A topic that deletes old records is refused, as Connect refuses it.
  REQUIRE(Broker().CreateTopic("eos.store.deleting", 1, 1, {{"cleanup.policy", "delete"}}).ok());
  const OffsetStore deleting(ClientProperties(), "eos.store.deleting",
                             SourceOffsetKey("store", "db1"));
  auto refused_topic = deleting.EnsureTopic(1, 1, 10s);
  REQUIRE_FALSE(refused_topic.ok());
  CHECK(refused_topic.status().code() == ErrorCode::kConfig);
  CHECK_MESSAGE(refused_topic.status().message().find("cleanup.policy=delete") != std::string::npos,
                refused_topic.status().message());
  auto empty = store.ReadLast(10s);
  REQUIRE_MESSAGE(empty.ok(), empty.status().ToString());
  CHECK_FALSE(empty->has_value());

  auto p = InitializedProducer("walrelay-store");
  Transaction(*p, store, "eos.store.offsets", {}, OffsetAt(0x1000), true);
  Transaction(*p, store, "eos.store.offsets", {}, OffsetAt(0x2000), false);
  // Another connector's offset, last in the same partition, is not ours.
  const OffsetStore neighbour(ClientProperties(), store.topic(),
                              SourceOffsetKey("neighbour", "db1"));
  {
    auto other = InitializedProducer("walrelay-neighbour");
    Transaction(*other, neighbour, "eos.store.offsets", {}, OffsetAt(0x9000), true);
  }
  // A successor initialising the same id completes everything its predecessor left: the
  // relay reads its offsets after InitTransactions().
  auto successor = InitializedProducer("walrelay-store");
  auto last = store.ReadLast(10s);
  REQUIRE_MESSAGE(last.ok(), last.status().ToString());
  REQUIRE(last->has_value());
  CHECK(**last == OffsetAt(0x1000));

  // A record under the key that does not parse is an error naming where it is.
  RequireOk(successor->Begin());
  Record broken = store.MakeRecord(OffsetAt(0x3000), 1);
  broken.value = "{\"lsn\":";
  RequireOk(successor->SendOffset(broken));
  RequireOk(successor->Commit(kTxnTimeout));
  auto successor2 = InitializedProducer("walrelay-store");
  auto refused = store.ReadLast(10s);
  REQUIRE_FALSE(refused.ok());
  CHECK_MESSAGE(refused.status().message().find(
                    "offsets topic 'eos.store.offsets' partition 0 offset") != std::string::npos,
                refused.status().message());
}

TEST_CASE("an offset of another server or slot is refused, naming both") {
  const OffsetStore store(ClientProperties(), "eos.foreign.offsets",
                          SourceOffsetKey("foreign", "db1"));
  REQUIRE(store.EnsureTopic(1, 1, 10s).ok());
  auto p = InitializedProducer("walrelay-foreign");
  Transaction(*p, store, "eos.foreign.offsets", {},
              OffsetAt(0x1000, "7300000000000000001", "walrelay"), true);
  auto settle = InitializedProducer("walrelay-foreign");

  auto own = store.ReadLastFrom("7300000000000000001", "walrelay", 10s);
  REQUIRE_MESSAGE(own.ok(), own.status().ToString());
  CHECK(own->has_value());
  auto other_server = store.ReadLastFrom("7399999999999999999", "walrelay", 10s);
  REQUIRE_FALSE(other_server.ok());
  CHECK(other_server.status().code() == ErrorCode::kOffsetMismatch);
  CHECK(other_server.status().message().find("7300000000000000001") != std::string::npos);
  CHECK(other_server.status().message().find("7399999999999999999") != std::string::npos);
  auto other_slot = store.ReadLastFrom("7300000000000000001", "standby_slot", 10s);
  REQUIRE_FALSE(other_slot.ok());
  CHECK(other_slot.status().message().find("'standby_slot'") != std::string::npos);
  CHECK(other_slot.status().message().find("'walrelay'") != std::string::npos);
}

TEST_CASE(
    "fencing: a second producer with the same transactional.id stops the first one's commits") {
  const std::string data = "eos.fencing.data";
  REQUIRE(Broker().CreateTopic(data, 1, 1).ok());
  const OffsetStore store(ClientProperties(), "eos.fencing.offsets",
                          SourceOffsetKey("fencing", "db1"));
  REQUIRE(store.EnsureTopic(1, 1, 10s).ok());
  auto old_producer = InitializedProducer("walrelay-fencing");
  Transaction(*old_producer, store, data, Values("before-fence-", 5), OffsetAt(0x1000), true);

  // The old producer is inside a transaction, its records written, when a standby takes over.
  RequireOk(old_producer->Begin());
  for (uint64_t i = 0; i < 3; ++i)
    RequireOk(old_producer->Produce(DataRecord(data, "open-at-fence"), i));
  RequireOk(old_producer->Flush(kTxnTimeout));
  auto standby = InitializedProducer("walrelay-fencing");

  // The old one wakes up and tries to finish its transaction.
  for (uint64_t i = 3; i < 5; ++i) (void)old_producer->Produce(DataRecord(data, "after-fence"), i);
  (void)old_producer->SendOffset(store.MakeRecord(OffsetAt(0x2000), 1));
  const TxnStatus commit = old_producer->Commit(kTxnTimeout);
  CHECK_FALSE(commit.ok());
  CHECK_MESSAGE(commit.kind == TxnErrorKind::kFenced, commit.status.ToString());
  MESSAGE("the fenced producer's commit: " << commit.status.ToString());
  CHECK(old_producer->Begin().kind == TxnErrorKind::kFenced);

  Transaction(*standby, store, data, {"standby"}, OffsetAt(0x3000), true);
  const auto committed = ReadCommittedOnce(data, 6);
  CHECK(committed.size() == 6);
  CHECK(std::count_if(committed.begin(), committed.end(),
                      [](const std::string& v) { return v.rfind("before-fence-", 0) == 0; }) == 5);
  CHECK(committed.back() == "standby");
  CHECK(std::count(committed.begin(), committed.end(), "open-at-fence") == 0);
  const auto uncommitted = ReadValues(data, "read_uncommitted");
  CHECK(std::count(uncommitted.begin(), uncommitted.end(), "after-fence") == 0);
  MESSAGE("data topic after the fence: read_committed sees "
          << committed.size() << ", read_uncommitted sees " << uncommitted.size());
  auto last = store.ReadLast(10s);
  REQUIRE_MESSAGE(last.ok(), last.status().ToString());
  REQUIRE(last->has_value());
  CHECK((*last)->lsn_commit == Lsn(0x3000));
}

}  // namespace walrelay
