// The payments example as separate processes: the full chain through two walrelay relays, a
// consumer killed between its database commit and its offset commit, one killed inside its
// handler (its expired claim taken over), and `walrelay consumer-gc`.
#include <rapidjson/document.h>
#include <signal.h>

#include "consumer/pg_exec.h"
#include "consumer_fixture.h"

namespace walrelay::testing {
namespace {

class PaymentsFixture : public ConsumerFixture {
 public:
  PaymentsFixture() {
    Exec("CREATE DATABASE payments");
    payments_conninfo_ = pg().ConnInfo("payments");
    REQUIRE(kafka().CreateTopic("outbox.event.order", 1, 1).ok());
  }

  // Starts the example; its stdout and stderr go to a new file, returned in `log`.
  std::unique_ptr<devtools::ChildProcess> StartPayments(const std::vector<std::string>& extra,
                                                        std::string& log) {
    log = pg().base_dir() + "/payments-" + std::to_string(++runs_) + ".log";
    std::vector<std::string> argv = {
        WALRELAY_PAYMENTS_EXAMPLE, "--conninfo", payments_conninfo_, "--bootstrap-servers",
        kafka().bootstrap_servers(), "--init-schema",
        // A killed member must leave the group quickly.
        "--kafka", "session.timeout.ms=6000", "--kafka", "heartbeat.interval.ms=500", "--kafka",
        "fetch.wait.max.ms=50"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto child = devtools::ChildProcess::Spawn(argv, log);
    REQUIRE_MESSAGE(child.ok(), child.status().ToString());
    return std::move(child).value();
  }

  int PaymentsCount() { return std::stoi(PaymentsValue("SELECT count(*) FROM payments")); }
  // First column of the first row of `sql` in the payments database; "(null)" for NULL.
  std::string PaymentsValue(const std::string& sql) {
    auto conn = consumer::ConnectPg(payments_conninfo_, "the test");
    REQUIRE_MESSAGE(conn.ok(), conn.status().ToString());
    auto res = consumer::ExecPg(conn->get(), sql);
    REQUIRE_MESSAGE(res.ok(), res.status().ToString());
    REQUIRE(PQntuples(res->get()) > 0);
    return PQgetisnull(res->get(), 0, 0) ? "(null)" : PQgetvalue(res->get(), 0, 0);
  }

  const std::string& payments_conninfo() const { return payments_conninfo_; }

 private:
  std::string payments_conninfo_;
  int runs_ = 0;
};

const std::string kOrderId = "2b8e6c1e-0f1a-4d59-9b35-7a0c7f6a0001";

TEST_CASE("payments example: order outbox -> walrelay -> payments -> payments outbox -> walrelay") {
  PaymentsFixture f;
  std::string log;
  auto payments = f.StartPayments({}, log);
  // The example creates its tables; the second relay needs them before it starts.
  REQUIRE_MESSAGE(
      WaitUntil(
          [&] {
            return f.PaymentsValue("SELECT to_regclass('public.walrelay_consumer_keys')::text") !=
                   "(null)";
          },
          20s),
      devtools::ReadFile(log));

  auto orders_relay = f.StartRelay(f.WriteConfig("orders", {}));
  auto payments_relay = f.StartRelay(f.WriteConfig("payments", {{"database.dbname", "payments"}}));

  f.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('" + kOrderId +
         "', 'order', 'order-7', 'OrderCreated', '{\"orderId\": \"order-7\", \"amount\": 19.99}')");
  auto reader = f.Reader();
  auto out = reader->ReadAtLeast({"outbox.event.payment"}, 1, 60s);
  REQUIRE(out.ok());
  REQUIRE_MESSAGE(out->size() == 1, devtools::ReadFile(log) << reader->last_error());
  const auto& event = out->front();
  CHECK(*event.key == "order-7");
  rapidjson::Document doc;
  doc.Parse(event.value->c_str());
  REQUIRE(!doc.HasParseError());
  CHECK(std::string(doc["orderId"].GetString()) == "order-7");
  CHECK(std::string(doc["causationId"].GetString()) == kOrderId);
  CHECK(doc["amount"].GetDouble() == doctest::Approx(19.99));
  CHECK(HeaderOf(event, "id").size() == 36);  // the payments outbox row's own uuid

  // The same order event again, byte for byte as the relay wrote it (a relay restart would
  // repeat it): nothing new happens.
  auto orders = f.Reader();
  auto relayed = orders->ReadAtLeast({"outbox.event.order"}, 1, 30s);
  REQUIRE(relayed.ok());
  REQUIRE(relayed->size() == 1);
  f.producer().Send("outbox.event.order", kOrderId, *relayed->front().value, 0, "order-7");
  REQUIRE_MESSAGE(devtools::WaitForFileContains(log, "event " + kOrderId + ": duplicate", 30s),
                  devtools::ReadFile(log));
  CHECK(f.PaymentsCount() == 1);
  CHECK(reader->Poll(1500ms).empty());

  // An order event whose payload cannot be paid is dead-lettered, and the next one goes on.
  f.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
         "(gen_random_uuid(), 'order', 'order-8', 'OrderCreated', '{\"amount\": \"lots\"}'),"
         "(gen_random_uuid(), 'order', 'order-9', 'OrderCreated', '{\"amount\": 5}')");
  auto more = reader->ReadAtLeast({"outbox.event.payment"}, 1, 60s);
  REQUIRE(more.ok());
  REQUIRE(more->size() == 1);
  CHECK(*more->front().key == "order-9");
  auto dlq = reader->ReadAtLeast({"payments.dlq"}, 1, 20s);
  REQUIRE(dlq.ok());
  REQUIRE(dlq->size() == 1);
  CHECK(*dlq->front().key == "order-8");
  CHECK(HeaderOf(dlq->front(), "__walrelay.consumer.error.class") == "sqlstate:22P02");
  CHECK(f.PaymentsCount() == 2);

