// Transform: the contract every transform in the chain implements, built-in or plugin-backed
// (Kafka Connect's single-message transform, 1 record in, 0 or 1 out).
//
// Apply() runs on the relay's event-loop thread, one record at a time, and must not block.
// It edits the record in place and says whether to keep or drop it; an error Status fails the
// record, and the host's error policy decides what happens next (stop without confirming).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "transform/record.h"

namespace walrelay {

enum class TransformOutcome { kKeep, kDrop };

class Transform {
 public:
  virtual ~Transform() = default;
  virtual Result<TransformOutcome> Apply(Record& record) = 0;
  // The alias from `transforms=...`, for messages.
  virtual const std::string& alias() const = 0;
};

}  // namespace walrelay
