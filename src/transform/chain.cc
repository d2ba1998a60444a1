#include "transform/chain.h"

#include "transform/outbox_event_router.h"

namespace walrelay {

Result<TransformChain> TransformChain::Build(const Properties& config) {
  TransformChain chain;
  for (const std::string& alias : config.GetList("transforms", {})) {
    const Properties scoped = config.Scoped("transforms." + alias + ".");
    auto type = scoped.GetRequired("type");
    if (!type.ok()) return type.status();
    if (*type == kOutboxEventRouterType) {
      auto router = MakeOutboxEventRouter(alias, scoped);
      if (!router.ok()) return router.status();
      chain.transforms_.push_back(std::move(router).value());
    } else {
      return Status::Config("'" + scoped.FullKey("type") + "' is '" + *type +
                            "', which is not a known transform; built-in types: " +
                            kOutboxEventRouterType);
    }
  }
  return chain;
}

Result<TransformOutcome> TransformChain::Apply(Record& record) {
  for (auto& t : transforms_) {
    auto outcome = t->Apply(record);
    if (!outcome.ok()) return outcome.status().WithContext("transform '" + t->alias() + "'");
    if (*outcome == TransformOutcome::kDrop) return TransformOutcome::kDrop;
  }
  return TransformOutcome::kKeep;
}

}  // namespace walrelay
