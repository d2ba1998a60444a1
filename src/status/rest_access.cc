#include "status/rest_access.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <spdlog/spdlog.h>

#include <array>

#include "config/properties.h"

namespace walrelay {
namespace {

constexpr const char* kCredentialKeys =
    "rest.auth.token, or rest.auth.basic.username and rest.auth.basic.password";

std::array<unsigned char, 32> Sha256(const std::string& data) {
  std::array<unsigned char, 32> digest{};
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(), nullptr);
  return digest;
}

// Compares digests, so the time taken depends neither on where the strings first differ nor
// on the expected value's length.
bool ConstantTimeEquals(const std::string& given, const std::string& expected) {
  const auto a = Sha256(given);
  const auto b = Sha256(expected);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string Base64(const std::string& data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()),
                                static_cast<int>(data.size()));
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

// "localhost:8083" -> "localhost", "[::1]:8083" -> "[::1]", lower case.
std::string HostName(const std::string& host_header) {
  std::string host = ToLower(Trim(host_header));
  if (!host.empty() && host.front() == '[') {
    const auto close = host.find(']');
    return close == std::string::npos ? host : host.substr(0, close + 1);
  }
  if (auto colon = host.find(':'); colon != std::string::npos) host.resize(colon);
  if (!host.empty() && host.back() == '.') host.pop_back();  // "localhost." is localhost
  return host;
}

// "http://Example.com:80" -> "example.com", "https://h:8443" -> "h:8443": the host[:port] an
// Origin names, without the scheme's default port, as a Host header carries it; "" for "null"
// or anything that is not scheme://authority.
std::string OriginAuthority(const std::string& origin) {
  const std::string value = ToLower(Trim(origin));
  const auto separator = value.find("://");
  if (separator == std::string::npos || separator == 0) return "";
  const std::string scheme = value.substr(0, separator);
  std::string authority = value.substr(separator + 3);
  if (authority.empty() || authority.find_first_of("/?#@ ") != std::string::npos) return "";
  const std::string default_port = scheme == "https" ? ":443" : scheme == "http" ? ":80" : "";
  if (!default_port.empty() && authority.size() > default_port.size() &&
      authority.compare(authority.size() - default_port.size(), default_port.size(),
                        default_port) == 0) {
    authority.resize(authority.size() - default_port.size());
  }
  return authority;
}

// Why `request` was sent by a web page of another origin, or "" when it was not.
// Sec-Fetch-Site is the browser's own verdict and covers what Origin cannot (Origin: null from
// sandboxed frames, redirects); without it, compare Origin with the Host the browser connected
// to. A request with neither did not come from a current browser's page.
std::string CrossOriginReason(const HttpRequest& request) {
  if (request.sec_fetch_site) {
    const std::string site = ToLower(Trim(*request.sec_fetch_site));
    if (site == "same-origin" || site == "none") return "";
    return "Sec-Fetch-Site: " + site;
  }
  if (!request.origin) return "";
  const std::string origin = OriginAuthority(*request.origin);
  const std::string host = request.host ? ToLower(Trim(*request.host)) : "";
  if (!origin.empty() && origin == host) return "";
  return "Origin '" + Trim(*request.origin) + "' is not this listener's Host '" +
         (request.host ? *request.host : "") + "'";
}

// The media type of `content_type` when it is one an HTML form can send to any site without a
// CORS preflight (application/x-www-form-urlencoded, multipart/form-data, text/plain; compared
// without parameters and case), or "" for any other type and for none. Browsers that predate
// Origin on form posts and Sec-Fetch-Site send such a form with neither header, so the type is
// the only sign left; clients of the API send no body, or JSON.
std::string FormMediaType(const std::optional<std::string>& content_type) {
  if (!content_type) return "";
  std::string type = *content_type;
  if (const auto semicolon = type.find(';'); semicolon != std::string::npos) {
    type.resize(semicolon);
  }
  type = ToLower(Trim(type));
  for (const char* form :
       {"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"}) {
    if (type == form) return type;
  }
  return "";
}

constexpr auto kCrossSiteWarningInterval = std::chrono::seconds(10);

}  // namespace

HttpResponse KafkaConnectError(int status, const std::string& message) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("error_code");
  w.Int(status);
  w.Key("message");
  w.String(message);
  w.EndObject();
  return {status, "application/json", std::string(buffer.GetString(), buffer.GetSize())};
}

const std::vector<std::string>& RestAccess::RefusalReasons() {
  static const std::vector<std::string> kReasons = {"host", "cross_site", "unauthorized",
                                                    "no_credentials"};
  return kReasons;
}

RestAccess::RestAccess(const RestAuthSettings& auth, const ListenerAddress& listener)
    : auth_(auth),
      loopback_(listener.IsLoopback()),
      listener_text_(std::string(listener.scheme()) + "://" +
                     (listener.host.find(':') != std::string::npos ? "[" + listener.host + "]"
                                                                   : listener.host) +
                     ":" + std::to_string(listener.port)) {
  if (!auth_.basic_username.empty()) {
    basic_expected_ = Base64(auth_.basic_username + ":" + auth_.basic_password);
  }
}

