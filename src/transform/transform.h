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
  // Whether Apply() may read, or keep, the topic and key the source gave a table row's record
  // (transform/change_event_source.h). A transform that answers false replaces both for every
  // such record it keeps, and reads neither before: as the first step of a chain, for every
  // record, it lets the source skip building them (TransformChain::SkipsSourceTopicAndKey).
  virtual bool ReadsSourceTopicAndKey() const { return true; }
  // The alias from `transforms=...`, for messages.
  virtual const std::string& alias() const = 0;
};

}  // namespace walrelay
