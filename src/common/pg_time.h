// Conversions between PostgreSQL's time renderings and milliseconds since the Unix epoch.
// Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace walrelay {

// Parses PostgreSQL's text rendering "YYYY-MM-DD HH:MM:SS[.fraction][(+|-)HH[:MM[:SS]]]".
// Without an offset the wall-clock time is read as UTC (Debezium's rule for `timestamp`
// columns). Fractions below a millisecond are truncated.
Result<int64_t> ParsePgTimestampMillis(std::string_view text);
// The same in microseconds; fractions below a microsecond are truncated.
Result<int64_t> ParsePgTimestampMicros(std::string_view text);

// Microseconds since 2000-01-01 00:00 UTC, the replication protocol's clock.
int64_t PgEpochMicrosNow();
inline constexpr int64_t kPgEpochOffsetMicros = 946684800LL * 1000000LL;

}  // namespace walrelay
