// polling/outbox_table.h: how many rows a read asks for, for every kind of bound and of row
// size seen so far.
#include <doctest/doctest.h>

#include "polling/outbox_table.h"
#include "polling/unread_inserts.h"

namespace walrelay {
namespace {

TEST_CASE("RowsToAsk: the row bound, or as many rows as fit in the byte bound plus one") {
  struct Row {
    int64_t limit, max_bytes;
    double average;
    int64_t asked;
  };
  const Row rows[] = {
      // No byte bound: polling.batch.size, whatever the rows weigh.
      {500, 0, 0, 500},
      {500, 0, 600, 500},
      {500, 0, 600'000, 500},
      // Nothing read yet on this connection: a small first read finds the rows' size.
      {500, 262'144, 0, kFirstReadRows},
      {4, 262'144, 0, 4},
      // Small rows: the row bound is the smaller one.
      {500, 262'144, 100, 500},
      {500, 262'144, 524.288, 500},  // exactly 500 fit
      // Rows that fill the byte bound first: those that fit, and the one that crosses it.
      {500, 262'144, 600, 437},
      {500, 262'144, 262'144, 2},
      {500, 262'144, 589'824, 1},  // 576 kB rows: one at a time
      {500, 1, 589'824, 1},        // no room left but one row's worth
      {1, 262'144, 600, 1},
  };
  for (const Row& r : rows) {
    INFO("limit " << r.limit << ", max bytes " << r.max_bytes << ", average " << r.average);
    CHECK(RowsToAsk(r.limit, r.max_bytes, r.average) == r.asked);
  }
}

}  // namespace
}  // namespace walrelay

namespace walrelay {
namespace {

TEST_CASE("InsertsVanishUnread: inserts with no row read in this window nor the one before") {
  struct Row {
    bool has_previous;
    int64_t previous_read, inserted, read;
    bool vanish;
  };
  const Row rows[] = {
      // The first window: its inserts may have been read before it began.
      {false, 0, 5, 0, false},
      {false, 0, 0, 0, false},
      // Nothing inserted: an idle table.
      {true, 0, 0, 0, false},
      {true, 3, 0, 0, false},
      // Inserted and read in this window.
      {true, 0, 5, 5, false},
      {true, 0, 5, 1, false},
      // Inserted here, read in the window before (the counter lags the commit).
      {true, 5, 5, 0, false},
      // Inserted, and no row read in either window: removed (or rolled back) before a poll.
      {true, 0, 1, 0, true},
      {true, 0, 1000, 0, true},
  };
  for (const Row& r : rows) {
    INFO("previous " << r.has_previous << " (read " << r.previous_read << "), inserted "
                     << r.inserted << ", read " << r.read);
    std::optional<InsertWindow> previous;
    if (r.has_previous) previous = InsertWindow{0, r.previous_read};
    CHECK(InsertsVanishUnread(previous, InsertWindow{r.inserted, r.read}) == r.vanish);
  }
}

}  // namespace
}  // namespace walrelay
