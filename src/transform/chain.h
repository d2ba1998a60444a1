// TransformChain: the transforms named by `transforms=a,b,...`, applied in that order, as
// Kafka Connect applies single-message transforms.
//
// Each alias is built from `transforms.<alias>.type` and its `transforms.<alias>.*` keys. A
// transform that drops the record ends the chain; an error fails the record with the alias
// added to the message. Single-threaded, like the transforms it holds.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "config/properties.h"
#include "transform/transform.h"

namespace walrelay {

class TransformChain {
 public:
  static Result<TransformChain> Build(const Properties& config);

  Result<TransformOutcome> Apply(Record& record);
  bool empty() const { return transforms_.empty(); }
  size_t size() const { return transforms_.size(); }

 private:
  std::vector<std::unique_ptr<Transform>> transforms_;
};

}  // namespace walrelay
