// Why a connection to PostgreSQL failed, and whether retrying can cure it.
//
// Decided by what the server said (its SQLSTATE) and by libpq's connection state, never by
// the wording of a message: a refused login (SQLSTATE class 28, an unknown database 3D000, no
// password where one is required) or a missing REPLICATION attribute (42501) fails again on
// every attempt; everything else (no route, a reset, a TLS session cut short, too many
// connections 53300, a server starting up or shutting down 57P0x) is retried with backoff.
// The one exception is the verification of the server's certificate: OpenSSL and libpq
// report it only as text, so those few local-configuration messages are recognised as such.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace walrelay {

struct ConnectFailure {
  std::string where;            // "host:port/db as user"
  std::string sqlstate;         // the server's SQLSTATE; "" when libpq failed on its own side
  bool needs_password = false;  // the server asked for a password and none was configured
  std::string message;          // libpq's text, one line, without SQLSTATE or LOCATION details
};

Status ClassifyConnectFailure(const ConnectFailure& failure);

// libpq's error text at PQERRORS_VERBOSE: the last SQLSTATE in it ("" if none), and the text
// without the SQLSTATE and LOCATION details, on one line.
ConnectFailure ParseVerboseConnectError(std::string_view verbose_message);

}  // namespace walrelay
