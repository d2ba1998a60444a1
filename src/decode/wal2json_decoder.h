// Wal2JsonDecoder: turns one wal2json format-version 2 message into a DecodedMessage.
//
// The slot must be started with format-version 2, include-xids, include-timestamp,
// include-lsn, include-pk and include-types (see pg/replication_connection). The decoder
// reuses the storage of `out` between calls so a stream of rows does not allocate per column
// once warm. Not thread-safe; one decoder per stream.
//
// Implements the Decoder seam (decode/decoder.h); the three-argument Decode writes into the
// caller's message directly.
//
// A table filter, when set, is asked about each row's table as soon as its schema and table
// are read; a row of a table it refuses comes out as kExcludedChange without its columns
// being parsed or checked, so a row the relay would not relay anyway can never stop it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/lsn.h"
#include "common/status.h"
#include "decode/change_event.h"
#include "decode/decoder.h"

namespace walrelay {

class Wal2JsonDecoder final : public Decoder {
 public:
  Wal2JsonDecoder();
  // Uses options.wal2json_add_tables (for StartReplicationOptions) and
  // options.catalog.table_columns (unchanged TOASTed values in updates).
  explicit Wal2JsonDecoder(DecoderOptions options);
  ~Wal2JsonDecoder();
  Wal2JsonDecoder(Wal2JsonDecoder&&) noexcept;
  Wal2JsonDecoder& operator=(Wal2JsonDecoder&&) noexcept;

  // `data_start` is the XLogData dataStart of the CopyData message carrying `json`; it names
  // the position in errors and is the confirmable position for a commit.
  Status Decode(std::string_view json, Lsn data_start, DecodedMessage& out);
  void SetTableFilter(TableFilter filter) override;

  // Decoder: every wal2json message is exactly one DecodedMessage.
  Status Decode(std::string_view json, Lsn data_start) override;
  const DecodedMessage* Next() override;
  std::string_view plugin_name() const override { return "wal2json"; }
  std::string StartReplicationOptions(int /*server_version*/) const override {
    return Wal2JsonStartOptions(options_.wal2json_add_tables);
  }

 private:
  class Parser;  // streaming (SAX) parse state, reused between messages
  std::unique_ptr<Parser> parser_;
  DecoderOptions options_;
  std::vector<Column> filled_;  // scratch for FillUnchangedToast
  void FillUnchangedToast(RowChange& change);
  DecodedMessage decoded_;  // what Next() hands out after Decode(json, data_start)
  bool pending_ = false;
  // The commit time of the transaction being decoded, so rows need not re-parse it.
  std::string last_timestamp_text_;
  int64_t last_timestamp_us_ = 0;
  int64_t current_commit_time_us_ = 0;
  std::optional<Lsn> previous_commit_end_;  // of the last transaction with a change or message
  bool txn_has_changes_ = false;
  // The commit time in microseconds since the epoch.
  Result<int64_t> CommitTime(std::string_view text);
  // RowChange::before for a delete, or an update whose identity is an old tuple.
  void FillBefore(RowChange& change);
};

}  // namespace walrelay
