// TransformChain: the transforms named by `transforms=a,b,...`, applied in that order, as
// Kafka Connect applies single-message transforms.
//
// Each alias is built by TransformRegistry from `transforms.<alias>.type` and its
// `transforms.<alias>.*` keys; built-ins and plugins look the same here. An alias may be made
// conditional with `transforms.<alias>.predicate=<name>` (one of `predicates=...`, see
// predicates.h), and then `transforms.<alias>.negate=true` inverts the condition, as in Kafka
// Connect; a record the condition excludes passes that transform unchanged. Without a
// predicate, `negate` is an ordinary key of the transform (the filter plugin has one).
// A transform that drops the record ends the chain; an error fails the record (kTransform)
// with the alias added to the message, and the caller's error policy decides what follows.
// `plugin.path` is read here.
//
// Plugins are loaded and created once, in Build(). Single-threaded, like the transforms it
// holds.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "config/properties.h"
#include "transform/change_event_source.h"
#include "transform/predicates.h"
#include "transform/transform.h"

namespace walrelay {

class TransformChain {
 public:
  // `config` is the whole connector config; `context` names the connector, renders change
  // events for plugins that get a record no transform has rewritten yet, and holds the
  // handling modes transforms render columns with (connect_column.h).
  static Result<TransformChain> Build(const Properties& config, const SourceContext& context);

  Result<TransformOutcome> Apply(Record& record);
  // True when the first step applies to every record and replaces a table row's topic and key
  // without reading them (Transform::ReadsSourceTopicAndKey): the source need not build them.
  bool SkipsSourceTopicAndKey() const {
    return !steps_.empty() && steps_.front().predicate == nullptr &&
           !steps_.front().transform->ReadsSourceTopicAndKey();
  }
  bool empty() const { return steps_.empty(); }
  size_t size() const { return steps_.size(); }

 private:
  struct Step {
    std::unique_ptr<Transform> transform;
    std::shared_ptr<const Predicate> predicate;  // nullptr: applies to every record
    bool negate = false;

    bool AppliesTo(const Record& record) const {
      return predicate == nullptr || predicate->Test(record) != negate;
    }
  };

  std::vector<Step> steps_;
};

}  // namespace walrelay
