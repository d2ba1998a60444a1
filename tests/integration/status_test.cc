// The REST API, /metrics and /healthz of a running relay, against a real PostgreSQL and the
// mock Kafka cluster: every endpoint and its error shapes, metrics that agree with
// pg_replication_slots, pause holding delivery and resume catching up, restart reconnecting,
// a standby shown as UNASSIGNED, and /healthz following the replication connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rapidjson/document.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>

#include "common/logging.h"
#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "outbox_events.h"
#include "relay_fixture.h"
#include "rest_client.h"
#include "status/metrics.h"

using namespace walrelay;
using namespace walrelay::testing;

namespace {

constexpr const char* kPassword = "pw-Zq81-never-shown";

double SumFamily(const std::string& text, const std::string& family) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) == 0) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

std::map<std::string, std::string> RestConfig() {
  return {{"listeners", "http://127.0.0.1:0"}, {"database.password", kPassword}};
}

}  // namespace

TEST_CASE("/metrics right after start: labelled counters are exported at 0 for known labels") {
  RelayFixture fx;
  auto config = RestConfig();
  config["errors.tolerance"] = "all";
  config["errors.deadletterqueue.topic.name"] = "walrelay-dlq";
  auto relay = fx.StartRelay(fx.WriteConfig("zeros", config));
  const std::string metrics = Http(RestPort(fx), "GET", "/metrics").body;
  // rate() and alerts on these need a sample before the first event.
  CHECK_MESSAGE(Metric(metrics, "walrelay_records_failed_total{stage=\"transform\"}") == 0,
                metrics);
  CHECK(Metric(metrics, "walrelay_records_failed_total{stage=\"produce\"}") == 0);
  CHECK(Metric(metrics, "walrelay_source_records_total{table=\"public.outbox\"}") == 0);
  CHECK(Metric(metrics, "walrelay_records_acked_total{topic=\"walrelay-dlq\"}") == 0);
  CHECK(relay->Running());
}

TEST_CASE("REST /config hides values from ${env:} and ${file:} and secret-named plugin keys") {
  RelayFixture fx;
  const std::string prefix_file = fx.pg().base_dir() + "/topic_prefix";
  std::ofstream(prefix_file) << "prefix-Fq72\n";
  ::setenv("WALRELAY_TEST_DB_USER", "postgres", 1);
  auto config = RestConfig();
  config["database.user"] = "${env:WALRELAY_TEST_DB_USER}";
  config["topic.prefix"] = "${file:" + prefix_file + "}";
  for (const char* word : {"passphrase", "token", "secret", "credentials"})
    config[std::string("transforms.outbox.vault.") + word] = std::string("plugin-") + word + "-Hx4";
  auto relay = fx.StartRelay(fx.WriteConfig("masked", config));
  const int port = RestPort(fx);
  for (const std::string path : {"/connectors/itest-masked/config", "/connectors/itest-masked"}) {
    const Reply r = Http(port, "GET", path);
    CHECK(r.status == 200);
    CHECK_MESSAGE(r.body.find("\"database.user\":\"[hidden]\"") != std::string::npos, r.body);
    CHECK(r.body.find("\"topic.prefix\":\"[hidden]\"") != std::string::npos);
    CHECK(r.body.find("prefix-Fq72") == std::string::npos);
    CHECK(r.body.find("\"transforms.outbox.vault.passphrase\":\"[hidden]\"") != std::string::npos);
    CHECK(r.body.find("-Hx4") == std::string::npos);
    CHECK(r.body.find(kPassword) == std::string::npos);
    // Values neither secret-named nor from a provider stay readable.
    CHECK(r.body.find("\"slot.name\":\"masked\"") != std::string::npos);
    CHECK(r.body.find("\"database.dbname\":\"postgres\"") != std::string::npos);
  }
  CHECK(relay->Running());
}

