#include "config/skipped_operations.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace walrelay {

bool SkippedOperations::Skips(char op) const {
  switch (op) {
    case 'c': return insert;
    case 'u': return update;
    case 'd': return remove;
    case 't': return truncate;
    default: return false;  // logical decoding messages are not row operations
  }
}

std::optional<std::string> SkippedOperations::PublishOption() const {
  if (!set || (!insert && !update && !remove && !truncate)) return std::nullopt;
  std::string out;
  for (const auto& [op, name] : {std::pair{'c', "insert"}, std::pair{'u', "update"},
                                 std::pair{'d', "delete"}, std::pair{'t', "truncate"}}) {
    if (Skips(op)) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  // Every operation skipped: PostgreSQL takes publish = '' as "publish nothing".
  return out;
}

Result<SkippedOperations> ParseSkippedOperations(const Properties& p) {
  SkippedOperations skipped;
  const std::string key = "skipped.operations";
  if (!p.Has(key)) return skipped;
  skipped.set = true;
  skipped.truncate = false;
  std::vector<std::string> items = p.GetList(key, {});
  for (std::string& item : items)
    std::transform(item.begin(), item.end(), item.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (items.empty()) {
    return Status::Config("'" + p.FullKey(key) +
                          "' names no operation: list any of c, u, d, t, or write none");
  }
  if (std::find(items.begin(), items.end(), "none") != items.end()) {
    if (items.size() == 1) return skipped;
    return Status::Config("'" + p.FullKey(key) + "' = '" + p.GetString(key, "") +
                          "': none cannot be combined with operations");
  }
  for (const std::string& item : items) {
    if (item == "c") {
      skipped.insert = true;
    } else if (item == "u") {
      skipped.update = true;
    } else if (item == "d") {
      skipped.remove = true;
    } else if (item == "t") {
      skipped.truncate = true;
    } else {
      return Status::Config("'" + p.FullKey(key) + "': '" + item +
                            "' is not an operation; use any of c (insert), u (update), d "
                            "(delete), t (truncate), or none");
    }
  }
  return skipped;
}

}  // namespace walrelay
