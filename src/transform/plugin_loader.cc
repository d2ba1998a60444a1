#include "transform/plugin_loader.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>

namespace walrelay {
namespace {

// Version 1's descriptor ends with `destroy`; a descriptor shorter than that cannot be used.
constexpr size_t kMinDescriptorSize =
    offsetof(walrelay_transform_plugin, destroy) + sizeof(walrelay_transform_plugin::destroy);

std::string DlError() {
  const char* error = dlerror();
  return error ? error : "unknown dynamic loader error";
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string JoinDirs(const std::vector<std::string>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out;
}

}  // namespace

void PluginLibrary::DlCloser::operator()(void* handle) const {
  if (handle != nullptr) dlclose(handle);
}

std::string PluginLibrary::Describe() const { return "plugin '" + name_ + "' (" + path_ + ")"; }

Result<std::shared_ptr<const PluginLibrary>> PluginLibrary::Load(const std::string& path) {
  dlerror();  // clear any stale error so the one we report is ours
  DlHandle handle(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (!handle) return Status::Config("cannot load plugin file '" + path + "': " + DlError());

  dlerror();
  void* symbol = dlsym(handle.get(), WALRELAY_TRANSFORM_ENTRY_SYMBOL);
  if (symbol == nullptr) {
    return Status::Config("plugin file '" + path +
                          "' has no '" WALRELAY_TRANSFORM_ENTRY_SYMBOL
                          "' symbol, so it is not a walrelay transform plugin (or it was built "
                          "without WALRELAY_TRANSFORM_EXPORT): " +
                          DlError());
  }
  // POSIX guarantees that dlsym's result can be converted to the function pointer it names.
  const auto entry = reinterpret_cast<walrelay_transform_entry_fn>(symbol);
  const walrelay_transform_plugin* descriptor = entry(WALRELAY_TRANSFORM_ABI_VERSION);
  if (descriptor == nullptr) {
    return Status::Config("plugin file '" + path + "' does not support transform ABI version " +
                          std::to_string(WALRELAY_TRANSFORM_ABI_VERSION) +
                          " (its entry function returned NULL); rebuild it against this "
                          "walrelay's include/walrelay/transform.h");
  }
  std::shared_ptr<PluginLibrary> library(new PluginLibrary(std::move(handle), path));
  WALRELAY_RETURN_IF_ERROR(library->ReadDescriptor(*descriptor));
  spdlog::info("loaded transform {} version {}", library->Describe(),
               library->version_.empty() ? "(none)" : library->version_);
  return std::shared_ptr<const PluginLibrary>(std::move(library));
}

Status PluginLibrary::ReadDescriptor(const walrelay_transform_plugin& descriptor) {
  const std::string file = "plugin file '" + path_ + "'";
  // The version first: a descriptor of another version may not have the fields after it.
  if (descriptor.abi_version != WALRELAY_TRANSFORM_ABI_VERSION) {
    return Status::Config(file + " was built for transform ABI version " +
                          std::to_string(descriptor.abi_version) + ", but this walrelay has " +
                          "version " + std::to_string(WALRELAY_TRANSFORM_ABI_VERSION) +
                          "; rebuild it against this walrelay's include/walrelay/transform.h");
  }
  if (descriptor.struct_size < kMinDescriptorSize) {
    return Status::Config(file + " has a descriptor of " + std::to_string(descriptor.struct_size) +
                          " bytes; ABI version " + std::to_string(WALRELAY_TRANSFORM_ABI_VERSION) +
                          " needs at least " + std::to_string(kMinDescriptorSize));
  }
  // A newer plugin's descriptor may be larger (fields appended); an older one leaves this
  // host's extra fields zero, which means "not implemented".
  std::memcpy(&api_, &descriptor, std::min<size_t>(descriptor.struct_size, sizeof(api_)));
  api_.struct_size = sizeof(api_);
  name_ = api_.name != nullptr && *api_.name != '\0' ? api_.name
                                                     : std::filesystem::path(path_).stem().string();
  version_ = api_.version != nullptr ? api_.version : "";
  std::string missing;
  if (api_.create == nullptr) missing += " create";
  if (api_.apply == nullptr) missing += " apply";
  if (api_.destroy == nullptr) missing += " destroy";
  if (!missing.empty()) {
    return Status::Config(Describe() + " lacks required callback(s):" + missing);
  }
  return Status::Ok();
}

Result<std::string> PluginLoader::Resolve(const std::string& type) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (type.find('/') != std::string::npos) {
    if (!fs::is_regular_file(type, ec))
      return Status::Config("plugin file '" + type + "' does not exist");
    return type;
  }
  const std::string file = EndsWith(type, ".so") ? type : type + ".so";
  if (plugin_path_.empty()) {
    return Status::Config("'plugin.path' is not set, so no directory is searched for '" + file +
                          "'");
  }
  for (const auto& dir : plugin_path_) {
    const fs::path candidate = fs::path(dir) / file;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return Status::Config("no file '" + file + "' in 'plugin.path' (" + JoinDirs(plugin_path_) + ")");
}

Result<std::shared_ptr<const PluginLibrary>> PluginLoader::Load(const std::string& path) {
  std::error_code ec;
  std::string canonical = std::filesystem::canonical(path, ec).string();
  if (ec) canonical = path;
  if (auto it = loaded_.find(canonical); it != loaded_.end()) return it->second;
  auto library = PluginLibrary::Load(path);
  if (!library.ok()) return library.status();
  loaded_.emplace(canonical, *library);
  return std::move(library).value();
}

}  // namespace walrelay
