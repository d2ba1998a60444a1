// walrelay against a real Apache Kafka broker's security listeners: SASL_SSL with
// SCRAM-SHA-512 and mutual TLS deliver rows; a wrong password stops the relay with the Kafka
// authentication exit code (8), an untrusted broker or client certificate with the Kafka TLS
// exit code (9), without confirming the row. The SASL password and the key password never
// appear in the log, in `validate`'s output, or in the REST API's status and config.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <regex>

#include "relay_fixture.h"
#include "rest_client.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kExitKafkaAuthentication = 8;
constexpr int kExitKafkaTls = 9;
// Distinctive, so a hit can only be a leak.
constexpr const char* kWrongPassword = "wrongsasl-Q7w2Zx";
constexpr const char* kKeyPassword = "keypass-R4t8Lm";

RelayFixture& Shared() {
  static RelayFixture fx = [] {
    devtools::KafkaBrokerOptions options;
    options.security = true;
    return RelayFixture(RealBroker{options});
  }();
  return fx;
}

void CheckNoSecret(const std::string& what, const std::string& text) {
  for (const std::string& secret : {Shared().broker().security().sasl_password,
                                    std::string(kWrongPassword), std::string(kKeyPassword)}) {
    CHECK_MESSAGE(text.find(secret) == std::string::npos, what << " shows a secret:\n" << text);
  }
}

std::map<std::string, std::string> SaslConfig(const std::string& password) {
  const auto& sec = Shared().broker().security();
  return {{"kafka.bootstrap.servers", sec.sasl_ssl_bootstrap},
          {"kafka.security.protocol", "SASL_SSL"},
          {"kafka.sasl.mechanisms", "SCRAM-SHA-512"},
          {"kafka.sasl.username", sec.sasl_username},
          {"kafka.sasl.password", password},
          {"kafka.ssl.ca.location", sec.ca_pem}};
}

std::map<std::string, std::string> MtlsConfig(const std::string& ca, const std::string& cert,
                                              const std::string& key) {
  return {{"kafka.bootstrap.servers", Shared().broker().security().mtls_bootstrap},
          {"kafka.security.protocol", "SSL"},
          {"kafka.ssl.ca.location", ca},
          {"kafka.ssl.certificate.location", cert},
          {"kafka.ssl.key.location", key},
          // The key is not encrypted, so the password is unused; it must stay hidden all the same.
          {"kafka.ssl.key.password", kKeyPassword}};
}

std::string Excerpt(const std::string& text, const std::string& from) {
  const auto at = text.find(from);
  return at == std::string::npos ? "(not found)" : text.substr(at, 400);
}

std::string InsertRow(const std::string& type, const std::string& key) {
  return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
         "(gen_random_uuid(), '" +
         type + "', '" + key + "', 'Secured', '{}')";
}

// The relay streams through the secured listener: a row arrives, REST and the log hide the
// secrets, SIGTERM stops it cleanly.
void ExpectStreams(const std::string& slot, const std::map<std::string, std::string>& config,
                   const std::string& type) {
  RelayFixture& fx = Shared();
  const std::string path = fx.WriteConfig(slot, config);
  auto validate = fx.RunCommand({"validate", "--config", path});
  auto& validate_code = validate.first;
  auto& validate_out = validate.second;
  CHECK_MESSAGE(validate_code == 0, validate_out);
  CheckNoSecret("validate", validate_out);
  auto relay = fx.StartRelay(path);
  const int port = RestPort(fx);
  fx.Exec(InsertRow(type, slot + "-key"));
  auto records = fx.Reader()->ReadAtLeast({"outbox.event." + type}, 1, 60s);
  REQUIRE(records.ok());
  REQUIRE_MESSAGE(records->size() == 1, Log(fx));
  CHECK(records->front().key == std::optional<std::string>(slot + "-key"));
  const std::string name = "itest-" + slot;
  const std::string status = Http(port, "GET", "/connectors/" + name + "/status").body;
  CHECK_MESSAGE(status.find("\"RUNNING\"") != std::string::npos, status);
  const std::string shown = Http(port, "GET", "/connectors/" + name + "/config").body;
  CHECK_MESSAGE(shown.find("kafka.ssl.ca.location") != std::string::npos, shown);
  CheckNoSecret("GET /status", status);
  CheckNoSecret("GET /config", shown);
  CheckNoSecret("GET /connectors/" + name, Http(port, "GET", "/connectors/" + name).body);
  REQUIRE(relay->Kill(SIGTERM).ok());
  auto code = relay->Wait(30s);
  REQUIRE(code.ok());
  CHECK_MESSAGE(*code == 0, Log(fx));
  CheckNoSecret("the relay's log", Log(fx));
}

