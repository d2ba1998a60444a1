#include "config/connector_config.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace walrelay {

bool IsSecretKey(std::string_view key) {
  const std::string k = ToLower(key);
  auto ends_with = [&](std::string_view suffix) {
    return k.size() >= suffix.size() &&
           std::string_view(k).substr(k.size() - suffix.size()) == suffix;
  };
  if (ends_with("sasl.jaas.config") || ends_with("sasl.oauthbearer.config") ||
      ends_with("ssl.key.pem") || ends_with("ssl_key")) {
    return true;
  }
  // Substrings, so "sslpassword", "api.tokens" and "client_secret" count as well: hiding a
  // harmless value costs little, showing a secret cannot be undone.
  for (const char* word : {"password", "passphrase", "secret", "token", "credential"}) {
    if (k.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string DisplayValue(std::string_view key, const std::string& value, bool from_provider) {
  return from_provider || IsSecretKey(key) ? std::string("[hidden]") : value;
}

Result<std::string> SubstituteConfigValue(const std::string& key, const std::string& value,
                                          bool* resolved) {
  if (resolved) *resolved = false;
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t start = value.find("${", pos);
    if (start == std::string::npos) {
      out.append(value, pos);
      return out;
    }
    const size_t end = value.find('}', start);
    if (end == std::string::npos) {
      return Status::Config("'" + key + "': unterminated ${...} reference");
    }
    out.append(value, pos, start - pos);
    const std::string ref = value.substr(start + 2, end - start - 2);
    if (ref.find(':') == std::string::npos) {
      // As in Kafka Connect, only ${provider:...} is a reference; "${name}" stays as written,
      // e.g. a group in route.topic.replacement (Debezium's default outbox.event.${routedByValue}).
      out.append(value, start, end + 1 - start);
    } else if (ref.rfind("env:", 0) == 0) {
      const std::string name = ref.substr(4);
      const char* env = std::getenv(name.c_str());
      if (!env) {
        return Status::Config("'" + key + "' refers to environment variable " + name +
                              ", which is not set");
      }
      out += env;
      if (resolved) *resolved = true;
    } else if (ref.rfind("file:", 0) == 0) {
      const std::string path = ref.substr(5);
      std::ifstream in(path, std::ios::binary);
      if (!in)
        return Status::Config("'" + key + "' refers to file " + path + ", which cannot be read");
      std::stringstream ss;
      ss << in.rdbuf();
      std::string content = ss.str();
      while (!content.empty() && (content.back() == '\n' || content.back() == '\r'))
        content.pop_back();
      out += content;
      if (resolved) *resolved = true;
    } else {
      // The provider name is part of the value, so a secret's is not shown.
      const std::string provider = IsSecretKey(key) ? "..." : ref.substr(0, ref.find(':'));
      return Status::Config("'" + key + "': unknown reference ${" + provider +
                            ":...}; use ${env:NAME} or ${file:PATH}");
    }
    pos = end + 1;
  }
}

Result<ConnectorConfig> ParseConnectorConfig(std::string_view json, const std::string& origin) {
  rapidjson::Document doc;
  // Iterative: the recursive parser overflows the stack on deeply nested input.
  doc.Parse<rapidjson::kParseIterativeFlag>(json.data(), json.size());
  if (doc.HasParseError()) {
    return Status::Config(origin + ": not valid JSON (" +
                          rapidjson::GetParseError_En(doc.GetParseError()) + " at offset " +
                          std::to_string(doc.GetErrorOffset()) + ")");
  }
  if (!doc.IsObject()) return Status::Config(origin + ": expected a JSON object");
  ConnectorConfig result;
  const rapidjson::Value* flat = &doc;
  auto config_it = doc.FindMember("config");
  if (config_it != doc.MemberEnd()) {
    if (!config_it->value.IsObject())
      return Status::Config(origin + ": \"config\" must be an object of connector keys");
    flat = &config_it->value;
    auto name_it = doc.FindMember("name");
    if (name_it != doc.MemberEnd() && name_it->value.IsString())
      result.name = name_it->value.GetString();
  }
  std::map<std::string, std::string> values;
  for (const auto& m : flat->GetObject()) {
    const std::string key = m.name.GetString();
    std::string raw;
    if (m.value.IsString()) {
      raw.assign(m.value.GetString(), m.value.GetStringLength());
    } else if (m.value.IsBool()) {
      raw = m.value.GetBool() ? "true" : "false";
    } else if (m.value.IsInt64()) {
      raw = std::to_string(m.value.GetInt64());
    } else if (m.value.IsNumber()) {
      return Status::Config(origin + ": '" + key + "' must be a string or an integer");
    } else {
      return Status::Config(origin + ": '" + key + "' must be a string, number or boolean");
    }
    bool resolved = false;
    auto substituted = SubstituteConfigValue(key, raw, &resolved);
    if (!substituted.ok()) return substituted.status();
    // A repeated key keeps its last value, and that value decides.
    if (resolved) {
      result.provider_keys.insert(key);
    } else {
      result.provider_keys.erase(key);
    }
    values[key] = std::move(substituted).value();
  }
  if (result.name.empty()) {
    auto it = values.find("name");
    result.name = it != values.end() ? it->second : "walrelay";
  }
  values.erase("name");
  result.properties = Properties(std::move(values));
  return result;
}

Result<ConnectorConfig> LoadConnectorConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Config("cannot read config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConnectorConfig(ss.str(), path);
}

}  // namespace walrelay
