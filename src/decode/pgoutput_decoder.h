// PgOutputDecoder: the Decoder (decode/decoder.h) for PostgreSQL's built-in pgoutput plugin,
// logical replication protocol version 1 (PostgreSQL 10+), started with
// PgOutputStartOptions(): proto_version '1', publication_names, messages 'true'.
//
// Relation ('R') and Type ('Y') messages are cached by id and replaced when the server sends
// them again (after ALTER TABLE, or in a new session); a row of a relation never announced is
// a decode error. Begin, Commit, Insert, Update, Delete, Truncate (one change per table) and
// Message map to DecodedMessages; Origin is read and skipped.
//
// Rows come out exactly as Wal2JsonDecoder gives the same rows:
//   - Column.type is format_type(type, typmod) as wal2json prints it, from the Relation's type
//     OID and typmod (built-in types) or the Type message's name (others; a domain is named
//     by its base type there unless CatalogLookups::type_name says otherwise);
//   - ValueKind and text as wal2json renders them: numbers unquoted, their NaN/Infinity null,
//     booleans true/false, bytea as hex without "\x";
//   - primary_key from CatalogLookups::primary_key, else from the Relation's key flags
//     (column order, as wal2json's "pk"; none under REPLICA IDENTITY FULL, where every column
//     is flagged, or NOTHING);
//   - identity as wal2json's "identity": the old key (DEFAULT / USING INDEX) or old row (FULL);
//     for an update that kept its key, the key columns of the new row.
// An unchanged TOASTed value ('u') in an update's new row is taken from the old row when the
// stream carries it (REPLICA IDENTITY FULL), else it is Debezium's unavailable-value
// placeholder (bytea: the placeholder's bytes); Wal2JsonDecoder gives the same with
// CatalogLookups::table_columns (docs/architecture.md, "Decoder seam").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "decode/decoder.h"

namespace walrelay {

class PgOutputDecoder final : public Decoder {
 public:
  explicit PgOutputDecoder(DecoderOptions options = {});
  ~PgOutputDecoder() override;
  PgOutputDecoder(PgOutputDecoder&&) noexcept;
  PgOutputDecoder& operator=(PgOutputDecoder&&) noexcept;

  Status Decode(std::string_view payload, Lsn data_start) override;
  const DecodedMessage* Next() override;
  void SetTableFilter(TableFilter filter) override;
  std::string_view plugin_name() const override { return "pgoutput"; }
  std::string StartReplicationOptions(int server_version) const override;

 private:
  struct Relation;
  class Reader;

  Status DecodeRelation(Reader& in, Lsn at);
  Status DecodeType(Reader& in, Lsn at);
  Status DecodeRow(char kind, Reader& in, Lsn at);
  // Debezium's before image from the old tuple in change.identity (RowChange::before).
  static void FillBefore(const Relation& relation, RowChange& change);
  Status DecodeTruncate(Reader& in, Lsn at);
  Result<Relation*> FindRelation(uint32_t id, Lsn at);
  bool Wanted(Relation& relation);
  void RenderTypes(Relation& relation);
  // Reads one TupleData into `out` (all columns, or the key columns only), keeping the raw
  // kinds in `markers` ('n', 'u', 't', 'b' per relation column).
  Status ReadTuple(Reader& in, const Relation& relation, bool key_only, std::vector<Column>& out,
                   std::string& markers, Lsn at);

  DecoderOptions options_;
  TableFilter table_filter_;
  std::unordered_map<uint32_t, std::unique_ptr<Relation>> relations_;
  struct TypeName {
    std::string nspname;
    std::string typname;
  };
  std::unordered_map<uint32_t, TypeName> types_;

  // The transaction being decoded (pgoutput v1 names xid and time only in Begin).
  uint32_t xid_ = 0;
  int64_t commit_time_ms_ = 0;
  int64_t commit_time_us_ = 0;
  std::optional<Lsn> previous_commit_end_;

  DecodedMessage decoded_;
  size_t pending_ = 0;  // messages left for Next()
  // A Truncate's remaining tables, handed out one per Next().
  std::vector<uint32_t> truncated_;
  size_t next_truncated_ = 0;
  Lsn truncate_lsn_;
  // Scratch for old rows and markers, reused between rows.
  std::vector<Column> old_row_;
  std::string new_markers_, old_markers_;
};

}  // namespace walrelay
