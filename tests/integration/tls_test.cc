// TLS from walrelay to PostgreSQL, end to end: a CA, a server certificate and a client
// certificate made with the openssl CLI; a sandbox server that admits the relay's user only
// over TLS with that client certificate (pg_hba `hostssl ... cert`); and the real walrelay
// binary (`validate`, `run`) with database.sslmode=verify-full.
//
// Kafka's TLS and SASL settings are tested against a real broker in broker_security_test.cc.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include "devtools/test_pki.h"
#include "relay_fixture.h"

using namespace walrelay;
using walrelay::testing::RelayFixture;

namespace {

// pg_hba's `cert` method takes the user name from the client certificate's CN.
constexpr const char* kUser = "relay_tls";

// Writes into `dir`: ca.crt (signed server.crt and client.crt, with their .key files) and
// wrong-ca.crt, a CA that signed nothing here.
void MakeCertificates(const std::string& dir) {
  const devtools::TestPki pki(dir);
  for (Status st :
       {pki.MakeCa("ca", "walrelay test CA"), pki.MakeCa("wrong-ca", "unrelated CA"),
        // verify-full checks the host walrelay connects to (127.0.0.1) against the SAN.
        pki.MakeSigned("server", "localhost", "ca", "subjectAltName = IP:127.0.0.1, DNS:localhost"),
        pki.MakeSigned("client", kUser, "ca", "extendedKeyUsage = clientAuth")}) {
    REQUIRE_MESSAGE(st.ok(), st.ToString());
  }
}

// Turns on TLS in the fixture's server and lets kUser in only over TLS with a client
// certificate; returns the directory holding the certificates (see MakeCertificates).
std::string ServeTlsWithClientCertificates(RelayFixture& fx) {
  const std::string dir = fx.pg().base_dir();
  MakeCertificates(dir);
  // The server runs as the postgres OS user when we are root, and refuses a key it does not own.
  if (::geteuid() == 0) {
    const passwd* pg = ::getpwnam("postgres");
    REQUIRE(pg != nullptr);
    REQUIRE(::chown((dir + "/server.key").c_str(), pg->pw_uid, pg->pw_gid) == 0);
  }
  fx.Exec(std::string("CREATE ROLE ") + kUser + " LOGIN REPLICATION");
  // ALTER SYSTEM may not share a transaction with other statements: one call each.
  for (const std::string& setting : std::vector<std::string>{
           "ssl = on", "ssl_cert_file = '" + dir + "/server.crt'",
           "ssl_key_file = '" + dir + "/server.key'", "ssl_ca_file = '" + dir + "/ca.crt'"}) {
    fx.Exec("ALTER SYSTEM SET " + setting);
  }
  // Without the reject line the default `host all all ... trust` would admit kUser in clear.
  Status st = fx.pg().AddHbaLines({std::string("hostssl all ") + kUser + " 127.0.0.1/32 cert",
                                   std::string("hostnossl all ") + kUser + " 127.0.0.1/32 reject"});
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  st = fx.pg().Restart();
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  return dir;
}

std::map<std::string, std::string> TlsKeys(const std::string& dir, const std::string& root_ca) {
  return {{"database.user", kUser},
          {"database.sslmode", "verify-full"},
          {"database.sslrootcert", dir + "/" + root_ca},
          {"database.sslcert", dir + "/client.crt"},
          {"database.sslkey", dir + "/client.key"}};
}

}  // namespace

TEST_CASE("verify-full with a client certificate: validate passes and run streams over TLS") {
  RelayFixture fx;
  const std::string dir = ServeTlsWithClientCertificates(fx);

  const std::string config = fx.WriteConfig("tls_ok", TlsKeys(dir, "ca.crt"));
  auto result = fx.RunCommand({"validate", "--config", config});
  auto& code = result.first;
  auto& out = result.second;
  CHECK_MESSAGE(code == 0, out);
  CHECK_MESSAGE(out.find("\nOK\n") != std::string::npos, out);

  auto relay = fx.StartRelay(config);
  // The walsender serving walrelay runs over TLS, for the user the client certificate names.
  CHECK(fx.Value("SELECT s.ssl::text || ' ' || s.client_dn || ' ' || r.usename FROM "
                 "pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE "
                 "r.application_name = 'walrelay'") ==
        std::string("true /CN=") + kUser + " " + kUser);

  fx.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
          "('00000000-0000-4000-8000-00000000771a', 'Order', 'order-tls', 'OrderPlaced', "
          "'{\"over\": \"tls\"}')");
  auto reader = fx.Reader();
  auto records = reader->ReadAtLeast({"outbox.event.Order"}, 1, std::chrono::seconds(30));
  REQUIRE(records.ok());
  REQUIRE(records->size() == 1);
  CHECK(records->front().key == std::optional<std::string>("order-tls"));
  CHECK(records->front().value == std::optional<std::string>("{\"over\": \"tls\"}"));

  REQUIRE(relay->Kill(SIGTERM).ok());
  auto stopped = relay->Wait(std::chrono::seconds(20));
  REQUIRE(stopped.ok());
  CHECK_MESSAGE(*stopped == 0, devtools::ReadFile(fx.log_path()));
}

TEST_CASE("a server certificate from another CA, or no client certificate, is refused: exit 3") {
  RelayFixture fx;
  const std::string dir = ServeTlsWithClientCertificates(fx);

  const std::string wrong_ca = fx.WriteConfig("tls_wrong_ca", TlsKeys(dir, "wrong-ca.crt"));
  for (const char* command : {"validate", "run"}) {
    auto result = fx.RunCommand({command, "--config", wrong_ca});
    auto& code = result.first;
    auto& out = result.second;
    CHECK_MESSAGE(code == 3, command << ": " << out);
    CHECK_MESSAGE(out.find("certificate verify failed") != std::string::npos,
                  command << ": " << out);
  }

  auto no_client_cert = TlsKeys(dir, "ca.crt");
  no_client_cert.erase("database.sslcert");
  no_client_cert.erase("database.sslkey");
  auto result =
      fx.RunCommand({"validate", "--config", fx.WriteConfig("tls_no_cert", no_client_cert)});
  auto& code = result.first;
  auto& out = result.second;
  CHECK_MESSAGE(code == 3, out);
  CHECK_MESSAGE(out.find("certificate") != std::string::npos, out);

  // In clear the server's pg_hba refuses the user outright.
  auto clear = fx.RunCommand({"validate", "--config",
                              fx.WriteConfig("tls_disabled", {{"database.user", kUser},
                                                              {"database.sslmode", "disable"}})});
  auto& clear_code = clear.first;
  auto& clear_out = clear.second;
  CHECK_MESSAGE(clear_code == 3, clear_out);
  CHECK_MESSAGE(clear_out.find("pg_hba.conf rejects connection") != std::string::npos, clear_out);
}
