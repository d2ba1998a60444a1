// TransformRegistry: turns `transforms.<alias>.type` into a Transform, built-in or plugin, so
// the chain never needs to know which kind it holds.
//
// Built-in types are matched first:
//   io.debezium.transforms.outbox.EventRouter    the outbox event router (event-router.md)
//   org.apache.kafka.connect.transforms.Filter   drops every record (use it with a predicate);
//                                                also accepted as `Filter`
// Any other type is a plugin (docs/plugins.md): a path to a shared object, or a name found as
// `<name>.so` in the directories of `plugin.path`. The plugin receives every
// `transforms.<alias>.*` key except the ones the chain keeps for itself, and they are all
// marked as read: refusing unknown keys is the plugin's job. Each plugin file is loaded once.
//
// Errors are kConfig and name the alias, the key, and for plugins the file and the reason.
// Used at start, on one thread.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/properties.h"
#include "transform/change_event_source.h"
#include "transform/plugin_loader.h"
#include "transform/transform.h"

namespace walrelay {

class TransformRegistry {
 public:
  // `context` names the connector, renders change events for plugins and holds the handling
  // modes the EventRouter renders columns with; `plugin_path` is the list of directories from
  // `plugin.path`.
  TransformRegistry(SourceContext context, std::vector<std::string> plugin_path)
      : context_(std::move(context)), loader_(std::move(plugin_path)) {}

  // `props` is scoped to `transforms.<alias>.`; `chain_keys` are the keys under it that
  // configure the chain, not the transform (always `type`).
  Result<std::unique_ptr<Transform>> Create(const std::string& alias, const Properties& props,
                                            const std::set<std::string>& chain_keys);

 private:
  Result<std::unique_ptr<Transform>> CreatePlugin(const std::string& alias, const std::string& type,
                                                  const Properties& props,
                                                  const std::set<std::string>& chain_keys);

  SourceContext context_;
  PluginLoader loader_;
};

}  // namespace walrelay
