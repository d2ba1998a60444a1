#include "transform/chain.h"

#include <set>

#include "transform/registry.h"

namespace walrelay {

Result<TransformChain> TransformChain::Build(const Properties& config,
                                             const SourceContext& context) {
  auto predicates = BuildPredicates(config);
  if (!predicates.ok()) return predicates.status();
  // Read even when no plugin is configured, so it is never reported as an unknown key.
  TransformRegistry registry(context, config.GetList("plugin.path", {}));

  TransformChain chain;
  std::set<std::string> aliases;
  for (const std::string& alias : config.GetList("transforms", {})) {
    if (!aliases.insert(alias).second) {
      return Status::Config("'transforms' names '" + alias + "' twice");
    }
    const Properties scoped = config.Scoped("transforms." + alias + ".");
    Step step;
    std::set<std::string> chain_keys = {"predicate"};
    if (auto name = scoped.Get("predicate"); name && !Trim(*name).empty()) {
      auto it = predicates->find(Trim(*name));
      if (it == predicates->end()) {
        return Status::Config("'" + scoped.FullKey("predicate") + "' is '" + *name +
                              "', which 'predicates' does not name");
      }
      step.predicate = it->second;
      auto negate = scoped.GetBool("negate", false);
      if (!negate.ok()) return negate.status();
      step.negate = *negate;
      chain_keys.insert("negate");
    }
    auto transform = registry.Create(alias, scoped, chain_keys);
    if (!transform.ok()) return transform.status();
    step.transform = std::move(transform).value();
    chain.steps_.push_back(std::move(step));
  }
  return chain;
}

Result<TransformOutcome> TransformChain::Apply(Record& record) {
  for (auto& step : steps_) {
    if (!step.AppliesTo(record)) continue;
    auto outcome = step.transform->Apply(record);
    if (!outcome.ok()) {
      return outcome.status().WithContext("transform '" + step.transform->alias() + "'");
    }
    if (*outcome == TransformOutcome::kDrop) return TransformOutcome::kDrop;
  }
  return TransformOutcome::kKeep;
}

}  // namespace walrelay
