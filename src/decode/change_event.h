// The decoded form of wal2json format-version 2 messages: one message per transaction
// boundary or row change, as the walsender streams them.
//
// Column values keep PostgreSQL's rendering: text-like values are the unescaped string,
// numbers keep their exact digits (bigint and numeric are never rounded through a double),
// bytea is wal2json's hex (without "\x"), json/jsonb is the JSON text.
#pragma once

#include <cstdint>
#include <optional>
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
  // Rendering of the value; "true"/"false" for kBool. Empty for kNull, except a NaN or
  // infinite number from pgoutput: wal2json writes those as null, and so does walrelay's own
  // rendering, but the handling modes render them as Debezium does ("NaN", "-Infinity").
  std::string text;
  // Whether the column may hold NULL (Debezium's `optional`): false for NOT NULL and
  // primary-key columns, as far as the decoder knows them.
  bool optional = true;

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
  Lsn lsn;  // LSN of this change's WAL record
  uint32_t xid = 0;
  std::string schema;
  std::string table;
  std::vector<Column> columns;   // new row image (insert, update); empty for delete/truncate
  std::vector<Column> identity;  // old key image (update with key change, delete)
  std::vector<std::string>
      primary_key;             // primary key column names, in column order (wal2json's "pk")
  int64_t commit_time_ms = 0;  // commit time of the enclosing transaction, ms since epoch
  int64_t commit_time_us = 0;  // the same in microseconds (Debezium's source.ts_us)
  // Debezium's `before` image: every column of the table in column order, the old tuple's
  // values and NULL beyond them. Set for a delete and for an update that carries an old tuple
  // (its key changed, or REPLICA IDENTITY FULL); empty otherwise. Without the table's columns
  // (wal2json without a catalog) it is the old tuple's columns.
  std::vector<Column> before;
  // End of the last transaction's commit this stream delivered before this change (the first
  // element of Debezium's source.sequence); nullopt before the first commit of a connection.
  std::optional<Lsn> previous_commit_end;

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
