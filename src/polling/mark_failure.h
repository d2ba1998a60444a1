// What a failed mark (the DELETE, or the UPDATE of the mark column, of rows whose records Kafka
// acknowledged) means, as a pure function of its SQLSTATE (tests/unit/order_column_test.cc
// lists every class).
//
// A mark that retrying cannot fix (a read-only session, a trigger or a foreign key refusing the
// DELETE, a value the statement cannot take) stops the relay, naming the table and the cause:
// retrying it would never end, and re-reading its rows would publish them again and again.
// Anything else (a lost connection, a lock or statement timeout, a serialization failure, the
// server shutting down) is retried: the mark alone, its rows kept out of the reads, since their
// records are acknowledged already.
#pragma once

#include <string_view>

namespace walrelay {

enum class MarkFailure {
  kStop,   // retrying cannot fix it: stop without marking (the rows are relayed again later)
  kRetry,  // send the mark again after a backoff, bounded by errors.max.retries
};

// The verdict for a mark that failed with `sqlstate` ("" when the server gave none: the
// connection went).
MarkFailure ClassifyMarkFailure(std::string_view sqlstate);

}  // namespace walrelay
