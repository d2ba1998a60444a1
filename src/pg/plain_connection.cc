#include "pg/plain_connection.h"

#include <algorithm>

namespace walrelay {

std::string PgErrorText(const PGconn* conn) {
  std::string why = conn ? PQerrorMessage(conn) : "out of memory";
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  return why;
}

Result<PgConnPtr> ConnectPlain(const PgParams& params, const PgParams& overrides,
                               const std::string& what) {
  auto overridden = [&overrides](const std::string& key) {
    return std::any_of(overrides.begin(), overrides.end(),
                       [&key](const auto& kv) { return kv.first == key; });
  };
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : params) {
    if (k == "replication" || overridden(k)) continue;
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  for (const auto& [k, v] : overrides) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PgConnPtr conn(PQconnectdbParams(keys.data(), values.data(), 0));
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    return Status::Connection("cannot connect for " + what + ": " + PgErrorText(conn.get()));
  }
  return conn;
}

}  // namespace walrelay