TEST_CASE("REST API: Kafka Connect shapes, masked config, errors, metrics match the slot") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("rest", RestConfig()));
  const int port = RestPort(fx);
  std::string all_bodies;
  auto get = [&](const std::string& method, const std::string& path) {
    Reply r = Http(port, method, path);
    all_bodies += r.body;
    return r;
  };

  Reply r = get("GET", "/");
  CHECK(r.status == 200);
  CHECK(r.body == std::string("{\"version\":\"") + WALRELAY_VERSION + "\"}");
  r = get("GET", "/connectors");
  CHECK(r.status == 200);
  CHECK(r.body == "[\"itest-rest\"]");
  r = get("GET", "/connectors/itest-rest");
  CHECK(r.status == 200);
  CHECK(r.body.find("\"name\":\"itest-rest\",\"config\":{") == 1);
  CHECK(r.body.find("\"tasks\":[{\"connector\":\"itest-rest\",\"task\":0}],\"type\":\"source\"}") !=
        std::string::npos);
  r = get("GET", "/connectors/itest-rest/config");
  CHECK(r.status == 200);
  CHECK(r.body.find("\"database.password\":\"[hidden]\"") != std::string::npos);
  CHECK(r.body.find("\"slot.name\":\"rest\"") != std::string::npos);
  const std::string worker = "127.0.0.1:" + std::to_string(port);
  r = get("GET", "/connectors/itest-rest/status");
  CHECK(r.status == 200);
  // Kafka Connect's fields, then walrelay's slot health (docs/operations.md).
  CHECK(r.body.rfind(
            "{\"name\":\"itest-rest\",\"connector\":{\"state\":\"RUNNING\",\"worker_id\":\"" +
                worker + "\"},\"tasks\":[{\"id\":0,\"state\":\"RUNNING\",\"worker_id\":\"" +
                worker + "\"}],\"type\":\"source\",\"slot\":{\"name\":\"rest\"",
            0) == 0);
  r = get("GET", "/connectors/itest-rest/tasks/0/status");
  CHECK(r.status == 200);
  CHECK(r.body == "{\"id\":0,\"state\":\"RUNNING\",\"worker_id\":\"" + worker + "\"}");
  r = get("GET", "/healthz");
  CHECK(r.status == 200);
  CHECK(r.body == "{\"status\":\"UP\",\"state\":\"RUNNING\"}");

  // Errors in Kafka Connect's shape.
  r = get("GET", "/connectors/other/status");
  CHECK(r.status == 404);
  CHECK(r.body == "{\"error_code\":404,\"message\":\"Connector other not found\"}");
  r = get("GET", "/nowhere");
  CHECK(r.status == 404);
  CHECK(r.body == "{\"error_code\":404,\"message\":\"HTTP 404 Not Found\"}");
  r = get("GET", "/connectors/itest-rest/tasks/3/status");
  CHECK(r.status == 404);
  CHECK(r.body.find("\"error_code\":404") != std::string::npos);
  for (const auto& route :
       std::vector<std::pair<std::string, std::string>>{{"DELETE", "/connectors/itest-rest"},
                                                        {"POST", "/connectors/itest-rest/status"},
                                                        {"GET", "/connectors/itest-rest/pause"},
                                                        {"GET", "/connectors/itest-rest/restart"},
                                                        {"POST", "/metrics"}}) {
    const auto& method = route.first;
    const auto& path = route.second;
    r = get(method, path);
    CHECK_MESSAGE(r.status == 405, method << " " << path);
    CHECK(r.body.find("{\"error_code\":405,\"message\":\"HTTP 405 Method Not Allowed") == 0);
  }

  std::string sql;
  for (int s = 1; s <= 30; ++s) sql += "BEGIN;" + InsertEvent(s) + "COMMIT;";
  fx.Exec(sql);
  const Lsn target = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("rest", target, std::chrono::seconds(20)) >= target);
  std::string metrics;
  // The gauge is what the relay last sent; the slot shows it once the server has read it.
  const bool agree = Eventually(
      [&] {
        metrics = get("GET", "/metrics").body;
        auto gauge = Metric(metrics, "walrelay_confirmed_flush_lsn");
        return gauge && static_cast<uint64_t>(*gauge) == fx.ConfirmedFlush("rest").value();
      },
      std::chrono::seconds(10));
  CHECK_MESSAGE(agree, metrics);
  CHECK(metrics.find("# TYPE walrelay_source_records_total counter\n") != std::string::npos);
  CHECK(metrics.find("# TYPE walrelay_records_acked_total counter\n") != std::string::npos);
  CHECK(metrics.find("# TYPE walrelay_records_failed_total counter\n") != std::string::npos);
  CHECK(metrics.find("# TYPE walrelay_dlq_records_total counter\n") != std::string::npos);
  CHECK(metrics.find("# TYPE walrelay_replication_lag_seconds gauge\n") != std::string::npos);
  CHECK(Metric(metrics, "walrelay_source_records_total{table=\"public.outbox\"}") == 30);
  CHECK(SumFamily(metrics, "walrelay_records_acked_total") == 30);
  CHECK(Metric(metrics, "walrelay_records_acked_total{topic=\"outbox.event.Order\"}") == 10);
  CHECK(SumFamily(metrics, "walrelay_records_failed_total") == 0);
  CHECK(Metric(metrics, "walrelay_dlq_records_total") == 0);
  CHECK(Metric(metrics, "walrelay_inflight_records") == 0);
  CHECK(Metric(metrics, "walrelay_inflight_bytes") == 0);
  CHECK(Metric(metrics, "walrelay_replication_lag_seconds") == 0);
  CHECK(Metric(metrics, "walrelay_reconnects_total") == 0);
  CHECK(Metric(metrics, "walrelay_up") == 1);
  CHECK(Metric(metrics,
               std::string("walrelay_info{connector=\"itest-rest\",slot=\"rest\",version=\"") +
                   WALRELAY_VERSION + "\"}") == 1);
  const auto received = Metric(metrics, "walrelay_received_lsn");
  REQUIRE(received);
  CHECK(static_cast<uint64_t>(*received) >= fx.ConfirmedFlush("rest").value() - 4096);
  CHECK(*received > 0);

  // A second relay on the same slot is a standby: UNASSIGNED, and healthy.
  auto standby_log = fx.log_path();
  auto standby = fx.SpawnRelay(fx.WriteConfig("rest", RestConfig()));
  REQUIRE(devtools::WaitForFileContains(fx.log_path(), "standby:", std::chrono::seconds(20)));
  const int standby_port = RestPort(fx);
  r = Http(standby_port, "GET", "/connectors/itest-rest/status");
  all_bodies += r.body;
  CHECK(r.body.find("\"connector\":{\"state\":\"UNASSIGNED\"") != std::string::npos);
  r = Http(standby_port, "GET", "/healthz");
  all_bodies += r.body;
  CHECK(r.status == 200);
  CHECK(r.body == "{\"status\":\"UP\",\"state\":\"UNASSIGNED\"}");
  r = Http(standby_port, "GET", "/metrics");
  CHECK(Metric(r.body, "walrelay_up") == 0);
  CHECK(Metric(r.body, "walrelay_standby") == 1);

  CHECK(all_bodies.find(kPassword) == std::string::npos);
  CHECK(devtools::ReadFile(standby_log).find(kPassword) == std::string::npos);
  CHECK(devtools::ReadFile(fx.log_path()).find(kPassword) == std::string::npos);
  CHECK(relay->Running());
}

