// Optional C++ conveniences for writing a walrelay transform plugin; the ABI itself is
// include/walrelay/transform.h and nothing here is needed to implement it. Header-only, so
// plugins still link nothing from walrelay. Copy it into your own plugin if it helps.
//
// WALRELAY_CPP_PLUGIN(Class, "name", "version") defines the entry function and a descriptor
// whose callbacks forward to a class with
//   static std::unique_ptr<Class> Create(const walrelay_create_args& args, std::string& error);
//   walrelay_status Apply(const walrelay_record& in, walrelay_record& out, std::string& error);
// Create() returns nullptr and sets `error` to refuse its configuration; Apply() returns
// WALRELAY_ERROR with `error` set to fail a record. The adapter catches every exception at the
// C boundary (none may cross it) and reports it as a failure.
#pragma once

#include <walrelay/transform.h>

#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace walrelay_plugin {

inline std::string_view AsView(walrelay_bytes b) {
  return b.data == nullptr ? std::string_view() : std::string_view(b.data, b.size);
}
inline walrelay_bytes AsBytes(std::string_view s) { return {s.data(), s.size()}; }

// The first header named `name`, or nullptr.
inline const walrelay_header* FindHeader(const walrelay_record& record, std::string_view name) {
  for (size_t i = 0; i < record.header_count; ++i) {
    if (AsView(record.headers[i].key) == name) return &record.headers[i];
  }
  return nullptr;
}

inline std::string ToLower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// The create() arguments' configuration. Take() consumes a key; Leftover() names the first
// key nobody took, so a plugin can refuse unknown keys (a typo must not go unnoticed).
class Config {
 public:
  explicit Config(const walrelay_create_args& args) {
    for (size_t i = 0; i < args.config_count; ++i)
      values_[args.config[i].key] = args.config[i].value;
  }

  std::optional<std::string> Take(const std::string& key) {
    auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    std::string value = std::move(it->second);
    values_.erase(it);
    return value;
  }
  std::string Take(const std::string& key, const std::string& default_value) {
    return Take(key).value_or(default_value);
  }
  // "unknown key 'x' (known: a, b)", or "" when every key was taken.
  std::string Leftover(std::string_view known) const {
    if (values_.empty()) return "";
    return "unknown key '" + values_.begin()->first + "' (known: " + std::string(known) + ")";
  }

 private:
  std::map<std::string, std::string> values_;
};

// Writes `message` into the host's buffer, truncated to fit.
inline void WriteError(char* error, size_t size, const std::string& message) {
  if (error != nullptr && size > 0) std::snprintf(error, size, "%s", message.c_str());
}

// Runs `body` (which returns a walrelay_status) so that no exception leaves it: one that
// escapes is reported as WALRELAY_ERROR with its message.
template <typename Body>
walrelay_status Guard(char* error, size_t error_size, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    WriteError(error, error_size, std::string("exception: ") + e.what());
  } catch (...) {
    WriteError(error, error_size, "unknown exception");
  }
  return WALRELAY_ERROR;
}

template <typename T>
struct Adapter {
  static walrelay_status Create(const walrelay_create_args* args, void** instance, char* error,
                                size_t error_size) noexcept {
    return Guard(error, error_size, [&] {
      std::string message;
      std::unique_ptr<T> created = T::Create(*args, message);
      if (created == nullptr) {
        WriteError(error, error_size, message);
        return WALRELAY_ERROR;
      }
      *instance = created.release();
      return WALRELAY_OK;
    });
  }

  static walrelay_status Apply(void* instance, const walrelay_record* in, walrelay_record* out,
                               char* error, size_t error_size) noexcept {
    return Guard(error, error_size, [&] {
      std::string message;
      const walrelay_status status = static_cast<T*>(instance)->Apply(*in, *out, message);
      if (status == WALRELAY_ERROR) WriteError(error, error_size, message);
      return status;
    });
  }

  static void Destroy(void* instance) noexcept { delete static_cast<T*>(instance); }
};

}  // namespace walrelay_plugin

#define WALRELAY_CPP_PLUGIN(Class, plugin_name, plugin_version)                                   \
  extern "C" WALRELAY_TRANSFORM_EXPORT const walrelay_transform_plugin* walrelay_transform_entry( \
      uint32_t host_abi_version) {                                                                \
    static const walrelay_transform_plugin kPlugin = {sizeof(walrelay_transform_plugin),          \
                                                      WALRELAY_TRANSFORM_ABI_VERSION,             \
                                                      plugin_name,                                \
                                                      plugin_version,                             \
                                                      &walrelay_plugin::Adapter<Class>::Create,   \
                                                      &walrelay_plugin::Adapter<Class>::Apply,    \
                                                      &walrelay_plugin::Adapter<Class>::Destroy}; \
    return host_abi_version == WALRELAY_TRANSFORM_ABI_VERSION ? &kPlugin : nullptr;               \
  }
