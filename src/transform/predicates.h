// Predicates: Kafka Connect's conditions for applying a transform to some records only.
//
// `predicates=p,q` names them; `predicates.<name>.type` picks one of Kafka Connect's built-in
// predicates (the full class name or its simple name) and `predicates.<name>.*` configures it:
//   TopicNameMatches   pattern: a Java regex that must match the whole topic name
//   HasHeaderKey       name: true when the record has at least one header with that name
//   RecordIsTombstone  true when the value is null
// A transform uses one with `transforms.<alias>.predicate=<name>` (and `negate=true` to apply
// it to the records that do not match); that wiring lives in TransformChain.
//
// Every key is read and validated by BuildPredicates(); errors are kConfig and name the key.
// Test() is const and cheap; predicates are shared by the transforms that name them.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "config/properties.h"
#include "transform/record.h"

namespace walrelay {

class Predicate {
 public:
  virtual ~Predicate() = default;
  virtual bool Test(const Record& record) const = 0;
};

using PredicateMap = std::map<std::string, std::shared_ptr<const Predicate>>;

// Builds every predicate `predicates` names, from the whole (unscoped) config.
Result<PredicateMap> BuildPredicates(const Properties& config);

}  // namespace walrelay
