// `walrelay demo`: the first run for a newcomer. A throwaway PostgreSQL and Kafka (librdkafka's
// mock cluster by default, or a real Apache Kafka broker), the outbox table from
// docs/outbox.sql, the relay, a few sample events, and every Kafka record printed as a consumer
// sees it. Everything is removed afterwards. With --polling the relay reads the outbox table by
// polling it (source.mode=polling, docs/polling.md) instead of a replication slot.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "cli/commands.h"
#include "cli/outbox_sql.h"
#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "devtools/kafka_broker.h"
#include "devtools/mock_kafka.h"
#include "devtools/pg_sandbox.h"
#include "devtools/topic_reader.h"
#include "relay/running_relay.h"

namespace walrelay {
namespace {

void Say(const std::string& line) {
  std::printf("\n== %s\n", line.c_str());
  std::fflush(stdout);
}

int Fail(const Status& status) {
  std::fprintf(stderr, "demo failed: %s\n", status.ToString().c_str());
  return ExitCodeFor(status);
}

}  // namespace

int DemoCommand(int events, bool real_broker, bool polling) {
  Say("starting a throwaway PostgreSQL (wal_level=logical; pgoutput is built in)");
  auto pg = devtools::PgSandbox::Start();
  if (!pg.ok()) return Fail(pg.status());
  std::printf("PostgreSQL on 127.0.0.1:%d, data in %s\n", (*pg)->port(), (*pg)->data_dir().c_str());
  if (Status st = (*pg)->Exec(kOutboxSql); !st.ok()) return Fail(st);
  if (polling) {
    if (Status st = (*pg)->Exec(kOutboxPollingSql); !st.ok()) return Fail(st);
  }

  std::unique_ptr<devtools::MockKafka> mock;
  std::unique_ptr<devtools::KafkaBroker> apache;
  std::string bootstrap_servers;
  if (real_broker) {
    Say("starting Apache Kafka " + devtools::KafkaBroker::Version() + " (KRaft, one node)");
    auto started = devtools::KafkaBroker::Start();
    if (!started.ok()) return Fail(started.status());
    apache = std::move(started).value();
    bootstrap_servers = apache->bootstrap_servers();
    std::printf("started in %.1f s\n", apache->start_seconds());
  } else {
    Say("starting librdkafka's mock Kafka cluster (in memory, not a real broker)");
    auto started = devtools::MockKafka::Start(1);
    if (!started.ok()) return Fail(started.status());
    mock = std::move(started).value();
    bootstrap_servers = mock->bootstrap_servers();
  }
  std::printf("bootstrap.servers=%s\n", bootstrap_servers.c_str());

  const std::string config_json = R"({
  "name": "demo-outbox",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.hostname": "127.0.0.1",
    "database.port": ")" + std::to_string((*pg)->port()) +
                                  R"(",
    "database.user": "postgres",
    "database.dbname": "postgres",
    "plugin.name": "pgoutput",
    "slot.name": "walrelay_demo",)" +
                                  std::string(polling ? R"(
    "source.mode": "polling",
    "polling.interval.ms": "100",)"
                                                      : "") +
                                  R"(
    "table.include.list": "public.outbox",
    "topic.prefix": "demo",
    "status.update.interval.ms": "500",
    "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "transforms.outbox.table.fields.additional.placement": "type:header:eventType",
    "kafka.bootstrap.servers": ")" +
                                  bootstrap_servers + R"("
  }
})";
  Say("connector config (the same JSON you would POST to Kafka Connect)");
  std::printf("%s\n", config_json.c_str());
  auto config = ParseConnectorConfig(config_json, "demo config");
  if (!config.ok()) return Fail(config.status());
  auto settings = ParseRelaySettings(*config);
  if (!settings.ok()) return Fail(settings.status());

  Say("starting the relay");
  boost::asio::io_context io(1);
  auto built = CreateRelay(std::move(settings).value(), io);
  if (!built.ok()) return Fail(built.status());
  RunningRelay& relay = **built;
  Status relay_status;
  std::thread relay_thread([&] { relay_status = relay.Run(); });
  auto stop_relay = [&] {
    relay.RequestStop();
    relay_thread.join();
  };
  auto streaming = [&relay] { return relay.state() == RelayState::kStreaming; };
  for (int i = 0; i < 300 && !streaming() && relay_thread.joinable(); ++i) {
    if (!relay_status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!streaming()) {
    stop_relay();
    return Fail(relay_status.ok() ? Status::Internal("the relay did not start") : relay_status);
  }

  // A slot keeps deleted rows' inserts, so apps may delete at once; a poller needs the rows, and
  // deletes them itself once Kafka acknowledged their records.
  Say("inserting " + std::to_string(events) + " outbox events" +
      (polling ? " (the relay deletes each row once Kafka acknowledged its record)"
               : " (and deleting them, as apps do)"));
  const char* kinds[][2] = {
      {"Order", "OrderCreated"}, {"Customer", "CustomerRegistered"}, {"Order", "OrderPaid"}};
  std::set<std::string> topics;
  std::string sql = "BEGIN;";
  for (int i = 0; i < events; ++i) {
    const auto& kind = kinds[i % 3];
    const std::string aggregate_id =
        std::string(kind[0]) == "Order" ? "order-" + std::to_string(1 + i % 2) : "customer-7";
    topics.insert(std::string("outbox.event.") + kind[0]);
    sql += "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (" +
           std::string("gen_random_uuid(), '") + kind[0] + "', '" + aggregate_id + "', '" +
           kind[1] + "', jsonb_build_object('seq', " + std::to_string(i + 1) +
           ", 'note', 'événement n°" + std::to_string(i + 1) + "', 'amount', 19.99));";
  }
  sql += polling ? "COMMIT;" : "DELETE FROM outbox; COMMIT;";
  if (Status st = (*pg)->Exec(sql); !st.ok()) {
    stop_relay();
    return Fail(st);
  }
  auto end_lsn = (*pg)->QueryValue("SELECT pg_current_wal_lsn()::text");

  Say("records in Kafka, read back with a consumer");
  auto reader = devtools::TopicReader::Create(bootstrap_servers);
  if (!reader.ok()) {
    stop_relay();
    return Fail(reader.status());
  }
  auto records = (*reader)->ReadAtLeast({topics.begin(), topics.end()}, static_cast<size_t>(events),
                                        std::chrono::seconds(30));
  if (!records.ok()) {
    stop_relay();
    return Fail(records.status());
  }
  for (const auto& r : *records) std::printf("%s\n", devtools::FormatRecord(r).c_str());
  std::fflush(stdout);

  Say("summary");
  if (polling) {
    // The rows are deleted only after Kafka acknowledged their records; show it happening.
    auto left = (*pg)->QueryValue("SELECT count(*)::text FROM outbox");
    for (int i = 0; i < 100 && left.ok() && *left != "0"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      left = (*pg)->QueryValue("SELECT count(*)::text FROM outbox");
    }
    stop_relay();
    std::printf("%zu of %d events arrived; rows left in the outbox table: %s (each deleted once "
                "Kafka acknowledged its record)\n",
                records->size(), events, left.ok() ? left->c_str() : "?");
  } else {
    // The slot advances only after Kafka acknowledged the transaction; show it happening.
    Lsn target;
    if (end_lsn.ok()) target = Lsn::Parse(*end_lsn).ok() ? *Lsn::Parse(*end_lsn) : Lsn();
    for (int i = 0; i < 100 && relay.confirmed_lsn() < target; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop_relay();
    auto slot_lsn =
        (*pg)->QueryValue("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE "
                          "slot_name='walrelay_demo'");
    std::printf("%zu of %d events arrived; slot walrelay_demo confirmed_flush_lsn = %s "
                "(WAL end after the inserts was %s)\n",
                records->size(), events, slot_lsn.ok() ? slot_lsn->c_str() : "?",
                end_lsn.ok() ? end_lsn->c_str() : "?");
  }
  if (!relay_status.ok()) return Fail(relay_status);
  if (records->size() < static_cast<size_t>(events)) {
    return Fail(Status::Internal("only " + std::to_string(records->size()) + " of " +
                                 std::to_string(events) + " events arrived"));
  }
  std::printf("demo finished; the throwaway PostgreSQL and Kafka are being removed\n");
  return kExitOk;
}

}  // namespace walrelay
