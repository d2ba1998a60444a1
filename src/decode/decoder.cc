#include "decode/decoder.h"

#include "decode/pgoutput_decoder.h"
#include "decode/wal2json_decoder.h"

namespace walrelay {

namespace {

// A replication command's string literal: single quotes doubled, backslashes plain.
std::string QuoteLiteral(std::string_view value) {
  std::string quoted = "'";
  for (char c : value) {
    if (c == '\'') quoted += '\'';
    quoted += c;
  }
  return quoted + "'";
}

}  // namespace

std::string Wal2JsonStartOptions(std::string_view add_tables) {
  std::string options = "\"format-version\" '2', \"include-xids\" '1', \"include-timestamp\" '1', "
                        "\"include-lsn\" '1', \"include-pk\" '1', \"include-types\" '1'";
  if (!add_tables.empty()) options += ", \"add-tables\" " + QuoteLiteral(add_tables);
  return options;
}

std::string PgOutputStartOptions(std::string_view publication_names, bool with_messages) {
  // messages: pg_logical_emit_message() records are part of the stream, as with wal2json.
  return "proto_version '1', publication_names " + QuoteLiteral(publication_names) +
         (with_messages ? ", messages 'true'" : "");
}

Result<std::unique_ptr<Decoder>> MakeDecoder(std::string_view plugin_name,
                                             const DecoderOptions& options) {
  if (plugin_name == "wal2json")
    return std::unique_ptr<Decoder>(std::make_unique<Wal2JsonDecoder>(options));
  if (plugin_name == "pgoutput")
    return std::unique_ptr<Decoder>(std::make_unique<PgOutputDecoder>(options));
  return Status::Config("logical decoding plugin '" + std::string(plugin_name) +
                        "' is not supported (supported: pgoutput, wal2json)");
}

bool IsNumberTypeName(std::string_view t) {
  return t == "integer" || t == "bigint" || t == "smallint" || t == "real" ||
         t == "double precision" || t == "oid" || t.starts_with("numeric");
}

}  // namespace walrelay
