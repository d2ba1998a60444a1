#include "pg/connect_failure.h"

#include <regex>

namespace walrelay {

ConnectFailure ParseVerboseConnectError(std::string_view verbose_message) {
  static const std::regex kSeverityAndCode(R"((FATAL|ERROR|PANIC):  ([0-9A-Z]{5}): )");
  ConnectFailure failure;
  std::string text;
  size_t start = 0;
  const std::string all(verbose_message);
  while (start < all.size()) {
    size_t end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    std::string line = all.substr(start, end - start);
    start = end + 1;
    if (line.rfind("LOCATION:", 0) == 0 || line.empty()) continue;
    std::smatch m;
    if (std::regex_search(line, m, kSeverityAndCode)) {
      failure.sqlstate = m[2];
      line = m.prefix().str() + m[1].str() + ":  " + m.suffix().str();
    }
    if (!text.empty()) text += ' ';
    text += line;
  }
  for (auto& c : text)
    if (c == '\t') c = ' ';
  failure.message = text;
  return failure;
}

namespace {

bool IsLocalTlsVerificationFailure(const std::string& message) {
  for (const char* text :
       {"certificate verify failed", "does not match host name", "root certificate file",
        "could not read certificate file", "could not load private key file",
        "certificate present, but not private key"}) {
    if (message.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

Status ClassifyConnectFailure(const ConnectFailure& f) {
  const std::string& state = f.sqlstate;
  if (state == "42501") {
    return Status(ErrorCode::kNoReplicationRole, "the user in 'database.user' may not stream (" +
                                                     f.message +
                                                     "); run ALTER ROLE <user> WITH REPLICATION");
  }
  if (state.rfind("28", 0) == 0 || state == "3D000" || f.needs_password ||
      (state.empty() && IsLocalTlsVerificationFailure(f.message))) {
    return Status(ErrorCode::kAuthentication,
                  "PostgreSQL at " + f.where + " refused the connection: " + f.message +
                      (state.empty() ? "" : " (SQLSTATE " + state + ")"));
  }
  return Status::Connection("cannot connect to PostgreSQL at " + f.where + ": " + f.message +
                            (state.empty() ? "" : " (SQLSTATE " + state + ")"));
}

}  // namespace walrelay
