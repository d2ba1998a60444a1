#include <doctest/doctest.h>

#include "pg/connect_failure.h"

using namespace walrelay;

namespace {

Status Classify(const std::string& verbose, bool needs_password = false) {
  ConnectFailure f = ParseVerboseConnectError(verbose);
  f.where = "db:5432/app as relay";
  f.needs_password = needs_password;
  return ClassifyConnectFailure(f);
}

}  // namespace

TEST_CASE(
    "the server's SQLSTATE and the text without details are read from libpq's verbose error") {
  const ConnectFailure f = ParseVerboseConnectError(
      "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  28P01: password "
      "authentication failed for user \"relay\"\nLOCATION:  auth_failed, auth.c:326\n");
  CHECK(f.sqlstate == "28P01");
  CHECK(f.message == "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  password "
                     "authentication failed for user \"relay\"");
}

TEST_CASE("refused logins are not retried; transient failures are, whatever their wording") {
  CHECK(Classify("failed: FATAL:  28P01: password authentication failed for user \"x\"").code() ==
        ErrorCode::kAuthentication);
  CHECK(Classify("failed: FATAL:  28000: pg_hba.conf rejects connection for host").code() ==
        ErrorCode::kAuthentication);
  CHECK(Classify("failed: FATAL:  3D000: database \"nope\" does not exist").code() ==
        ErrorCode::kAuthentication);
  CHECK(Classify("failed: fe_sendauth: no password supplied", true).code() ==
        ErrorCode::kAuthentication);
  CHECK(Classify("failed: FATAL:  42501: permission denied to start WAL sender").code() ==
        ErrorCode::kNoReplicationRole);
  CHECK(Classify("failed: certificate verify failed").code() == ErrorCode::kAuthentication);

  // Texts that contain "SSL", "password" or "does not exist" but that waiting cures.
  for (const char* transient :
       {"failed: SSL SYSCALL error: EOF detected",
        "failed: SSL connection has been closed unexpectedly",
        "failed: FATAL:  53300: too many connections for role \"password\"",
        "failed: FATAL:  57P03: the database system is starting up",
        "failed: FATAL:  57P01: terminating connection due to administrator command",
        "failed: could not connect: socket file does not exist",
        "failed: server closed the connection unexpectedly"}) {
    const Status st = Classify(transient);
    CHECK_MESSAGE(st.IsRetriableConnection(), transient);
  }
}
