// ConnectPlain: an ordinary (non-replication) libpq connection made from the relay's connection
// parameters with some of them replaced, for the side connections that read the catalog, watch
// the slot or poll the outbox table. Bounded by the `connect_timeout` the overrides give.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "pg/pg_handles.h"

namespace walrelay {

using PgParams = std::vector<std::pair<std::string, std::string>>;

// `params` without `replication` and without the keys `overrides` sets, then `overrides`.
// Errors are kConnection and start with `what` ("cannot connect for <what>: <libpq's reason>").
Result<PgConnPtr> ConnectPlain(const PgParams& params, const PgParams& overrides,
                               const std::string& what);

// libpq's last error message without its trailing newlines.
std::string PgErrorText(const PGconn* conn);

}  // namespace walrelay
