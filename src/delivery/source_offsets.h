// SourceOffset: the source position walrelay stores in `offsets.storage.topic`, in Kafka
// Connect's offsets-topic layout, so Connect's tooling (and a Debezium connector reading the
// same topic) can read it.
//
// Contract:
// - Key: `["<connector name>",{"server":"<topic.prefix>"}]`, Debezium PostgreSQL's source
//   partition inside Connect's [connector, partition] key.
// - Value: a JSON object with Debezium's PostgresOffsetContext members `lsn`, `lsn_commit`
//   (both the 64-bit LSN as a number), `txId` and `ts_usec`, plus walrelay's own
//   `walrelay_system_identifier` (a string: the 64-bit identifier does not fit Java's long),
//   `walrelay_timeline` and `walrelay_slot`. Unknown members are ignored when reading, so a
//   record Debezium wrote parses too (its walrelay members then read as absent).
// - A position inside a source transaction (exactly once, a source transaction split over
//   several Kafka transactions; delivery/inside_transaction.h) adds `walrelay_txn_xid`,
//   `walrelay_txn_first_lsn`, `walrelay_txn_lsn` and `walrelay_txn_at_lsn`: Kafka holds that
//   transaction's changes up to and including that one. `lsn_commit` stays the end of the last
//   whole source transaction (where the slot streams again from), `lsn` is the change's LSN
//   and `txId` the split transaction's.
// - A null value (Connect's tombstone) means "no offset".
// - ParseSourceOffset() errors say which member is wrong; callers add where the record was.
// - CheckOffsetOrigin() refuses an offset from another server or slot: skipping source
//   transactions up to a position of another database would lose them.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/lsn.h"
#include "common/status.h"
#include "delivery/inside_transaction.h"

namespace walrelay {

// Which server and history the WAL came from: LSNs mean the same only within one of these.
struct SourceIdentity {
  std::string system_id;
  int timeline = 0;
  bool operator==(const SourceIdentity&) const = default;
  std::string ToString() const;
};

struct SourceOffset {
  Lsn lsn;              // Debezium `lsn`: the last source position included
  Lsn lsn_commit;       // Debezium `lsn_commit`: commit LSN of the last whole source transaction
  int64_t tx_id = 0;    // `txId`: its transaction id
  int64_t ts_usec = 0;  // `ts_usec`: its commit time, microseconds since the Unix epoch
  std::string system_identifier;  // `walrelay_system_identifier`: the server's, as text
  uint32_t timeline = 0;          // `walrelay_timeline`
  std::string slot;               // `walrelay_slot`: the replication slot's name
  // `walrelay_txn_*`: Kafka holds the source transaction after `lsn_commit` up to this change.
  std::optional<InsideTransaction> inside;

  friend bool operator==(const SourceOffset&, const SourceOffset&) = default;
};

// The stored position as read again once the slot was taken (DeliveryGuarantee::SlotTaken):
// `read` false when it was not read again (nothing can have changed it).
struct StoredReread {
  bool read = false;
  std::optional<SourceOffset> stored;
};

// Connect's offsets-topic key for this connector and `topic.prefix`.
std::string SourceOffsetKey(const std::string& connector_name, const std::string& topic_prefix);
std::string SerializeSourceOffset(const SourceOffset& offset);
Result<SourceOffset> ParseSourceOffset(std::string_view json);

// OK when `offset` came from the server `system_identifier` and the slot `slot`; otherwise a
// kOffsetMismatch error naming both servers or both slots.
Status CheckOffsetOrigin(const SourceOffset& offset, const std::string& system_identifier,
                         const std::string& slot);

}  // namespace walrelay
