// Whether polling.order.column can carry what the polling mode asks of it, as a pure function
// of what the catalog says about the column (tests/unit/order_column_test.cc lists every
// combination).
//
// The column does two jobs. Rows are read in its order, so per-key order needs its values to
// grow with each insert (an identity or sequence column whose sequence hands out one value at a
// time). And a published batch is marked (deleted, or stamped) by its values, so the column must
// be NOT NULL with a unique index of its own: a value two rows share (created_at's now() is one
// value per transaction) would mark rows the batch never relayed, which are then lost, and a
// NULL would never be marked, so its row would be relayed again at every poll.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace walrelay {

// What the catalog says about the order column.
struct OrderColumnFacts {
  std::string table;   // schema.table, for messages
  std::string column;  // polling.order.column
  bool not_null = false;
  // A valid unique index (or primary key) on this column alone: no other column, no
  // expression, no WHERE clause.
  bool unique_alone = false;
  // An identity column, or one whose default draws from a sequence.
  bool from_sequence = false;
  // That sequence's CACHE (1 = one value at a time); 0 when unknown or there is none.
  int64_t sequence_cache = 0;
  // A partitioned table: its unique indexes must hold its partition key, so one on the order
  // column alone exists only when the table is partitioned by that column.
  bool partitioned = false;
};

// The verdict: an error (Status::Config naming the key, table, column and what is missing)
// that stops the relay before it reads a row, or the warnings to log when it may start.
struct OrderColumnVerdict {
  Status error;
  std::vector<std::string> warnings;
};

// Checks the order column.
OrderColumnVerdict CheckOrderColumn(const OrderColumnFacts& facts);

}  // namespace walrelay