TEST_CASE("REST API: pause holds delivery, resume catches up, restart reconnects") {
  RelayFixture fx;
  auto config = RestConfig();
  config["log.format"] = "json";
  config["log.progress.interval.ms"] = "300";
  auto relay = fx.StartRelay(fx.WriteConfig("pause", config));
  const int port = RestPort(fx);
  fx.Exec("BEGIN;" + InsertEvent(1) + "COMMIT;");
  const Lsn first = fx.CurrentWal();
  REQUIRE(fx.WaitConfirmed("pause", first, std::chrono::seconds(20)) >= first);

  Reply r = Http(port, "PUT", "/connectors/itest-pause/pause");
  CHECK(r.status == 202);
  r = Http(port, "GET", "/connectors/itest-pause/status");
  CHECK(r.body.find("\"connector\":{\"state\":\"PAUSED\"") != std::string::npos);
  CHECK(r.body.find("\"tasks\":[{\"id\":0,\"state\":\"PAUSED\"") != std::string::npos);
  r = Http(port, "GET", "/healthz");
  CHECK(r.status == 200);
  CHECK(r.body == "{\"status\":\"UP\",\"state\":\"PAUSED\"}");

  std::string sql;
  for (int s = 2; s <= 20; ++s) sql += "BEGIN;" + InsertEvent(s) + "COMMIT;";
  fx.Exec(sql);
  const Lsn target = fx.CurrentWal();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  // Nothing new is produced or confirmed, but the replication connection stays up.
  CHECK(fx.ConfirmedFlush("pause") < target);
  CHECK(fx.Value("SELECT active::text FROM pg_replication_slots WHERE slot_name='pause'") ==
        "true");
  std::string metrics = Http(port, "GET", "/metrics").body;
  CHECK(Metric(metrics, "walrelay_source_records_total{table=\"public.outbox\"}") == 1);
  CHECK(Metric(metrics, "walrelay_paused") == 1);
  CHECK(SumFamily(metrics, "walrelay_records_acked_total") == 1);
  {
    // Seq 1 went to the Customer topic; while paused nothing else arrives anywhere.
    auto reader = fx.Reader();
    auto before = reader->ReadAtLeast(OutboxTopics(), 2, std::chrono::seconds(2));
    REQUIRE(before.ok());
    CHECK(before->size() == 1);
  }

  r = Http(port, "PUT", "/connectors/itest-pause/resume");
  CHECK(r.status == 202);
  CHECK(fx.WaitConfirmed("pause", target, std::chrono::seconds(20)) >= target);
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast(OutboxTopics(), 20, std::chrono::seconds(20));
  REQUIRE(records.ok());
  auto seen = CheckRecords(*records);
  for (int s = 1; s <= 20; ++s) CHECK_MESSAGE(seen.count(s) == 1, "missing seq " << s);
  r = Http(port, "GET", "/connectors/itest-pause/status");
  CHECK(r.body.find("\"connector\":{\"state\":\"RUNNING\"") != std::string::npos);

  r = Http(port, "POST", "/connectors/itest-pause/restart");
  CHECK(r.status == 204);
  REQUIRE(Eventually(
      [&] {
        const std::string log = devtools::ReadFile(fx.log_path());
        return log.find("streaming slot") != log.rfind("streaming slot");
      },
      std::chrono::seconds(10)));
  fx.Exec("BEGIN;" + InsertEvent(21) + "COMMIT;");
  const Lsn last = fx.CurrentWal();
  CHECK(fx.WaitConfirmed("pause", last, std::chrono::seconds(20)) >= last);
  metrics = Http(port, "GET", "/metrics").body;
  CHECK(Metric(metrics, "walrelay_reconnects_total") == 1);
  CHECK(Metric(metrics, "walrelay_source_records_total{table=\"public.outbox\"}") >= 21);
  CHECK(relay->Running());

  // log.format=json: every line is one JSON object with the documented fields, and progress
  // lines came at log.progress.interval.ms, showing the pause.
  REQUIRE(relay->Kill(SIGTERM).ok());
  REQUIRE(relay->Wait(std::chrono::seconds(20)).ok());
  std::istringstream log(devtools::ReadFile(fx.log_path()));
  int lines = 0;
  int progress = 0;
  bool paused_progress = false;
  for (std::string line; std::getline(log, line);) {
    ++lines;
    rapidjson::Document doc;
    doc.Parse(line.c_str());
    REQUIRE_MESSAGE(!doc.HasParseError(), line);
    REQUIRE(doc.IsObject());
    CHECK(doc.MemberCount() == 4);
    REQUIRE(doc.HasMember("time"));
    CHECK(std::regex_match(doc["time"].GetString(),
                           std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    CHECK(doc.HasMember("level"));
    CHECK(std::string(doc["logger"].GetString()) == "walrelay");
    const std::string message = doc["message"].GetString();
    if (message.rfind("progress: ", 0) == 0) {
      ++progress;
      CHECK(message.find(" records/s read, ") != std::string::npos);
      CHECK(message.find(", lag ") != std::string::npos);
      CHECK(message.find(", confirmed LSN ") != std::string::npos);
      paused_progress = paused_progress || message.find(", PAUSED") != std::string::npos;
    }
  }
  CHECK(lines > 5);
  CHECK(progress >= 5);
  CHECK(paused_progress);
}

TEST_CASE("/healthz answers 503 while PostgreSQL is away and 200 once it is back") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("health", {{"listeners", "http://127.0.0.1:0"},
                                                       {"log.level", "debug"},
                                                       {"reconnect.backoff.initial.ms", "100"},
                                                       {"reconnect.backoff.max.ms", "300"}}));
  const int port = RestPort(fx);
  CHECK(Http(port, "GET", "/healthz").status == 200);
  REQUIRE(fx.pg().Stop().ok());
  Reply r;
  CHECK(Eventually([&] { return (r = Http(port, "GET", "/healthz")).status == 503; },
                   std::chrono::seconds(10)));
  CHECK(r.body.find("{\"status\":\"DOWN\",\"state\":\"RUNNING\",\"reason\":\"no replication "
                    "connection") == 0);
  CHECK(Metric(Http(port, "GET", "/metrics").body, "walrelay_up") == 0);
  REQUIRE(fx.pg().Restart().ok());
  CHECK(Eventually([&] { return Http(port, "GET", "/healthz").status == 200; },
                   std::chrono::seconds(15)));
  CHECK(Metric(Http(port, "GET", "/metrics").body, "walrelay_reconnects_total") == 1);
  CHECK(relay->Running());
  // log.level=debug took effect.
  CHECK(devtools::ReadFile(fx.log_path()).find(" debug confirmed LSN ") != std::string::npos);
}

