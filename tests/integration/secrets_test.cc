// Secrets never leak: PostgreSQL gets a real password (scram-sha-256), configs carry a
// distinctive value in every secret key walrelay knows (database.password directly, through
// ${env:} and ${file:}; database.sslpassword; kafka.sasl.password; kafka.ssl.key.password),
// and every byte the real binary writes to stdout and stderr, in working runs and failing
// ones, is searched for each value.
#include <csignal>
#include <cstdlib>

#include "relay_fixture.h"

using namespace walrelay;
using walrelay::testing::RelayFixture;

namespace {

constexpr const char* kUser = "relay_pw";
// Each value is distinctive so a hit can only be a leak; `kLeakTokens` are searched for.
constexpr const char* kPgPassword = "pgpw-7f3Kq9-secret";
constexpr const char* kWrongPassword = "wrongpw-9x2Lr4-secret";
constexpr const char* kSaslPassword = "saslpw-4hT8v1-secret";
constexpr const char* kKeyPassword = "keypw-6mN2z0-secret";
constexpr const char* kSslPassword = "sslpw-3bV7c5-secret";
// A password that happens to contain reference syntax; its "provider" must not be echoed.
constexpr const char* kRefLikePassword = "pw${Rx5Qsec:tail}-secret";
const std::vector<std::string> kLeakTokens = {"7f3Kq9", "9x2Lr4",  "4hT8v1", "6mN2z0",
                                              "3bV7c5", "Rx5Qsec", "-secret"};

void CheckNoSecret(const std::string& what, const std::string& output) {
  for (const auto& token : kLeakTokens) {
    CHECK_MESSAGE(output.find(token) == std::string::npos, what << " printed a secret (" << token
                                                                << "):\n"
                                                                << output);
  }
}

class SecretsFixture {
 public:
  SecretsFixture() {
    fx_.Exec(std::string("CREATE ROLE ") + kUser + " LOGIN REPLICATION");
    fx_.Exec(std::string("ALTER ROLE ") + kUser + " PASSWORD '" + kPgPassword + "'");
    Status st =
        fx_.pg().AddHbaLines({std::string("host all ") + kUser + " 127.0.0.1/32 scram-sha-256"});
    REQUIRE_MESSAGE(st.ok(), st.ToString());
    st = fx_.pg().Restart();
    REQUIRE_MESSAGE(st.ok(), st.ToString());
    password_file_ = fx_.pg().base_dir() + "/pg_password";
    std::ofstream(password_file_) << kPgPassword << "\n";
    ::setenv("WALRELAY_TEST_PG_PASSWORD", kPgPassword, 1);
    ::setenv("WALRELAY_TEST_SASL_PASSWORD", kSaslPassword, 1);
  }

  const std::string& password_file() const { return password_file_; }

  // A config for kUser with every secret key set; `overrides` replace or add keys.
  std::string Config(const std::string& slot, const std::map<std::string, std::string>& overrides) {
    std::map<std::string, std::string> keys = {
        {"database.user", kUser},
        {"database.password", kPgPassword},
        {"database.sslpassword", kSslPassword},
        {"kafka.sasl.password", "${env:WALRELAY_TEST_SASL_PASSWORD}"},
        {"kafka.sasl.username", "relay"},
        {"kafka.ssl.key.password", kKeyPassword},
    };
    for (const auto& [k, v] : overrides) keys[k] = v;
    return fx_.WriteConfig(slot, keys);
  }

  // Runs `validate` (or `run`, for a config that must fail) and checks its exit code and output.
  std::string Expect(const std::string& command, const std::string& config, int exit_code) {
    auto result = fx_.RunCommand({"--log-level", "trace", command, "--config", config});
    auto& code = result.first;
    auto& out = result.second;
    CHECK_MESSAGE(code == exit_code, command << " exited " << code << ":\n" << out);
    CheckNoSecret(command + " " + config, out);
    return out;
  }

  // `run --log-level trace` streams one outbox row, then stops on SIGTERM; returns its log.
  std::string StreamOneRow(const std::string& config, const std::string& aggregate_id) {
    const std::string log_path = config + ".log";
    auto spawned = devtools::ChildProcess::Spawn(
        {WALRELAY_BINARY, "--log-level", "trace", "run", "--config", config}, log_path);
    REQUIRE_MESSAGE(spawned.ok(), spawned.status().ToString());
    auto relay = std::move(spawned).value();
    REQUIRE_MESSAGE(
        devtools::WaitForFileContains(log_path, "streaming slot", std::chrono::seconds(20)),
        devtools::ReadFile(log_path));
    fx_.Exec("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES "
             "(gen_random_uuid(), 'Secret', '" +
             aggregate_id + "', 'Kept', '{}')");
    auto records = reader_->ReadAtLeast({"outbox.event.Secret"}, 1, std::chrono::seconds(30));
    REQUIRE(records.ok());
    REQUIRE(records->size() == 1);
    CHECK(records->front().key == std::optional<std::string>(aggregate_id));
    REQUIRE(relay->Kill(SIGTERM).ok());
    auto code = relay->Wait(std::chrono::seconds(20));
    REQUIRE(code.ok());
    const std::string log = devtools::ReadFile(log_path);
    CHECK_MESSAGE(*code == 0, log);
    CheckNoSecret("run " + config, log);
    return log;
  }

