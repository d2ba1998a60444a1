// PolledRows: rows read from the outbox table turned into the decoded messages a replication
// stream gives for the same inserts, so both sources make byte-identical records. Each row is
// written as pgoutput sends an insert (Relation, Begin, Insert, Commit; text values, which is
// what ReadNext's text-format result holds) and read back through the same PgOutputDecoder the
// replication path uses, with the relay's catalog lookups: one code path renders column types
// and values, whichever source the row came from.
//
// Positions: a polled row has no WAL position. Each message takes the next value of a counter
// that only grows in this process (a row's record carries it as source.lsn), and consecutive
// rows of one inserting transaction (same xmin) form one source transaction, whose commit
// position the record pipeline's ledger confirms once Kafka acknowledged all of it. The
// transaction's id is the row's xmin; its commit time what OutboxBatch says.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/lsn.h"
#include "common/status.h"
#include "decode/pgoutput_decoder.h"
#include "polling/outbox_table.h"

namespace walrelay {

class PolledRows {
 public:
  using Handler = std::function<Status(const DecodedMessage&)>;

  explicit PolledRows(CatalogLookups catalog);

  // The position before any row: where the pipeline's ledger starts.
  Lsn start() const { return Lsn(1); }
  // Hands `batch`'s rows to `handle` as decoded messages, in order, and returns the position
  // that becomes confirmable once they are all acknowledged (the last commit's).
  Result<Lsn> Decode(const OutboxShape& shape, const OutboxBatch& batch, const Handler& handle);

 private:
  Status Feed(char kind, const Handler& handle);
  void BeginMessage(char kind);
  void U8(uint8_t v) { message_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void CString(const std::string& s);

  PgOutputDecoder decoder_;
  uint64_t next_position_ = 2;  // start() + 1
  std::string message_;
};

}  // namespace walrelay