// The relay is refused: it exits with `exit_code` and a message naming the cause and the keys
// to check, confirms nothing past the row waiting for Kafka, and `validate` says the same.
std::string ExpectRefused(const std::string& slot, const std::map<std::string, std::string>& config,
                          int exit_code, const std::string& cause, const std::string& key) {
  RelayFixture& fx = Shared();
  // A row committed before the relay starts, so it is waiting when Kafka refuses the relay.
  fx.Exec("SELECT pg_create_logical_replication_slot('" + slot + "', 'wal2json')");
  const Lsn slot_start = fx.ConfirmedFlush(slot);
  fx.Exec(InsertRow("Refused", slot));
  const std::string path = fx.WriteConfig(slot, config);
  auto relay = fx.SpawnRelay(path);
  auto code = relay->Wait(90s);
  REQUIRE_MESSAGE(code.ok(), "still running:\n" << Log(fx));
  const std::string log = Log(fx);
  CHECK_MESSAGE(*code == exit_code, log);
  CHECK_MESSAGE(log.find(cause) != std::string::npos, log);
  CHECK_MESSAGE(log.find(key) != std::string::npos, log);
  CheckNoSecret("the relay's log", log);
  CHECK(fx.ConfirmedFlush(slot) == slot_start);

  auto validate = fx.RunCommand({"validate", "--config", path});
  auto& validate_code = validate.first;
  auto& validate_out = validate.second;
  CHECK_MESSAGE(validate_code == exit_code, validate_out);
  CHECK_MESSAGE(validate_out.find(cause) != std::string::npos, validate_out);
  CheckNoSecret("validate", validate_out);
  return log;
}

}  // namespace

TEST_CASE("SASL_SSL with SCRAM-SHA-512: rows arrive; a wrong password stops with exit 8") {
  const auto& sec = Shared().broker().security();
  ExpectStreams("sasl_ok", SaslConfig(sec.sasl_password), "Sasl");
  const std::string log =
      ExpectRefused("sasl_wrong", SaslConfig(kWrongPassword), kExitKafkaAuthentication,
                    "Kafka refused the login", "kafka.sasl.password");
  MESSAGE("wrong password: " << Excerpt(log, "kafka authentication error"));
}

TEST_CASE("mutual TLS: rows arrive; an untrusted broker or client certificate stops with exit 9") {
  const auto& sec = Shared().broker().security();
  ExpectStreams("mtls_ok", MtlsConfig(sec.ca_pem, sec.client_cert_pem, sec.client_key_pem), "Mtls");
  const std::string wrong_ca = ExpectRefused(
      "mtls_wrong_ca", MtlsConfig(sec.untrusted_ca_pem, sec.client_cert_pem, sec.client_key_pem),
      kExitKafkaTls, "TLS with the Kafka broker failed", "kafka.ssl.ca.location");
  CHECK(wrong_ca.find("certificate verify failed") != std::string::npos);
  const std::string untrusted_client = ExpectRefused(
      "mtls_untrusted",
      MtlsConfig(sec.ca_pem, sec.untrusted_client_cert_pem, sec.untrusted_client_key_pem),
      kExitKafkaTls, "TLS with the Kafka broker failed", "kafka.ssl.certificate.location");
  MESSAGE("untrusted client certificate: " << Excerpt(untrusted_client, "kafka TLS error"));
}
