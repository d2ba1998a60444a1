// Properties: a flat string->string view of Kafka Connect style configuration, with typed
// getters whose errors name the full key and what is allowed.
//
// A Properties object may be a scoped view (e.g. the keys of `transforms.outbox.`): lookups use
// the short key, messages use prefix + key so the user can find it in their file.
// Every lookup is remembered, so the caller can warn about keys nobody read.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace walrelay {

class Properties {
 public:
  Properties() = default;
  Properties(std::map<std::string, std::string> values, std::string prefix = "");

  // The keys under `prefix` (e.g. "transforms.outbox."), with the prefix stripped.
  Properties Scoped(const std::string& prefix) const;

  bool Has(const std::string& key) const;
  std::optional<std::string> Get(const std::string& key) const;
  std::string GetString(const std::string& key, const std::string& default_value) const;
  Result<std::string> GetRequired(const std::string& key) const;
  Result<int64_t> GetInt(const std::string& key, int64_t default_value, int64_t min,
                         int64_t max) const;
  Result<bool> GetBool(const std::string& key, bool default_value) const;
  // Case-insensitive, trimmed match against `allowed`; returns the allowed spelling.
  Result<std::string> GetEnum(const std::string& key, const std::string& default_value,
                              std::initializer_list<const char*> allowed) const;
  // Comma-separated list, entries trimmed, empty entries removed.
  std::vector<std::string> GetList(const std::string& key,
                                   const std::vector<std::string>& default_value) const;

  // Full name of `key` as the user wrote it (prefix + key).
  std::string FullKey(const std::string& key) const { return prefix_ + key; }
  const std::map<std::string, std::string>& values() const { return *values_; }
  const std::string& prefix() const { return prefix_; }

  // Full keys that no Get*/Has call has looked at, across every scoped view.
  std::vector<std::string> UnreadKeys() const;
  // Marks a full key as known even if nobody reads it through this object.
  void MarkRead(const std::string& full_key) const;

 private:
  std::shared_ptr<const std::map<std::string, std::string>> values_ =
      std::make_shared<const std::map<std::string, std::string>>();
  std::shared_ptr<std::set<std::string>> read_ = std::make_shared<std::set<std::string>>();
  std::string prefix_;
};

std::string Trim(std::string_view s);
std::string ToLower(std::string_view s);

}  // namespace walrelay
