// The outbox without a table, end to end against a real PostgreSQL 15 and librdkafka's mock
// cluster: events emitted with pg_logical_emit_message(true, ...) reach Kafka as the records the
// same events inserted into the outbox table give, through both plugins; rolled-back,
// non-transactional and excluded messages never do; bad content stops the relay without
// confirming it, or is dead-lettered by policy. (kill -9 mid-stream: broker_delivery_test.cc.)
#include <rapidjson/document.h>

#include <csignal>
#include <map>
#include <string>

#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using devtools::ConsumedRecord;
using namespace std::chrono_literals;

namespace {

const std::map<std::string, std::string> kMessageOutbox = {
    {"transforms", "decode,outbox"},
    {"transforms.decode.type",
     "io.debezium.connector.postgresql.transforms.DecodeLogicalDecodingMessageContent"},
    {"message.prefix.include.list", "outbox"},
};

std::vector<ConsumedRecord> ReadAll(devtools::TopicReader& reader,
                                    const std::vector<std::string>& topics, size_t expected) {
  auto records = reader.ReadAtLeast(topics, expected, 30s);
  REQUIRE(records.ok());
  auto extra = reader.Poll(1500ms);
  records->insert(records->end(), extra.begin(), extra.end());
  return std::move(records).value();
}

void Stop(devtools::ChildProcess& relay) {
  REQUIRE(relay.Kill(SIGTERM).ok());
  auto code = relay.Wait(20s);
  REQUIRE(code.ok());
  CHECK(*code == 0);
}

}  // namespace

TEST_CASE("logical decoding messages: transactional ones arrive as outbox events, once and in "
          "key order, through either plugin; rolled-back, non-transactional and excluded ones "
          "never do") {
  for (const std::string plugin : {"pgoutput", "wal2json"}) {
    SUBCASE(plugin.c_str()) {
      RelayFixture fx;
      fx.UsePlugin(plugin);
      auto relay = fx.StartRelay(fx.WriteConfig("msgs", kMessageOutbox));

      // Messages and outbox rows mixed: the same chain serves both.
      const int kTotal = 1500;
      int seq = 0;
      int messages = 0;
      auto next_event = [&] {
        ++seq;
        if (seq % 5 == 0) return InsertEvent(seq);
        ++messages;
        return EmitEvent(seq);
      };
      std::string sql;
      for (int i = 0; i < 200; ++i) {  // single-event transactions beside business writes
        sql += "BEGIN; INSERT INTO unrelated (filler) VALUES ('order " + std::to_string(i) + "');" +
               next_event() + "COMMIT;";
      }
      for (int t = 0; t < 20; ++t) {  // 15-event transactions
        sql += "BEGIN;";
        for (int i = 0; i < 15; ++i) sql += next_event();
        sql += "COMMIT;";
      }
      // Never relayed: a rolled-back transaction's message, a non-transactional message, and
      // a transactional message whose prefix is not included (seqs above kTotal).
      sql += "BEGIN;" + EmitEvent(kTotal + 1) + "ROLLBACK;";
      for (int repeat = 0; repeat < 50; ++repeat)  // refused 50 times, logged once
        sql += "SELECT pg_logical_emit_message(false, 'outbox', '{\"seq\": " +
               std::to_string(kTotal + 2) + "}');";
      sql += "BEGIN;" + EmitEvent(kTotal + 3, "audit") + "COMMIT;";
      fx.Exec(sql);
      sql = "BEGIN;";  // one transaction with the rest: 1,000 events, rows deleted again
      while (seq < kTotal) sql += next_event();
      sql += "DELETE FROM outbox; COMMIT;";
      fx.Exec(sql);
      const Lsn end = fx.CurrentWal();

      auto reader = fx.Reader();
      auto records = ReadAll(*reader, OutboxTopics(), kTotal);
      auto seen = CheckRecords(records);
      CHECK(records.size() == static_cast<size_t>(kTotal));
      CHECK(seen.size() == static_cast<size_t>(kTotal));
      for (const auto& entry : seen) {
        const auto& s = entry.first;
        const auto& n = entry.second;
        CHECK_MESSAGE(s <= kTotal, "seq " << s << " should never have been relayed");
        CHECK_MESSAGE(n == 1, "seq " << s << " seen " << n << " times");
      }
      const Lsn confirmed = fx.WaitConfirmed("msgs", end, 20s);
      CHECK_MESSAGE(confirmed >= end, confirmed.ToString() << " < " << end.ToString());

      const std::string metrics = Http(RestPort(fx), "GET", "/metrics").body;
      CHECK(Metric(metrics, "walrelay_logical_messages_total{outcome=\"relayed\"}") == messages);
      CHECK(Metric(metrics, "walrelay_logical_messages_total{outcome=\"filtered\"}") == 1);
      CHECK(Metric(metrics, "walrelay_logical_messages_total{outcome=\"non_transactional\"}") ==
            50);
      const std::string log = Log(fx);
      CHECK(Count(log, "refused a non-transactional logical decoding message with prefix "
                       "'outbox'") == 1);
      // Nothing reached the raw message topic: included messages were decoded.
      auto raw = fx.Reader()->ReadAtLeast({"itest.message"}, 1, 1s);
      CHECK((!raw.ok() || raw->empty()));
      Stop(*relay);
    }
  }
}