 private:
  RelayFixture fx_;
  std::string password_file_;
  std::unique_ptr<devtools::TopicReader> reader_ = fx_.Reader();
};

}  // namespace

TEST_CASE("working runs: validate and run print no secret, whichever way the password comes") {
  SecretsFixture s;
  for (const auto& entry : std::vector<std::pair<std::string, std::string>>{
           {"direct", kPgPassword},
           {"env", "${env:WALRELAY_TEST_PG_PASSWORD}"},
           {"file", "${file:" + s.password_file() + "}"}}) {
    const auto& name = entry.first;
    const auto& password = entry.second;
    CAPTURE(name);
    const std::string out =
        s.Expect("validate", s.Config("sec_" + name, {{"database.password", password}}), 0);
    CHECK_MESSAGE(out.find("\nOK\n") != std::string::npos, out);
  }

  // The same secrets at the most verbose levels: walrelay's trace and librdkafka's debug
  // output, which includes its configuration dump.
  const std::string log = s.StreamOneRow(s.Config("sec_stream", {{"kafka.debug", "all"}}), "agg-1");
  // librdkafka did log its configuration, secret properties included (redacted).
  CHECK_MESSAGE(log.find("sasl.password") != std::string::npos, log);
  CHECK(s.StreamOneRow(s.Config("sec_stream_file",
                                {{"database.password", "${file:" + s.password_file() + "}"}}),
                       "agg-2")
            .find("stopped; slot") != std::string::npos);
}

TEST_CASE("failing runs: errors name the key, never the secret") {
  SecretsFixture s;
  // A wrong password: libpq's error, passed on, must not carry it.
  s.Expect("validate", s.Config("sec_wrong", {{"database.password", kWrongPassword}}), 3);
  s.Expect("run", s.Config("sec_wrong_run", {{"database.password", kWrongPassword}}), 3);

  // Invalid kafka.* settings next to secrets: an unknown property holding a secret, a key
  // password librdkafka rejects while creating the producer, a mistyped secret key name.
  s.Expect("validate", s.Config("sec_kafka_unknown", {{"kafka.bogus.password", kSaslPassword}}), 2);
  s.Expect("validate",
           s.Config("sec_kafka_key", {{"kafka.security.protocol", "SSL"},
                                      {"kafka.ssl.key.location", "/nonexistent/client.key"}}),
           2);
  s.Expect("run",
           s.Config("sec_kafka_key_run", {{"kafka.security.protocol", "SSL"},
                                          {"kafka.ssl.key.location", "/nonexistent/k.pem"}}),
           2);
  s.Expect("validate", s.Config("sec_kafka_typo", {{"kafka.sasl.pasword", kSaslPassword}}), 2);
  s.Expect("validate",
           s.Config("sec_sasl_mech", {{"kafka.security.protocol", "SASL_PLAINTEXT"},
                                      {"kafka.sasl.mechanisms", "NOT-A-MECHANISM"}}),
           2);

  // Bad values in secret keys.
  s.Expect("validate", s.Config("sec_ref", {{"database.password", kRefLikePassword}}), 2);
  s.Expect("validate",
           s.Config("sec_unterminated",
                    {{"kafka.sasl.password", "x${env:" + std::string(kSaslPassword)}}),
           2);
  s.Expect("run", s.Config("sec_ref_run", {{"kafka.ssl.key.password", kRefLikePassword}}), 2);

  // A plain-named kafka.* key whose value comes through ${env:} is hidden like a secret, also
  // when librdkafka refuses the value and its error would quote it.
  ::setenv("WALRELAY_TEST_PROVIDED_LINGER", "linger-3bV7c5-secret", 1);
  const std::string provided = s.Expect(
      "validate",
      s.Config("sec_provided", {{"kafka.linger.ms", "${env:WALRELAY_TEST_PROVIDED_LINGER}"}}), 2);
  CHECK_MESSAGE(provided.find("kafka.linger.ms") != std::string::npos, provided);
  s.Expect(
      "run",
      s.Config("sec_provided_run", {{"kafka.linger.ms", "${env:WALRELAY_TEST_PROVIDED_LINGER}"}}),
      2);

  // Unknown keys next to secrets are reported by name only.
  const std::string out =
      s.Expect("validate",
               s.Config("sec_unknown", {{"database.pasword", kWrongPassword},
                                        {"transforms.outbox.secret.passwd", kSslPassword}}),
               0);
  CHECK_MESSAGE(out.find("database.pasword") != std::string::npos, out);
}