TEST_CASE("listeners, log.level, log.format: wrong values are configuration errors") {
  RelayFixture fx;
  auto [code, out] = fx.RunCommand(
      {"run", "--config", fx.WriteConfig("badlisten", {{"listeners", "ftp://127.0.0.1:0"}})});
  CHECK(code == 2);
  CHECK(out.find("'listeners' must be http://host:port or https://host:port") != std::string::npos);
  std::tie(code, out) =
      fx.RunCommand({"run", "--config", fx.WriteConfig("badlevel", {{"log.level", "loud"}})});
  CHECK(code == 2);
  CHECK(out.find("'log.level'") != std::string::npos);
  std::tie(code, out) =
      fx.RunCommand({"run", "--config", fx.WriteConfig("badformat", {{"log.format", "xml"}})});
  CHECK(code == 2);
  CHECK(out.find("'log.format'") != std::string::npos);
}

TEST_CASE(
    "kafka.* overrides that weaken acknowledgements: validate and run exit 2 naming the key") {
  RelayFixture fx;
  const std::string weak = fx.WriteConfig("weakacks", {{"kafka.acks", "1"}});
  for (const char* command : {"validate", "run"}) {
    auto result = fx.RunCommand({command, "--config", weak});
    auto& code = result.first;
    auto& out = result.second;
    CHECK_MESSAGE(code == 2, command << ": " << out);
    CHECK_MESSAGE(out.find("'kafka.acks'") != std::string::npos, out);
  }
  // librdkafka itself wants acks=all while idempotence is on, so both go together.
  auto result =
      fx.RunCommand({"validate", "--config",
                     fx.WriteConfig("weakacks", {{"kafka.acks", "1"},
                                                 {"kafka.enable.idempotence", "false"},
                                                 {"producer.durability.checks", "false"}})});
  auto& code = result.first;
  auto& out = result.second;
  CHECK_MESSAGE(code == 0, out);
}

