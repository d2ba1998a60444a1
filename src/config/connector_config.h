// Loading a Kafka Connect connector config: `{"name": "...", "config": {...}}` as a Debezium
// user would POST it, or a flat object of the same keys.
//
// Values are strings (JSON numbers and booleans are accepted and kept as their text).
// `${env:NAME}` and `${file:PATH}` anywhere in a value are replaced by the environment
// variable or the whole file (trailing newline trimmed), so secrets stay out of the file.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/properties.h"

namespace walrelay {

struct ConnectorConfig {
  std::string name;  // "name" of the wrapper, or the `name` key of a flat config
  Properties properties;
  // Keys whose value came, whole or in part, from ${env:...} or ${file:...}: whoever moved a
  // value out of the file did so because it should not be shown, whatever the key is called.
  std::set<std::string> provider_keys;
};

Result<ConnectorConfig> ParseConnectorConfig(std::string_view json, const std::string& origin);
Result<ConnectorConfig> LoadConnectorConfig(const std::string& path);

// Replaces ${env:NAME} and ${file:PATH} in `value`; errors name `key`, never the value.
// `resolved`, when given, is set to whether any such reference was replaced.
Result<std::string> SubstituteConfigValue(const std::string& key, const std::string& value,
                                          bool* resolved = nullptr);

// True for keys whose values are secrets: passwords, SASL and key material, and any key
// (a plugin's or a transform's too) with a part named like password, passphrase, secret, token
// or credential, in any case.
bool IsSecretKey(std::string_view key);
// The value as it may be shown to a person: secrets, and values that came from a config
// provider (`from_provider`), become "[hidden]".
std::string DisplayValue(std::string_view key, const std::string& value,
                         bool from_provider = false);

}  // namespace walrelay