std::optional<HttpResponse> RestAccess::CheckRequest(const HttpRequest& request) {
  if (!loopback_ || !request.host || HostAllowed(*request.host)) return std::nullopt;
  ++refusals_["host"];
  return KafkaConnectError(
      403, "Host '" + *request.host +
               "' is not accepted on a loopback listener (a page rebinding its DNS name to this "
               "host could otherwise use the API); use localhost, 127.0.0.1 or [::1], or add "
               "the name to rest.allowed.hosts");
}

std::optional<HttpResponse> RestAccess::CheckCrossSite(const HttpRequest& request) {
  std::string why = CrossOriginReason(request);
  std::string message;
  if (!why.empty()) {
    message = "cross-site request refused (" + why +
              "): pause, resume and restart are not accepted from a web page of another origin; "
              "send them without an Origin header, as curl and Kafka Connect tools do";
  } else if (const std::string form = FormMediaType(request.content_type); !form.empty()) {
    why = "Content-Type " + form + ", which an HTML form of any web page can send";
    message = "cross-site request refused (Content-Type '" + form +
              "' is what an HTML form of any web page sends, and older browsers send such a "
              "form without Origin or Sec-Fetch-Site): pause, resume and restart are not "
              "accepted with it; send them with no body, or with Content-Type: application/json";
  } else {
    return std::nullopt;
  }
  ++refusals_["cross_site"];
  ++cross_site_unreported_;
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_cross_site_warning_) {
    spdlog::warn("REST API on {}: refused {} cross-site change request(s) since the last "
                 "warning, last {} {} ({}); a web page open in a browser, or a client sending a "
                 "form's Content-Type, tried to change the relay",
                 listener_text_, cross_site_unreported_, request.method, request.path, why);
    cross_site_unreported_ = 0;
    next_cross_site_warning_ = now + kCrossSiteWarningInterval;
  }
  return KafkaConnectError(403, message);
}

std::optional<HttpResponse> RestAccess::CheckChange(const HttpRequest& request) {
  if (auto refusal = CheckCrossSite(request)) return refusal;
  if (!auth_.HasCredentials()) {
    if (loopback_) return std::nullopt;
    ++refusals_["no_credentials"];
    return KafkaConnectError(
        403, "pause, resume and restart are refused on " + listener_text_ +
                 ", which is not a loopback listener, because no credentials are configured; "
                 "set " +
                 kCredentialKeys);
  }
  if (CredentialsMatch(request.authorization)) return std::nullopt;
  ++refusals_["unauthorized"];
  std::string accepted;
  std::vector<std::pair<std::string, std::string>> challenges;
  if (!auth_.token.empty()) {
    accepted = "a bearer token (rest.auth.token)";
    challenges.emplace_back("WWW-Authenticate", "Bearer realm=\"walrelay\"");
  }
  if (!auth_.basic_username.empty()) {
    accepted += std::string(accepted.empty() ? "" : " or ") +
                "basic credentials (rest.auth.basic.username, rest.auth.basic.password)";
    challenges.emplace_back("WWW-Authenticate", "Basic realm=\"walrelay\", charset=\"UTF-8\"");
  }
  HttpResponse refusal = KafkaConnectError(
      401, std::string(request.authorization.empty() ? "missing" : "wrong") +
               " credentials: pause, resume and restart need an Authorization header with " +
               accepted);
  refusal.headers = std::move(challenges);
  return refusal;
}

std::string RestAccess::StartupWarning() const {
  if (loopback_ || auth_.HasCredentials()) return "";
  return "REST API on " + listener_text_ +
         " (not loopback) has no credentials: pause, resume and restart answer 403 until " +
         kCredentialKeys + " are set; status, config, /metrics and /healthz stay open";
}

bool RestAccess::HostAllowed(const std::string& host_header) const {
  const std::string host = HostName(host_header);
  if (host == "localhost" || host == "[::1]" || host == "::1") return true;
  // Any 127.x.y.z literal: the listener is loopback, so it is one of its own addresses.
  if (host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos) {
    return true;
  }
  for (const auto& allowed : auth_.allowed_hosts)
    if (host == allowed) return true;
  return false;
}

bool RestAccess::CredentialsMatch(const std::string& authorization) const {
  const std::string header = Trim(authorization);
  const auto space = header.find(' ');
  if (space == std::string::npos) return false;
  const std::string scheme = ToLower(header.substr(0, space));
  const std::string value = Trim(header.substr(space + 1));
  if (scheme == "bearer" && !auth_.token.empty()) return ConstantTimeEquals(value, auth_.token);
  if (scheme == "basic" && !basic_expected_.empty()) {
    return ConstantTimeEquals(value, basic_expected_);
  }
  return false;
}

}  // namespace walrelay