TEST_CASE("JSON log lines: messages are escaped and always valid UTF-8") {
  CHECK(JsonEscape("plain") == "plain");
  CHECK(JsonEscape("a\"b\\c\nd\te\r") == "a\\\"b\\\\c\\nd\\te\\r");
  CHECK(JsonEscape(std::string("\x01\x1f", 2)) == "\\u0001\\u001f");
  CHECK(JsonEscape("ünï €") == "ünï €");
  CHECK(JsonEscape("bad \xff\xc3(") == "bad \xEF\xBF\xBD\xEF\xBF\xBD(");
}

TEST_CASE("listeners: parsed as Kafka Connect writes it, loopback by default") {
  auto parse = [](const std::string& listeners) {
    std::string json = R"({"name": "n", "config": {"database.hostname": "h", "database.user": "u",
        "database.dbname": "d", "topic.prefix": "p", "kafka.bootstrap.servers": "k:9092")";
    if (!listeners.empty()) json += R"(, "listeners": ")" + listeners + "\"";
    auto config = ParseConnectorConfig(json + "}}", "test");
    REQUIRE(config.ok());
    return ParseRelaySettings(*config);
  };
  auto def = parse("");
  REQUIRE(def.ok());
  CHECK(def->listener.host == "127.0.0.1");
  CHECK(def->listener.port == 8083);
  auto any = parse("http://:9000");
  REQUIRE(any.ok());
  CHECK(any->listener.host == "0.0.0.0");
  CHECK(any->listener.port == 9000);
  auto v6 = parse("http://[::1]:0/");
  REQUIRE(v6.ok());
  CHECK(v6->listener.host == "::1");
  CHECK(v6->listener.port == 0);
  CHECK(parse("http://localhost:8083")->listener.host == "127.0.0.1");
  for (const char* bad :
       {"ftp://127.0.0.1:8443", "127.0.0.1:8083", "http://127.0.0.1", "http://127.0.0.1:65536",
        "http://127.0.0.1:80x", "http://db.example:80", "http://127.0.0.1:1,http://127.0.0.1:2"}) {
    auto st = parse(bad);
    CHECK_MESSAGE(!st.ok(), bad);
    CHECK(st.status().code() == ErrorCode::kConfig);
    CHECK(st.status().message().find("'listeners'") != std::string::npos);
  }
}

TEST_CASE("Prometheus text: HELP and TYPE per family, escaped label values") {
  PrometheusText m;
  m.PerLabel("x_total", "counter", "Things.", "topic", {{"a\"b\\c\nd", 3}, {"plain", 4}});
  m.Single("y", "gauge", "Why.", 0.25);
  CHECK(m.text() == "# HELP x_total Things.\n# TYPE x_total counter\n"
                    "x_total{topic=\"a\\\"b\\\\c\\nd\"} 3\nx_total{topic=\"plain\"} 4\n"
                    "# HELP y Why.\n# TYPE y gauge\ny 0.250\n");
}

TEST_CASE("Prometheus text: known label values without events are exported at 0") {
  PrometheusText m;
  m.PerLabel("f_total", "counter", "Fails.", "stage", {{"produce", 2}}, {"transform", "produce"});
  CHECK(m.text() == "# HELP f_total Fails.\n# TYPE f_total counter\n"
                    "f_total{stage=\"produce\"} 2\nf_total{stage=\"transform\"} 0\n");
}
