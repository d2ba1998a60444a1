// Transform plugins in the real `walrelay run` against PostgreSQL 15 (wal2json) and the mock
// Kafka cluster: the example plugins end to end, and a failing plugin under both error
// policies (stop without confirming, or dead-letter).
#include <rapidjson/document.h>

#include <algorithm>
#include <csignal>
#include <regex>
#include <set>

#include "relay_fixture.h"

using namespace walrelay;
using devtools::ConsumedRecord;
using walrelay::testing::RelayFixture;

namespace {

constexpr const char* kRouter = "io.debezium.transforms.outbox.EventRouter";

std::string EventId(int seq) {
  char id[40];
  std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", seq);
  return id;
}

// One outbox event of aggregate `type` (Order, Customer, ...), whose payload carries `seq`.
std::string InsertEvent(int seq, const std::string& type) {
  return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('" +
         EventId(seq) + "', '" + type + "', '" + type + "-" + std::to_string(seq) + "', '" + type +
         "Happened', jsonb_build_object('seq', " + std::to_string(seq) + "));";
}

std::string HeaderOf(const ConsumedRecord& r, const std::string& name) {
  for (const auto& h : r.headers)
    if (h.key == name) return h.value.value_or("(null)");
  return "(missing)";
}

// The router with the event type in an `eventType` header, then `extra` (plugin.path is the
// directory of the test plugins unless `extra` says otherwise).
std::map<std::string, std::string> RouterThen(std::map<std::string, std::string> extra) {
  std::map<std::string, std::string> config = {
      {"transforms.outbox.type", kRouter},
      {"transforms.outbox.table.fields.additional.placement", "type:header:eventType"},
      {"plugin.path", WALRELAY_TEST_PLUGIN_DIR}};
  for (const auto& [k, v] : extra) config[k] = v;
  return config;
}

// A chain whose test plugin `boom` fails every Shipment event and nothing else.
std::map<std::string, std::string> FailShipments(std::map<std::string, std::string> extra = {}) {
  std::map<std::string, std::string> config = RouterThen({
      {"transforms", "outbox,boom"},
      {"transforms.boom.type", "test_transform"},
      {"transforms.boom.action", "fail"},
      {"transforms.boom.predicate", "isShipment"},
      {"predicates", "isShipment"},
      {"predicates.isShipment.type", "TopicNameMatches"},
      {"predicates.isShipment.pattern", "outbox.event.Shipment"},
  });
  for (const auto& [k, v] : extra) config[k] = v;
  return config;
}

int Seq(const rapidjson::Value& payload) { return payload["seq"].GetInt(); }

}  // namespace

TEST_CASE("outbox -> filter.so -> cloudevents.so: filtered events arrive as CloudEvents") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig(
      "cloud",
      RouterThen({{"transforms", "outbox,noCustomers,ce"},
                  {"plugin.path", "/nonexistent," + std::string(WALRELAY_PLUGIN_DIR)},
                  // By name through plugin.path...
                  {"transforms.noCustomers.type", "filter"},
                  {"transforms.noCustomers.header", "eventType"},
                  {"transforms.noCustomers.values", "CustomerHappened"},
                  // ...and by path.
                  {"transforms.ce.type", std::string(WALRELAY_PLUGIN_DIR) + "/cloudevents.so"}})));
  const std::vector<std::string> types = {"Order", "Customer", "Shipment"};
  std::string sql = "BEGIN;";
  for (int seq = 1; seq <= 9; ++seq) sql += InsertEvent(seq, types[seq % 3]);
  fx.Exec(sql + "COMMIT;");
  const Lsn end = fx.CurrentWal();

  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast({"outbox.event.Order", "outbox.event.Shipment"}, 6,
                                     std::chrono::seconds(60));
  REQUIRE(records.ok());
  auto extra = reader->Poll(std::chrono::seconds(1));
  records->insert(records->end(), extra.begin(), extra.end());
  REQUIRE_MESSAGE(records->size() == 6, devtools::ReadFile(fx.log_path()));
  std::set<int> seqs;
  for (const ConsumedRecord& r : *records) {
    rapidjson::Document event;
    event.Parse(r.value.value_or("").c_str());
    REQUIRE_MESSAGE(!event.HasParseError(), r.value.value_or("(null)"));
    const int seq = Seq(event["data"]);
    const std::string& type = types[seq % 3];
    seqs.insert(seq);
    CHECK(r.topic == "outbox.event." + type);
    CHECK(r.key == type + "-" + std::to_string(seq));
    CHECK(std::string(event["specversion"].GetString()) == "1.0");
    CHECK(std::string(event["id"].GetString()) == EventId(seq));
    CHECK(std::string(event["source"].GetString()) == "/walrelay/itest-cloud");
    CHECK(std::string(event["type"].GetString()) == type + "Happened");
    CHECK(std::string(event["subject"].GetString()) == *r.key);
    CHECK(std::string(event["datacontenttype"].GetString()) == "application/json");
    CHECK(std::regex_match(event["time"].GetString(),
                           std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    CHECK(HeaderOf(r, "id") == EventId(seq));
    CHECK(HeaderOf(r, "content-type") == "application/cloudevents+json; charset=UTF-8");
  }
  CHECK(seqs == std::set<int>{2, 3, 5, 6, 8, 9});
  auto topics = reader->ListTopics();
  REQUIRE(topics.ok());
  CHECK(std::count(topics->begin(), topics->end(), "outbox.event.Customer") == 0);
  // Dropped records confirm like delivered ones.
  CHECK(fx.WaitConfirmed("cloud", end, std::chrono::seconds(20)) >= end);

  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(std::chrono::seconds(20));
  REQUIRE(code.ok());
  CHECK(*code == 0);
  const std::string log = devtools::ReadFile(fx.log_path());
  CHECK(log.find("loaded transform plugin 'filter'") != std::string::npos);
  CHECK(log.find("transform 'noCustomers' (filter): dropping records whose 'eventType' header") !=
        std::string::npos);
  CHECK(log.find("unknown configuration key") == std::string::npos);
}

TEST_CASE("a plugin failing a record stops the relay (exit 6) before the row is confirmed") {
  RelayFixture fx;
  const std::string config = fx.WriteConfig("boom", FailShipments());
  auto relay = fx.StartRelay(config);
  fx.Exec(InsertEvent(3, "Order"));  // passes: the predicate spares it
  auto reader = fx.Reader();
  REQUIRE(reader->ReadAtLeast({"outbox.event.Order"}, 1, std::chrono::seconds(30))->size() == 1);
  const Lsn before = fx.CurrentWal();
  fx.WaitConfirmed("boom", before, std::chrono::seconds(20));

  fx.Exec(InsertEvent(5, "Shipment"));
  auto code = relay->Wait(std::chrono::seconds(30));
  REQUIRE(code.ok());
  CHECK(*code == 6);
  const std::string log = devtools::ReadFile(fx.log_path());
  CHECK_MESSAGE(
      log.find("transform 'boom': plugin 'test_transform' (" +
               std::string(WALRELAY_TEST_PLUGIN_DIR) +
               "/test_transform.so) failed the record: refused by boom") != std::string::npos,
      log);
  std::smatch where;
  REQUIRE_MESSAGE(std::regex_search(log, where,
                                    std::regex("table public\\.outbox, event id '" + EventId(5) +
                                               "', LSN ([0-9A-F]+/[0-9A-F]+)\\)")),
                  log);
  const Lsn row = *Lsn::Parse(where[1].str());
  CHECK(row >= before);
  const Lsn confirmed = fx.ConfirmedFlush("boom");
  CHECK_MESSAGE(confirmed <= row, "confirmed " << confirmed.ToString() << " past the failed row at "
                                               << row.ToString());

  // Without the failing transform the same row is sent on restart: it was never confirmed.
  auto fixed = fx.StartRelay(fx.WriteConfig("boom", RouterThen({{"transforms", "outbox"}})));
  auto shipment = reader->ReadAtLeast({"outbox.event.Shipment"}, 1, std::chrono::seconds(30));
  REQUIRE(shipment.ok());
  REQUIRE(shipment->size() == 1);
  CHECK(HeaderOf(shipment->front(), "id") == EventId(5));
}

TEST_CASE("with errors.tolerance=all a record a plugin fails goes to the dead-letter topic") {
  RelayFixture fx;
  auto relay = fx.StartRelay(
      fx.WriteConfig("dlq", FailShipments({{"errors.tolerance", "all"},
                                           {"errors.deadletterqueue.topic.name", "plugin-dlq"}})));
  fx.Exec("BEGIN;" + InsertEvent(3, "Order") + InsertEvent(5, "Shipment") +
          InsertEvent(6, "Order") + "COMMIT;");
  const Lsn end = fx.CurrentWal();
  auto reader = fx.Reader();
  auto orders = reader->ReadAtLeast({"outbox.event.Order"}, 2, std::chrono::seconds(30));
  REQUIRE(orders.ok());
  CHECK(orders->size() == 2);
  auto dead = reader->ReadAtLeast({"plugin-dlq"}, 1, std::chrono::seconds(30));
  REQUIRE(dead.ok());
  REQUIRE_MESSAGE(dead->size() == 1, devtools::ReadFile(fx.log_path()));
  const ConsumedRecord& letter = dead->front();
  CHECK(HeaderOf(letter, "__connect.errors.stage") == "TRANSFORMATION");
  const std::string message = HeaderOf(letter, "__connect.errors.exception.message");
  CHECK_MESSAGE(message.find("transform 'boom': plugin 'test_transform'") != std::string::npos,
                message);
  CHECK(message.find("refused by boom") != std::string::npos);
  // The dead letter is the row as it came in: the change event, before any transform.
  CHECK(HeaderOf(letter, "__walrelay.errors.table") == "public.outbox");
  CHECK(letter.value.value_or("").find(EventId(5)) != std::string::npos);
  CHECK(fx.WaitConfirmed("dlq", end, std::chrono::seconds(20)) >= end);
  CHECK(relay->Running());
}

TEST_CASE("validate and run refuse a plugin that cannot be loaded, naming it and the reason") {
  RelayFixture fx;
  auto result = fx.RunCommand(
      {"validate", "--config",
       fx.WriteConfig("badplugin", RouterThen({{"transforms", "outbox,old"},
                                               {"transforms.old.type", "wrong_abi"}}))});
  auto& code = result.first;
  auto& out = result.second;
  CHECK(code == 2);
  CHECK_MESSAGE(
      out.find("PROBLEM: config error: transform 'old': plugin file '" +
               std::string(WALRELAY_TEST_PLUGIN_DIR) +
               "/wrong_abi.so' was built for transform ABI version 2") != std::string::npos,
      out);

  auto run = fx.RunCommand(
      {"run", "--config",
       fx.WriteConfig("badplugin", RouterThen({{"transforms", "outbox,typo"},
                                               {"transforms.typo.type", "filtre"}}))});
  auto& run_code = run.first;
  auto& run_out = run.second;
  CHECK(run_code == 2);
  CHECK_MESSAGE(run_out.find("'transforms.typo.type' is 'filtre', which is not a built-in "
                             "transform") != std::string::npos,
                run_out);
  CHECK(run_out.find("no file 'filtre.so' in 'plugin.path' (" +
                     std::string(WALRELAY_TEST_PLUGIN_DIR) + ")") != std::string::npos);
}
