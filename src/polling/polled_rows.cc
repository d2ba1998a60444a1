#include "polling/polled_rows.h"

#include <cstdlib>
#include <cstring>

#include "common/pg_time.h"

namespace walrelay {

PolledRows::PolledRows(CatalogLookups catalog) : decoder_(DecoderOptions{"", "", catalog}) {}

void PolledRows::U16(uint16_t v) {
  for (int shift = 8; shift >= 0; shift -= 8) U8(static_cast<uint8_t>(v >> shift));
}
void PolledRows::U32(uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) U8(static_cast<uint8_t>(v >> shift));
}
void PolledRows::U64(uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) U8(static_cast<uint8_t>(v >> shift));
}
void PolledRows::CString(const std::string& s) {
  message_.append(s);
  message_.push_back('\0');
}

void PolledRows::BeginMessage(char kind) {
  message_.clear();
  message_.push_back(kind);
}

Status PolledRows::Feed(char kind, const Handler& handle) {
  // A Relation message only updates the decoder's state; it takes no position of its own.
  const Lsn at(kind == 'R' ? next_position_ : next_position_++);
  WALRELAY_RETURN_IF_ERROR(decoder_.Decode(message_, at));
  while (const DecodedMessage* decoded = decoder_.Next()) {
    WALRELAY_RETURN_IF_ERROR(handle(*decoded));
  }
  return Status::Ok();
}

Result<Lsn> PolledRows::Decode(const OutboxShape& shape, const OutboxBatch& batch,
                               const Handler& handle) {
  // The table's shape, as pgoutput announces it before a relation's first row in a session.
  BeginMessage('R');
  U32(shape.relation_oid);
  CString(shape.schema);
  CString(shape.table);
  U8('d');
  U16(static_cast<uint16_t>(shape.columns.size()));
  for (const auto& column : shape.columns) {
    U8(column.key ? 1 : 0);
    CString(column.name);
    U32(column.type_oid);
    U32(static_cast<uint32_t>(column.typmod));
  }
  WALRELAY_RETURN_IF_ERROR(Feed('R', handle));

  Lsn last_commit;
  for (int row = 0; row < batch.rows;) {
    const char* xid_text = batch.value(row, batch.xid_field());
    const int64_t commit_us =
        std::strtoll(batch.value(row, batch.commit_time_field()), nullptr, 10);
    const uint64_t pg_time = static_cast<uint64_t>(commit_us - kPgEpochOffsetMicros);
    const uint32_t xid = static_cast<uint32_t>(std::strtoull(xid_text, nullptr, 10));
    BeginMessage('B');
    U64(0);  // the commit record's LSN: none here
    U64(pg_time);
    U32(xid);
    WALRELAY_RETURN_IF_ERROR(Feed('B', handle));
    // The rows of this transaction that follow one another in the table's order.
    for (; row < batch.rows && std::strcmp(batch.value(row, batch.xid_field()), xid_text) == 0;
         ++row) {
      BeginMessage('I');
      U32(shape.relation_oid);
      U8('N');
      U16(static_cast<uint16_t>(batch.columns));
      for (int field = 0; field < batch.columns; ++field) {
        if (batch.is_null(row, field)) {
          U8('n');
          continue;
        }
        U8('t');
        const int length = batch.length(row, field);
        U32(static_cast<uint32_t>(length));
        message_.append(batch.value(row, field), static_cast<size_t>(length));
      }
      WALRELAY_RETURN_IF_ERROR(Feed('I', handle));
    }
    BeginMessage('C');
    U8(0);
    U64(0);
    last_commit = Lsn(next_position_ + 1);
    U64(last_commit.value());  // the end of the "commit record": the confirmable position
    U64(pg_time);
    WALRELAY_RETURN_IF_ERROR(Feed('C', handle));
    ++next_position_;  // the commit's end lies past the commit message's own position
  }
  return last_commit;
}

}  // namespace walrelay
