// The decoded form of wal2json format-version 2 messages: one message per transaction
// boundary or row change, as the walsender streams them.
//
// Column values keep PostgreSQL's rendering: text-like values are the unescaped string,
// numbers keep their exact digits (bigint and numeric are never rounded through a double),
// bytea is wal2json's hex (without "\x"), json/jsonb is the JSON text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/lsn.h"

namespace walrelay {

enum class ValueKind : uint8_t { kNull, kString, kNumber, kBool };

struct Column {
  std::string name;
  std::string type;  // PostgreSQL type as wal2json prints it, e.g. "character varying(255)"
  ValueKind kind = ValueKind::kNull;
  std::string text;  // rendering of the value; "true"/"false" for kBool; empty for kNull

  bool is_null() const { return kind == ValueKind::kNull; }
};

// Debezium's op letters.
enum class ChangeOp : char {
  kInsert = 'c',
  kUpdate = 'u',
  kDelete = 'd',
  kTruncate = 't',
  kMessage = 'm',
};

struct RowChange {
  ChangeOp op = ChangeOp::kInsert;
  Lsn lsn;                // LSN of this change's WAL record
  uint32_t xid = 0;
  std::string schema;
  std::string table;
  std::vector<Column> columns;   // new row image (insert, update); empty for delete/truncate
  std::vector<Column> identity;  // old key image (update with key change, delete)
  std::vector<std::string> primary_key;  // primary key column names, in column order (wal2json's "pk")
  int64_t commit_time_ms = 0;    // commit time of the enclosing transaction, ms since epoch

  // Finds a column of the new row image by name, or nullptr.
  const Column* Find(std::string_view name) const {
    for (const auto& c : columns)
      if (c.name == name) return &c;
    return nullptr;
  }
  std::string QualifiedTable() const { return schema + "." + table; }
};

struct LogicalMessage {
  Lsn lsn;
  bool transactional = false;
  std::string prefix;
  std::string content;
};

struct TxnBegin {
  uint32_t xid = 0;
  Lsn first_lsn;
  int64_t commit_time_ms = 0;
};

struct TxnCommit {
  uint32_t xid = 0;
  Lsn end_lsn;  // end of the commit record: the position that is safe to confirm
  int64_t commit_time_ms = 0;
};

}  // namespace walrelay
