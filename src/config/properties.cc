#include "config/properties.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace walrelay {

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Properties::Properties(std::map<std::string, std::string> values, std::string prefix)
    : values_(std::make_shared<const std::map<std::string, std::string>>(std::move(values))),
      prefix_(std::move(prefix)) {}

Properties Properties::Scoped(const std::string& prefix) const {
  Properties scoped = *this;
  scoped.prefix_ = prefix_ + prefix;
  return scoped;
}

bool Properties::Has(const std::string& key) const {
  const std::string full = FullKey(key);
  read_->insert(full);
  return values_->count(full) != 0;
}

std::optional<std::string> Properties::Get(const std::string& key) const {
  const std::string full = FullKey(key);
  read_->insert(full);
  auto it = values_->find(full);
  if (it == values_->end()) return std::nullopt;
  return it->second;
}

std::string Properties::GetString(const std::string& key, const std::string& default_value) const {
  auto v = Get(key);
  return v ? *v : default_value;
}

Result<std::string> Properties::GetRequired(const std::string& key) const {
  auto v = Get(key);
  if (!v || Trim(*v).empty()) return Status::Config("missing required key '" + FullKey(key) + "'");
  return *v;
}

Result<int64_t> Properties::GetInt(const std::string& key, int64_t default_value, int64_t min,
                                   int64_t max) const {
  auto v = Get(key);
  if (!v) return default_value;
  const std::string t = Trim(*v);
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (t.empty() || ec != std::errc() || ptr != t.data() + t.size()) {
    return Status::Config("'" + FullKey(key) + "' must be an integer, got '" + *v + "'");
  }
  if (out < min || out > max) {
    return Status::Config("'" + FullKey(key) + "' must be between " + std::to_string(min) +
                          " and " + std::to_string(max) + ", got " + t);
  }
  return out;
}

Result<bool> Properties::GetBool(const std::string& key, bool default_value) const {
  auto v = Get(key);
  if (!v) return default_value;
  const std::string t = ToLower(Trim(*v));
  if (t == "true") return true;
  if (t == "false") return false;
  return Status::Config("'" + FullKey(key) + "' must be true or false, got '" + *v + "'");
}

Result<std::string> Properties::GetEnum(const std::string& key, const std::string& default_value,
                                        std::initializer_list<const char*> allowed) const {
  auto v = Get(key);
  if (!v) return default_value;
  const std::string t = ToLower(Trim(*v));
  std::string list;
  for (const char* a : allowed) {
    if (t == ToLower(a)) return std::string(a);
    list += list.empty() ? "" : ", ";
    list += a;
  }
  return Status::Config("'" + FullKey(key) + "' must be one of " + list + ", got '" + *v + "'");
}

std::vector<std::string> Properties::GetList(const std::string& key,
                                             const std::vector<std::string>& default_value) const {
  auto v = Get(key);
  if (!v) return default_value;
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= v->size()) {
    size_t comma = v->find(',', start);
    if (comma == std::string::npos) comma = v->size();
    std::string item = Trim(std::string_view(*v).substr(start, comma - start));
    if (!item.empty()) out.push_back(std::move(item));
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> Properties::UnreadKeys() const {
  std::vector<std::string> out;
  for (const auto& [k, _] : *values_)
    if (!read_->count(k)) out.push_back(k);
  return out;
}

void Properties::MarkRead(const std::string& full_key) const { read_->insert(full_key); }

}  // namespace walrelay
