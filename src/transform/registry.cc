#include "transform/registry.h"

#include <functional>
#include <utility>

#include "transform/message_event.h"
#include "transform/outbox_event_router.h"
#include "transform/plugin_transform.h"

namespace walrelay {
namespace {

constexpr const char* kFilterType = "org.apache.kafka.connect.transforms.Filter";

// Kafka Connect's Filter: drops every record it is applied to, so that with a predicate it
// drops exactly the records the predicate selects.
class FilterTransform final : public Transform {
 public:
  explicit FilterTransform(std::string alias) : alias_(std::move(alias)) {}
  Result<TransformOutcome> Apply(Record&) override { return TransformOutcome::kDrop; }
  const std::string& alias() const override { return alias_; }

 private:
  const std::string alias_;
};

using BuiltInFactory = std::function<Result<std::unique_ptr<Transform>>(
    const std::string& alias, const Properties&, const ColumnModes&)>;

struct BuiltInType {
  std::vector<std::string> names;  // the class name first, then accepted aliases
  BuiltInFactory make;
};

const std::vector<BuiltInType>& BuiltInTypes() {
  static const std::vector<BuiltInType> kTypes = {
      {{kOutboxEventRouterType}, MakeOutboxEventRouter},
      {{kDecodeMessageContentType, "DecodeLogicalDecodingMessageContent"},
       [](const std::string& alias, const Properties& props, const ColumnModes&) {
         return MakeDecodeMessageContent(alias, props);
       }},
      {{kFilterType, "Filter"},
       [](const std::string& alias, const Properties&,
          const ColumnModes&) -> Result<std::unique_ptr<Transform>> {
         return std::unique_ptr<Transform>(std::make_unique<FilterTransform>(alias));
       }},
  };
  return kTypes;
}

}  // namespace

Result<std::unique_ptr<Transform>> TransformRegistry::Create(
    const std::string& alias, const Properties& props, const std::set<std::string>& chain_keys) {
  auto type = props.GetRequired("type");
  if (!type.ok()) return type.status();
  const std::string name = Trim(*type);
  for (const BuiltInType& builtin : BuiltInTypes()) {
    for (const std::string& n : builtin.names)
      if (name == n) return builtin.make(alias, props, context_.modes);
  }
  return CreatePlugin(alias, name, props, chain_keys);
}

Result<std::unique_ptr<Transform>> TransformRegistry::CreatePlugin(
    const std::string& alias, const std::string& type, const Properties& props,
    const std::set<std::string>& chain_keys) {
  auto file = loader_.Resolve(type);
  if (!file.ok()) {
    std::string builtins;
    for (const BuiltInType& builtin : BuiltInTypes())
      builtins += (builtins.empty() ? "" : ", ") + builtin.names.front();
    return Status::Config("'" + props.FullKey("type") + "' is '" + type +
                          "', which is not a built-in transform (" + builtins +
                          ") and not a plugin: " + file.status().message());
  }
  auto library = loader_.Load(*file);
  if (!library.ok()) return library.status().WithContext("transform '" + alias + "'");

  std::vector<std::pair<std::string, std::string>> config;
  for (const auto& [full_key, value] : props.values()) {
    if (full_key.compare(0, props.prefix().size(), props.prefix()) != 0) continue;
    const std::string key = full_key.substr(props.prefix().size());
    if (key == "type" || chain_keys.count(key)) continue;
    props.MarkRead(full_key);
    config.emplace_back(key, value);
  }
  return MakePluginTransform(alias, std::move(library).value(), config, context_);
}

}  // namespace walrelay
