// Wal2JsonDecoder: turns one wal2json format-version 2 message into a DecodedMessage.
//
// The slot must be started with format-version 2, include-xids, include-timestamp,
// include-lsn, include-pk and include-types (see pg/replication_connection). The decoder
// reuses the storage of `out` between calls so a stream of rows does not allocate per column
// once warm. Not thread-safe; one decoder per stream.
//
// A table filter, when set, is asked about each row's table as soon as its schema and table
// are read; a row of a table it refuses comes out as kExcludedChange without its columns
// being parsed or checked, so a row the relay would not relay anyway can never stop it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/lsn.h"
#include "common/status.h"
#include "decode/change_event.h"

namespace walrelay {

// kExcludedChange: a row of a table the filter refused; only change.schema, change.table and
// change.lsn are set.
enum class MessageKind { kBegin, kChange, kCommit, kMessage, kExcludedChange };

// True when rows of schema.table are wanted.
using TableFilter = std::function<bool(std::string_view schema, std::string_view table)>;

struct DecodedMessage {
  MessageKind kind = MessageKind::kBegin;
  TxnBegin begin;         // valid when kind == kBegin
  RowChange change;       // valid when kind == kChange
  TxnCommit commit;       // valid when kind == kCommit
  LogicalMessage message; // valid when kind == kMessage
};

class Wal2JsonDecoder {
 public:
  Wal2JsonDecoder();
  ~Wal2JsonDecoder();
  Wal2JsonDecoder(Wal2JsonDecoder&&) noexcept;
  Wal2JsonDecoder& operator=(Wal2JsonDecoder&&) noexcept;

  // `data_start` is the XLogData dataStart of the CopyData message carrying `json`; it names
  // the position in errors and is the confirmable position for a commit.
  Status Decode(std::string_view json, Lsn data_start, DecodedMessage& out);
  void SetTableFilter(TableFilter filter);

 private:
  class Parser;  // streaming (SAX) parse state, reused between messages
  std::unique_ptr<Parser> parser_;
  // The commit time of the transaction being decoded, so rows need not re-parse it.
  std::string last_timestamp_text_;
  int64_t last_timestamp_ms_ = 0;
  int64_t current_commit_time_ms_ = 0;
  Result<int64_t> CommitTime(std::string_view text);
};

}  // namespace walrelay
