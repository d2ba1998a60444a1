// Loading transform plugins: shared objects that implement include/walrelay/transform.h.
//
// PluginLibrary owns one dlopen handle (RTLD_NOW, so unresolved symbols fail here and not on
// the first record; RTLD_LOCAL, so a plugin's symbols never leak into walrelay or another
// plugin) and a copy of the plugin's descriptor, checked before any callback is trusted: the
// entry symbol, the ABI version (first, because a descriptor of another version may not even
// have the fields that follow), the descriptor size and the three callbacks. Every error names
// the file and the reason. The library is closed when the last owner lets go, so instances
// (PluginTransform) hold a shared_ptr and are destroyed before it.
//
// PluginLoader turns a transform `type` into a file, Kafka Connect style: a type containing
// '/' is a path; any other type `x` is `x.so` (or `x` if it already ends in .so) in the first
// directory of `plugin.path` that has it. Each file is loaded once, however many aliases use
// it. Used at start on the loop thread; not thread-safe.
#pragma once

#include <walrelay/transform.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace walrelay {

class PluginLibrary {
 public:
  // Loads `path` and validates its descriptor. Errors are kConfig.
  static Result<std::shared_ptr<const PluginLibrary>> Load(const std::string& path);

  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  // The descriptor, as this host knows it: fields the plugin's (older, smaller) descriptor
  // lacks are zero. Valid while this object lives.
  const walrelay_transform_plugin& api() const { return api_; }
  const std::string& path() const { return path_; }
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  // "plugin 'name' 1.0 (/path/name.so)", for messages.
  std::string Describe() const;

 private:
  struct DlCloser {
    void operator()(void* handle) const;
  };
  using DlHandle = std::unique_ptr<void, DlCloser>;

  PluginLibrary(DlHandle handle, std::string path)
      : handle_(std::move(handle)), path_(std::move(path)) {}
  Status ReadDescriptor(const walrelay_transform_plugin& descriptor);

  DlHandle handle_;
  std::string path_;
  walrelay_transform_plugin api_{};
  std::string name_;
  std::string version_;
};

class PluginLoader {
 public:
  // `plugin_path`: the directories of `plugin.path`, in search order.
  explicit PluginLoader(std::vector<std::string> plugin_path)
      : plugin_path_(std::move(plugin_path)) {}

  // The file `type` names (see above); an error lists the directories searched.
  Result<std::string> Resolve(const std::string& type) const;
  // Loads a file Resolve() returned, once per file (the same file reached through another
  // name or a link included).
  Result<std::shared_ptr<const PluginLibrary>> Load(const std::string& path);

  const std::vector<std::string>& plugin_path() const { return plugin_path_; }

 private:
  std::vector<std::string> plugin_path_;
  std::map<std::string, std::shared_ptr<const PluginLibrary>> loaded_;  // by canonical path
};

}  // namespace walrelay
