// The relay's loop never waits on a connect attempt stuck in Kafka (relay/relay.h,
// relay/source_connector.h): against a real PostgreSQL and the mock Kafka cluster, an
// exactly-once relay whose transaction coordinator never answers initialising transactions
// (every InitProducerId is refused as COORDINATOR_NOT_AVAILABLE, which librdkafka retries for
// the call's whole 30 s) answers /healthz within 1 s, POST /restart within 2 s, and exits
// within 2 s of SIGTERM, each time while the attempt's Init waits. The same while a commit
// waits is eos_loop_waits_test.cc (the mock cluster cannot hold the offsets topic).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int16_t kInitProducerId = 22;  // the Kafka protocol's ApiKey

std::chrono::milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

// True while a walsender holds the slot: the relay's attempt has passed START_REPLICATION and
// waits in SlotTaken, initialising transactions.
bool SlotActive(RelayFixture& fx, const std::string& slot) {
  return fx.Value("SELECT active FROM pg_replication_slots WHERE slot_name = '" + slot + "'") ==
         "t";
}

// The walsender holding the slot ("" while none does).
std::string SlotHolder(RelayFixture& fx, const std::string& slot) {
  return fx.Value("SELECT coalesce(active_pid::text, '') FROM pg_replication_slots WHERE "
                  "slot_name = '" +
                  slot + "'");
}

}  // namespace

TEST_CASE("a connect attempt waiting on Kafka: /healthz within 1 s, POST /restart within 2 s, "
          "SIGTERM ends the process within 2 s") {
  RelayFixture fx;
  const std::string slot = "stuck";
  // With the slot present, exactly once reads nothing from Kafka before the slot is taken: the
  // attempt's first Kafka wait is initialising transactions.
  fx.Exec("SELECT pg_create_logical_replication_slot('" + slot + "', 'wal2json')");
  const std::vector<rd_kafka_resp_err_t> refusals(2000,
                                                  RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE);
  rd_kafka_mock_push_request_errors_array(fx.kafka().cluster(), kInitProducerId, refusals.size(),
                                          refusals.data());
  auto relay = fx.SpawnRelay(fx.WriteConfig(slot, {{"exactly.once.support", "required"},
                                                   {"offsets.storage.topic", "walrelay-offsets"},
                                                   {"offsets.storage.replication.factor", "1"},
                                                   {"slot.retry.delay.ms", "200"}}));
  const int port = RestPort(fx);
  const std::string restart = "/connectors/itest-" + slot + "/restart";

  REQUIRE_MESSAGE(Eventually([&] { return SlotActive(fx, slot); }, 20s), Log(fx));
  std::this_thread::sleep_for(500ms);  // well inside the Init, which waits 30 s
  REQUIRE(relay->Running());
  // Still inside the attempt's Init: it neither succeeded nor gave up.
  CHECK(Log(fx).find("initialised transactions") == std::string::npos);
  CHECK(Log(fx).find("retrying with backoff") == std::string::npos);

  auto started = Clock::now();
  Reply health = Http(port, "GET", "/healthz", {}, 1000ms);
  MESSAGE("/healthz during the Init: " << health.status << " after " << Since(started).count()
                                       << " ms");
  CHECK(health.status == 503);  // not streaming
  CHECK(Since(started) < 1000ms);

  const std::string first_holder = SlotHolder(fx, slot);
  started = Clock::now();
  Reply restarted = Http(port, "POST", restart, {}, 5000ms);
  const auto restart_took = Since(started);
  MESSAGE("POST /restart during the Init: " << restarted.status << " after " << restart_took.count()
                                            << " ms");
  CHECK(restarted.status == 204);
  CHECK(restart_took < 2000ms);
  started = Clock::now();
  health = Http(port, "GET", "/healthz", {}, 1000ms);
  CHECK(health.status == 503);
  CHECK(Since(started) < 1000ms);

  // The cancelled attempt lets go of its slot; the next one takes it (another walsender) and
  // waits in Init again.
  REQUIRE_MESSAGE(Eventually(
                      [&] {
                        const std::string holder = SlotHolder(fx, slot);
                        return !holder.empty() && holder != first_holder;
                      },
                      20s),
                  Log(fx));
  std::this_thread::sleep_for(500ms);
  REQUIRE(relay->Running());
  started = Clock::now();
  health = Http(port, "GET", "/healthz", {}, 1000ms);
  CHECK(health.status == 503);
  CHECK(Since(started) < 1000ms);

  started = Clock::now();
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(5000ms);
  const auto stop_took = Since(started);
  MESSAGE("SIGTERM during the Init: exit after " << stop_took.count() << " ms");
  REQUIRE_MESSAGE(code.ok(), Log(fx));
  CHECK(*code == 0);
  CHECK(stop_took < 2000ms);
  const std::string log = Log(fx);
  CHECK_MESSAGE(log.find("stopped before streaming slot 'stuck'") != std::string::npos, log);
  CHECK(log.find("initialised transactions") == std::string::npos);
}
