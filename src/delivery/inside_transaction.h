// InsideTransaction: a position inside one source (PostgreSQL) transaction, for exactly once
// when a source transaction outgrows one Kafka transaction (docs/exactly-once.md, "Source
// transactions larger than a Kafka transaction").
//
// Contract:
// - A change (a row, or a transactional logical decoding message) is placed by its source
//   transaction, named by `xid` and the LSN of its first WAL record (`first_lsn`: a begin's
//   dataStart; both are the same each time the slot streams the transaction again), and by
//   its own LSN with its ordinal among the transaction's changes at that LSN (`at_lsn`, from 1:
//   a multi-insert, as COPY writes, gives many rows one WAL record and so one LSN).
// - Within a transaction the changes arrive in LSN order, every time it is streamed, so
//   "up to and including this change" is well defined: KafkaHolds() says whether a change of a
//   replayed transaction is at or before a stored position, i.e. already committed to Kafka.
// - ChangeCounter computes the position of each change of the transaction being streamed.
// Value types and pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "common/lsn.h"

namespace walrelay {

struct InsideTransaction {
  uint32_t xid = 0;
  Lsn first_lsn;        // the transaction's first WAL record
  Lsn lsn;              // the change's WAL record
  uint64_t at_lsn = 0;  // its ordinal among the transaction's changes at `lsn`, from 1

  friend bool operator==(const InsideTransaction&, const InsideTransaction&) = default;
};

// True when `change` belongs to the transaction `held` names and comes at or before it: Kafka
// holds its records already, and a replay must not send them again.
inline bool KafkaHolds(const InsideTransaction& held, const InsideTransaction& change) {
  if (change.xid != held.xid || change.first_lsn != held.first_lsn) return false;
  if (change.lsn != held.lsn) return change.lsn < held.lsn;
  return change.at_lsn <= held.at_lsn;
}

// The position of each change of the transaction being streamed.
class ChangeCounter {
 public:
  // A source transaction begins.
  void Begin(uint32_t xid, Lsn first_lsn) {
    position_ = InsideTransaction{xid, first_lsn, Lsn(), 0};
  }
  // The next change of the transaction, at `lsn`: its position.
  const InsideTransaction& Next(Lsn lsn) {
    position_.at_lsn = lsn == position_.lsn ? position_.at_lsn + 1 : 1;
    position_.lsn = lsn;
    return position_;
  }

 private:
  InsideTransaction position_;
};

}  // namespace walrelay
