// SkippedOperations: Debezium's `skipped.operations`, the row operations a relay does not emit
// ("c", "u", "d", "t" comma-separated, or "none"; unset: "t"), and how they scope the
// publication a relay creates (Debezium 3.6: only when the key is set, the publication gets
// WITH (publish = '...') naming the operations left, so skipped ones never leave PostgreSQL).
// Pure values and functions: parsed once with the config, read by the pipeline (which skips
// those changes) and by pg/publication.h.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"
#include "config/properties.h"

namespace walrelay {

struct SkippedOperations {
  bool set = false;  // the key was given (the publication is scoped only then)
  bool insert = false;
  bool update = false;
  bool remove = false;
  bool truncate = true;

  // Whether a change with Debezium's op letter `op` ('c', 'u', 'd', 't') is skipped.
  bool Skips(char op) const;
  // The publication's `publish` value, "insert, update, delete, truncate" less the skipped
  // operations; nullopt when the key is unset or skips nothing (the publication publishes
  // everything, PostgreSQL's default), as Debezium 3.6 writes it.
  std::optional<std::string> PublishOption() const;
  // The same as the flags pg_publication holds (pubinsert, pubupdate, pubdelete,
  // pubtruncate): what a publication must publish to carry exactly the operations not skipped.
  bool Publishes(char op) const { return !Skips(op); }
};

// Reads `skipped.operations`; a value other than c, u, d, t or none is a config error naming
// the key and the value.
Result<SkippedOperations> ParseSkippedOperations(const Properties& p);

}  // namespace walrelay
