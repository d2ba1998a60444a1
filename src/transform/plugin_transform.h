// PluginTransform: a Transform backed by one instance of a loaded plugin, so the chain runs
// plugins exactly as it runs built-ins.
//
// The adapter owns the boundary rules of include/walrelay/transform.h: it renders a record
// whose value is still the structured change event (Record::change) as the change-event JSON
// before the plugin sees it (plugins only ever see bytes), lends the plugin a read-only view of
// the record, copies everything the plugin hands back before the next call, and turns a failed
// record into a kTransform Status naming the plugin, its file, the table, the event id (the
// `id` header, when there is one) and the LSN. The plugin's instance is destroyed with the
// transform, before the library can be unloaded.
//
// Single-threaded: Apply() runs on the loop thread, as the ABI promises plugins.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transform/change_event_source.h"
#include "transform/plugin_loader.h"
#include "transform/transform.h"

namespace walrelay {

// Creates one instance of `library` for `alias` with `config` (the `transforms.<alias>.*`
// keys without the prefix and without the chain's own keys). `context` supplies the connector
// name and the change-event rendering. A failing create() is a kConfig error naming the alias,
// the plugin, its file and the plugin's message.
Result<std::unique_ptr<Transform>> MakePluginTransform(
    const std::string& alias, std::shared_ptr<const PluginLibrary> library,
    const std::vector<std::pair<std::string, std::string>>& config, const SourceContext& context);

}  // namespace walrelay