  REQUIRE(payments->Kill(SIGTERM).ok());
  auto code = payments->Wait(20s);
  REQUIRE(code.ok());
  CHECK(*code == 0);
}

TEST_CASE("payments example: killed after the database commit, before the offset commit") {
  PaymentsFixture f;
  f.producer().Send("outbox.event.order", kOrderId, "{\"amount\": 12.50}", 0, "order-1");

  std::string log;
  auto crashing = f.StartPayments({"--crash-after-commit"}, log);
  auto code = crashing->Wait(60s);
  REQUIRE_MESSAGE(code.ok(), devtools::ReadFile(log));
  CHECK(*code == 70);
  // The payment, its outbox row and the key committed together; the offset did not.
  CHECK(f.PaymentsCount() == 1);
  CHECK(f.PaymentsValue("SELECT count(*) FROM outbox WHERE type = 'PaymentCompleted'") == "1");
  CHECK(f.PaymentsValue("SELECT state || '/' || attempts FROM walrelay_consumer_keys") ==
        "COMPLETED/1");

  // Kafka delivers the record again; it is recognised and skipped.
  auto again = f.StartPayments({}, log);
  REQUIRE_MESSAGE(devtools::WaitForFileContains(log, "@0 event " + kOrderId + ": duplicate", 60s),
                  devtools::ReadFile(log));
  CHECK(f.PaymentsCount() == 1);
  CHECK(f.PaymentsValue("SELECT count(*) FROM outbox") == "1");
  REQUIRE(again->Kill(SIGTERM).ok());
  CHECK(again->Wait(20s).ok());
}

TEST_CASE("payments example: killed inside its handler, the expired claim is taken over") {
  PaymentsFixture f;
  f.producer().Send("outbox.event.order", kOrderId, "{\"amount\": 3}", 0, "order-2");

  std::string log;
  auto crashing = f.StartPayments({"--crash-in-handler", "--lease-ms", "3000"}, log);
  auto code = crashing->Wait(60s);
  REQUIRE_MESSAGE(code.ok(), devtools::ReadFile(log));
  CHECK(*code == 71);
  // The handler's writes died with its transaction; the claim it committed first remains.
  CHECK(f.PaymentsCount() == 0);
  CHECK(f.PaymentsValue("SELECT state || '/' || attempts || '/' || (locked_by IS NOT NULL) "
                        "FROM walrelay_consumer_keys") == "PENDING/1/true");

  auto again = f.StartPayments({"--lease-ms", "3000"}, log);
  REQUIRE_MESSAGE(devtools::WaitForFileContains(log, "event " + kOrderId + ": completed", 60s),
                  devtools::ReadFile(log));
  CHECK(devtools::ReadFile(log).find("took over from") != std::string::npos);
  CHECK(f.PaymentsCount() == 1);
  CHECK(f.PaymentsValue("SELECT state || '/' || attempts || '/' || (locked_by IS NULL) "
                        "FROM walrelay_consumer_keys") == "COMPLETED/2/true");
  REQUIRE(again->Kill(SIGTERM).ok());
  CHECK(again->Wait(20s).ok());
}

TEST_CASE("walrelay consumer-gc deletes expired keys and keeps secrets out of its errors") {
  ConsumerFixture f;
  f.Exec("INSERT INTO walrelay_consumer_keys (consumer_name, idempotency_key, state, expires_at) "
         "SELECT 'svc', 'old-' || i, 'COMPLETED', now() - interval '1 minute' "
         "FROM generate_series(1, 25) i");
  f.Exec("INSERT INTO walrelay_consumer_keys (consumer_name, idempotency_key, state, expires_at) "
         "VALUES ('svc', 'fresh', 'COMPLETED', now() + interval '1 day')");
  auto result = f.RunCommand({"consumer-gc", "--conninfo", f.pg().ConnInfo(), "--batch", "10"});
  auto& code = result.first;
  auto& out = result.second;
  CHECK_MESSAGE(code == 0, out);
  CHECK(out.find("deleted 25 expired keys from public.walrelay_consumer_keys in 3 batch(es)") !=
        std::string::npos);
  CHECK(f.Value("SELECT string_agg(idempotency_key, ',') FROM walrelay_consumer_keys") == "fresh");

  auto [bad_code, bad_out] = f.RunCommand(
      {"consumer-gc", "--conninfo", "host=127.0.0.1 port=1 user=gc password=hunter2-secret"});
  CHECK(bad_code == 3);
  CHECK(bad_out.find("127.0.0.1:1") != std::string::npos);
  CHECK(bad_out.find("hunter2") == std::string::npos);

  auto [missing_code, missing_out] =
      f.RunCommand({"consumer-gc", "--conninfo", f.pg().ConnInfo(), "--table", "nope.keys"});
  CHECK(missing_code != 0);
  CHECK(missing_out.find("nope.keys") != std::string::npos);
}

}  // namespace
}  // namespace walrelay::testing
