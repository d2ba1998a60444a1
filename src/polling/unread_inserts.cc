#include "polling/unread_inserts.h"

namespace walrelay {

bool InsertsVanishUnread(const std::optional<InsertWindow>& previous, const InsertWindow& current) {
  if (!previous) return false;  // the first window's inserts may have been read before it began
  return current.inserted > 0 && current.rows_read == 0 && previous->rows_read == 0;
}

void UnreadInsertsWatch::Restart(Clock::time_point now) {
  next_ = now + window_;
  inserted_at_start_.reset();
  previous_.reset();
  rows_read_ = 0;
}

std::optional<InsertWindow> UnreadInsertsWatch::Close(int64_t inserted_total,
                                                      Clock::time_point now) {
  next_ = now + window_;
  std::optional<InsertWindow> vanished;
  if (inserted_at_start_) {
    const InsertWindow current{inserted_total - *inserted_at_start_, rows_read_};
    if (InsertsVanishUnread(previous_, current)) vanished = current;
    previous_ = current;
  }
  inserted_at_start_ = inserted_total;
  rows_read_ = 0;
  return vanished;
}

}  // namespace walrelay
