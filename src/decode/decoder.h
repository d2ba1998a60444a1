// Decoder: the seam between the replication stream and the relay. The relay reads XLogData
// payloads and hands each one, with its dataStart, to a Decoder; it never looks at a
// plugin's format itself. Wal2JsonDecoder (decode/wal2json_decoder.h) and PgOutputDecoder
// (decode/pgoutput_decoder.h) implement it; MakeDecoder picks one by plugin name.
//
// What the messages carry (DecodedMessage, one kind at a time):
//   kBegin   begin.xid, begin.commit_time_ms (known at begin in both plugins), begin.first_lsn
//            = the dataStart of the begin message (the transaction's first WAL record).
//   kChange  change: op, schema, table, columns (new row image), identity (old key or old
//            row, as wal2json's "identity" gives it), primary_key (column names in column
//            order, as wal2json's "pk"), xid and commit_time_ms of the enclosing
//            transaction, lsn = the row's WAL record (its dataStart). Values are
//            PostgreSQL's text output, typed and marked as change_event.h says, identical
//            for both plugins.
//   kCommit  commit.end_lsn = the end of the commit record: the position that becomes
//            confirmable once every row before it is delivered. commit.xid, commit_time_ms.
//   kMessage message: a pg_logical_emit_message() record; lsn = its dataStart, transactional,
//            prefix, content. A transactional one arrives between its transaction's begin and
//            commit, and only if the transaction committed.
//   kExcludedChange  a row of a table the TableFilter refused: only change.schema,
//            change.table and change.lsn are set; its values were never decoded or checked.
// One payload gives zero messages (pgoutput's Relation, Type and Origin, which only update
// the decoder's state), one, or several (pgoutput's Truncate: one change per table, as
// wal2json writes them): after Decode(payload, data_start), call Next() until it returns
// nullptr.
//
// Errors: a payload that cannot be decoded is a kDecode Status whose message names the
// payload's LSN; the decoder never crashes on malformed input (fuzz/ checks this).
// Decoders reuse their storage between payloads (no per-column allocation once warm) and are
// not thread-safe: one decoder per stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/lsn.h"
#include "common/status.h"
#include "decode/change_event.h"

namespace walrelay {

enum class MessageKind { kBegin, kChange, kCommit, kMessage, kExcludedChange };

// True when rows of schema.table are wanted.
using TableFilter = std::function<bool(std::string_view schema, std::string_view table)>;

struct DecodedMessage {
  MessageKind kind = MessageKind::kBegin;
  TxnBegin begin;          // valid when kind == kBegin
  RowChange change;        // valid when kind == kChange or kExcludedChange
  TxnCommit commit;        // valid when kind == kCommit
  LogicalMessage message;  // valid when kind == kMessage
};

class Decoder {
 public:
  virtual ~Decoder() = default;

  // Decodes one XLogData payload whose dataStart is `data_start`; on success Next() yields
  // the messages it holds. On error nothing is yielded.
  virtual Status Decode(std::string_view payload, Lsn data_start) = 0;
  // The next message of the last decoded payload, or nullptr when there are no more. The
  // pointee is the decoder's own storage: valid until the next Decode or Next call.
  virtual const DecodedMessage* Next() = 0;
  // Asked about each row's table before its values are decoded (see kExcludedChange).
  virtual void SetTableFilter(TableFilter filter) = 0;

  // The logical decoding output plugin this decoder reads ("wal2json", "pgoutput"): the
  // plugin a slot must be created with.
  virtual std::string_view plugin_name() const = 0;
  // The option list of START_REPLICATION ... LOGICAL <lsn> (<options>) this decoder needs
  // from a server of `server_version` (PQserverVersion's form, e.g. 150018), without the
  // parentheses. Only reads the options given at construction: safe from any thread.
  virtual std::string StartReplicationOptions(int server_version) const = 0;
};

// A table column as the catalog describes it: name and format_type(atttypid, atttypmod).
struct CatalogColumn {
  std::string name;
  std::string type;
  bool not_null = false;  // NOT NULL (Debezium's optional=false)
};

// Optional answers from the database's catalog that a stream does not carry (see
// docs/architecture.md, "Decoder seam"). The pgoutput decoder asks once per Relation or Type
// message, never per row; unset or nullopt means "use what the stream says".
struct CatalogLookups {
  // The table's primary key column names in column order (wal2json's "pk"; pgoutput only flags
  // replica identity columns, which are every column under REPLICA IDENTITY FULL).
  std::function<std::optional<std::vector<std::string>>(std::string_view schema,
                                                        std::string_view table)>
      primary_key;
  // format_type(type_oid, typmod) for a type that is not built in (pgoutput names a domain
  // by its base type).
  std::function<std::optional<std::string>(uint32_t type_oid, int32_t typmod)> type_name;
  // The table's columns in column order (the pgoutput decoder asks once per Relation message,
  // for which columns are NOT NULL). wal2json leaves unchanged TOASTed values out of an
  // update's row without saying which; with this lookup the wal2json decoder puts them back
  // (the old value when the row's identity holds it, else the unavailable-value placeholder),
  // as the pgoutput decoder gives them. Asked for every update the wal2json decoder reads, so
  // the caller keeps the answers.
  std::function<std::optional<std::vector<CatalogColumn>>(std::string_view schema,
                                                          std::string_view table)>
      table_columns;
};

struct DecoderOptions {
  // pgoutput: the publications to read, comma-separated as publication_names takes them.
  std::string publication_names = "dbz_publication";
  // wal2json: its add-tables option (RelaySettings::Wal2JsonAddTables()); empty for none.
  std::string wal2json_add_tables;
  CatalogLookups catalog;
};

// START_REPLICATION options of each plugin, for callers that need them without a decoder.
// The values are quoted as SQL literals.
std::string Wal2JsonStartOptions(std::string_view add_tables = {});
// pgoutput's `messages` option exists from PostgreSQL 14 on; older servers refuse it.
std::string PgOutputStartOptions(std::string_view publication_names, bool with_messages = true);
inline constexpr int kPgOutputMessagesSince = 140000;

// A decoder for `plugin_name` ("wal2json" or "pgoutput"); a kConfig error naming the plugin
// otherwise.
Result<std::unique_ptr<Decoder>> MakeDecoder(std::string_view plugin_name,
                                             const DecoderOptions& options = {});

// Whether values of a column of this type (as wal2json prints type names) are marked
// ValueKind::kNumber: wal2json writes int2/int4/int8/oid/float4/float8/numeric unquoted, and NaN
// or infinities of those types as null. Any type whose name starts with "numeric" counts, as it
// always has in the wal2json path (numeric arrays too: their text, not a JSON number, is then
// written as a string by transform/change_event_source).
bool IsNumberTypeName(std::string_view type);

// Debezium's unavailable.value.placeholder default: the value of an unchanged TOASTed column
// that the stream does not carry.
inline constexpr std::string_view kUnavailableValuePlaceholder = "__debezium_unavailable_value";
// The same for a bytea column, whose values are hex: the placeholder's bytes.
inline constexpr std::string_view kUnavailableValuePlaceholderHex =
    "5f5f646562657a69756d5f756e617661696c61626c655f76616c7565";

}  // namespace walrelay