TEST_CASE("logical decoding messages without the decode transform go to <topic.prefix>.message "
          "as Debezium's message events") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  auto relay = fx.StartRelay(fx.WriteConfig("rawmsg", {}));  // the EventRouter only
  fx.Exec("BEGIN;" + EmitEvent(1) + "COMMIT;");
  auto records = ReadAll(*fx.Reader(), {"itest.message"}, 1);
  REQUIRE(records.size() == 1);
  const ConsumedRecord& r = records[0];
  CHECK(r.key == std::string(R"({"prefix":"outbox"})"));
  rapidjson::Document value;
  value.Parse(r.value->c_str());
  REQUIRE_FALSE(value.HasParseError());
  CHECK(std::string(value["op"].GetString()) == "m");
  CHECK(std::string(value["message"]["prefix"].GetString()) == "outbox");
  CHECK(std::string(value["source"]["db"].GetString()) == "postgres");
  CHECK(std::string(value["message"]["content"].GetString()).size() > 100);  // base64 JSON
  Stop(*relay);
}

TEST_CASE("a message whose content is not a JSON object stops the relay (exit 6) before its LSN "
          "is confirmed; with a dead-letter topic it is dead-lettered and the stream goes on") {
  RelayFixture fx;
  fx.UsePlugin("pgoutput");
  auto relay = fx.StartRelay(fx.WriteConfig("badmsg", kMessageOutbox));
  fx.Exec("BEGIN;" + EmitEvent(1) + "COMMIT;");
  const Lsn before_bad = fx.WaitConfirmed("badmsg", fx.CurrentWal(), 20s);
  fx.Exec("BEGIN; SELECT pg_logical_emit_message(true, 'outbox', 'card 4111 not json'); COMMIT;");
  fx.Exec("BEGIN;" + EmitEvent(2) + "COMMIT;");
  const Lsn end = fx.CurrentWal();

  auto code = relay->Wait(30s);
  REQUIRE(code.ok());
  CHECK(*code == 6);
  const std::string log = Log(fx);
  CHECK(log.find("logical decoding message with prefix 'outbox' at LSN") != std::string::npos);
  CHECK(log.find("is not a JSON object") != std::string::npos);
  CHECK(log.find("4111") == std::string::npos);  // content stays out of the log
  CHECK(fx.ConfirmedFlush("badmsg") == before_bad);

  fx.WaitSlotFree("badmsg");
  std::map<std::string, std::string> tolerant = kMessageOutbox;
  tolerant["errors.tolerance"] = "all";
  tolerant["errors.deadletterqueue.topic.name"] = "dlq";
  relay = fx.StartRelay(fx.WriteConfig("badmsg", tolerant));
  auto dead = ReadAll(*fx.Reader(), {"dlq"}, 1);
  REQUIRE(dead.size() == 1);
  // The dead letter is the message as it came in: Debezium's message event.
  CHECK(dead[0].key == std::string(R"({"prefix":"outbox"})"));
  CHECK(dead[0].value->find("\"op\":\"m\"") != std::string::npos);
  auto events = ReadAll(*fx.Reader(), OutboxTopics(), 2);
  std::map<int, int> seen = CheckRecords(events);
  CHECK(seen.count(2) == 1);
  CHECK(fx.WaitConfirmed("badmsg", end, 20s) >= end);
  Stop(*relay);
}
