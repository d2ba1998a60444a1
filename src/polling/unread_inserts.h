// Whether rows inserted into the polled table disappear before any poll reads them: an
// application that deletes its outbox rows right after inserting them (which the replication
// path tolerates: the slot has the insert) loses every such event in polling mode, silently.
// A pure function of the table's insert counter (pg_stat_user_tables.n_tup_ins) and the rows
// the relay read over two consecutive windows of polling.unread.check.ms; the relay only logs
// its verdict (tests/unit/polling_read_test.cc lists the cases).
//
// Two windows, not one: the statistics reach the counter up to about a second after a commit,
// while a poll reads a committed row within polling.interval.ms, so a row read at the end of
// one window may be counted in the next. A row counted as inserted in this window was
// committed in it or near the end of the one before, and a poll reads it in one of the two.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace walrelay {

struct InsertWindow {
  int64_t inserted = 0;   // n_tup_ins's growth over the window (rolled-back inserts count too)
  int64_t rows_read = 0;  // rows the relay read in the window
};

// True when rows were inserted in `current`, and neither `current` nor `previous` (absent: no
// whole window before it yet) saw the relay read any.
bool InsertsVanishUnread(const std::optional<InsertWindow>& previous, const InsertWindow& current);

// The windows for the polling relay, which feeds it the rows it reads and, when Due(), the
// insert counter. The relay's loop thread only.
class UnreadInsertsWatch {
 public:
  using Clock = std::chrono::steady_clock;

  explicit UnreadInsertsWatch(std::chrono::milliseconds window) : window_(window) {}

  // A new lease (or a resume): no window is open until the next Close().
  void Restart(Clock::time_point now);
  void RowsRead(int64_t rows) { rows_read_ += rows; }
  bool Due(Clock::time_point now) const { return window_.count() > 0 && now >= next_; }
  // Closes the window at the counter's `inserted_total`; its figures when InsertsVanishUnread
  // says rows vanished in it.
  std::optional<InsertWindow> Close(int64_t inserted_total, Clock::time_point now);

 private:
  const std::chrono::milliseconds window_;
  Clock::time_point next_;
  std::optional<int64_t> inserted_at_start_;
  std::optional<InsertWindow> previous_;
  int64_t rows_read_ = 0;
};

}  // namespace walrelay
