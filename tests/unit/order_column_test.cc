// polling/order_column.h: every combination of what the catalog says about
// polling.order.column, against the table of what the relay must do.
#include <doctest/doctest.h>

#include <string>

#include "polling/mark_failure.h"
#include "polling/order_column.h"

namespace walrelay {
namespace {

TEST_CASE("CheckOrderColumn: NOT NULL, unique alone, from a sequence, the sequence's cache, "
          "partitioned") {
  struct Row {
    bool not_null, unique_alone, from_sequence;
    int64_t cache;
    bool starts;             // the relay may start
    std::string in_message;  // in the error, or in the one warning ("" = no warning)
  };
  const Row rows[] = {
      // Marks by a value two rows may share, or that may be NULL: never start.
      {false, false, false, 0, false, "lacks NOT NULL and a unique index on it alone"},
      {false, false, true, 1, false, "lacks NOT NULL and a unique index on it alone"},
      {false, true, false, 0, false, "lacks NOT NULL:"},
      {false, true, true, 1, false, "lacks NOT NULL:"},
      {false, true, true, 20, false, "lacks NOT NULL:"},
      {true, false, false, 0, false, "lacks a unique index on it alone"},
      {true, false, true, 1, false, "lacks a unique index on it alone"},
      {true, false, true, 20, false, "lacks a unique index on it alone"},
      // Marks are safe: start, warning when per-key order is not assured.
      {true, true, false, 0, true, "neither an identity column nor drawn from a sequence"},
      {true, true, true, 0, true, ""},  // a sequence whose cache could not be read
      {true, true, true, 1, true, ""},
      {true, true, true, 20, true, "CACHE 20"},
  };
  for (const Row& r : rows) {
    for (const bool partitioned : {false, true}) {
      INFO("not null " << r.not_null << ", unique alone " << r.unique_alone << ", sequence "
                       << r.from_sequence << ", cache " << r.cache << ", partitioned "
                       << partitioned);
      const OrderColumnVerdict v =
          CheckOrderColumn({"public.outbox", "created_at", r.not_null, r.unique_alone,
                            r.from_sequence, r.cache, partitioned});
      CHECK(v.error.ok() == r.starts);
      if (!r.starts) {
        CHECK(v.error.code() == ErrorCode::kConfig);
        const std::string& m = v.error.message();
        CHECK_MESSAGE(m.find(r.in_message) != std::string::npos, m);
        // The key, the table and the column, and how to fix it: a partitioned table that lacks
        // only the index can have one on this column once partitioned by it.
        CHECK(m.find("'polling.order.column': column 'created_at' of public.outbox") == 0);
        if (partitioned && r.not_null) {
          CHECK_MESSAGE(m.find("PARTITION BY RANGE (created_at)") != std::string::npos, m);
          CHECK(m.find("CREATE UNIQUE INDEX ON public.outbox (created_at)") != std::string::npos);
        } else {
          CHECK(m.find("CREATE UNIQUE INDEX ON public.outbox (seq)") != std::string::npos);
        }
        CHECK(v.warnings.empty());
      } else if (r.in_message.empty()) {
        CHECK(v.warnings.empty());
      } else {
        REQUIRE(v.warnings.size() == 1);
        CHECK_MESSAGE(v.warnings[0].find(r.in_message) != std::string::npos, v.warnings[0]);
        CHECK(v.warnings[0].find("column 'created_at' of public.outbox") != std::string::npos);
      }
    }
  }
}

TEST_CASE("ClassifyMarkFailure: what retrying cannot fix stops; the rest is retried") {
  struct Row {
    const char* sqlstate;
    MarkFailure want;
    const char* what;
  };
  const Row rows[] = {
      {"25006", MarkFailure::kStop, "read-only transaction (default_transaction_read_only)"},
      {"23503", MarkFailure::kStop, "a foreign key refusing the DELETE"},
      {"23514", MarkFailure::kStop, "a check constraint refusing the UPDATE"},
      {"P0001", MarkFailure::kStop, "a trigger raising an exception"},
      {"22003", MarkFailure::kStop, "a value out of range"},
      {"0A000", MarkFailure::kStop, "feature not supported"},
      {"42501", MarkFailure::kStop, "privilege revoked under the running relay"},
      {"44000", MarkFailure::kStop, "a view's check option"},
      {"38000", MarkFailure::kStop, "an external routine exception"},
      {"39000", MarkFailure::kStop, "an external routine invocation exception"},
      {"", MarkFailure::kRetry, "no answer: the connection went"},
      {"08006", MarkFailure::kRetry, "connection failure"},
      {"40001", MarkFailure::kRetry, "serialization failure"},
      {"40P01", MarkFailure::kRetry, "deadlock"},
      {"55P03", MarkFailure::kRetry, "lock timeout"},
      {"57014", MarkFailure::kRetry, "statement timeout"},
      {"57P01", MarkFailure::kRetry, "administrator shutdown"},
      {"53100", MarkFailure::kRetry, "disk full (may pass once space is freed)"},
      {"25P02", MarkFailure::kRetry, "in a failed transaction (the next statement is fresh)"},
      {"XX000", MarkFailure::kRetry, "internal error"},
  };
  for (const Row& r : rows) {
    INFO(r.sqlstate << ": " << r.what);
    CHECK(ClassifyMarkFailure(r.sqlstate) == r.want);
  }
}

}  // namespace
}  // namespace walrelay
