// The streaming-replication CopyData messages walrelay exchanges with a walsender.
// Pure parsing and encoding: no I/O. Every read is length-checked first.
//
//   'w' XLogData:          dataStart(8) walEnd(8) sendTime(8) payload...
//   'k' Primary keepalive: walEnd(8) sendTime(8) replyRequested(1)
//   'r' Standby status:    write(8) flush(8) apply(8) clientTime(8) replyRequested(1)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/lsn.h"
#include "common/status.h"

namespace walrelay {

struct XLogData {
  Lsn data_start;
  Lsn wal_end;
  std::string_view payload;  // points into the CopyData buffer it was parsed from
};

struct PrimaryKeepalive {
  Lsn wal_end;
  bool reply_requested = false;
};

Result<XLogData> ParseXLogData(std::string_view message);
Result<PrimaryKeepalive> ParseKeepalive(std::string_view message);

// Encodes an 'r' message. The server advances the slot from `flush` only.
std::string EncodeStandbyStatus(Lsn write, Lsn flush, Lsn apply, int64_t client_time_pg_micros,
                                bool reply_requested);

}  // namespace walrelay
