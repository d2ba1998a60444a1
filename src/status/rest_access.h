// RestAccess: which REST requests a relay answers, by listener, Host header and credentials
// (docs/operations.md, "REST API").
//
// Contract:
// - On a loopback listener, a request whose Host header names anything but localhost,
//   127.0.0.1, [::1] (any port) or an entry of rest.allowed.hosts is refused with 403: a web
//   page whose own DNS name was rebound to 127.0.0.1 would otherwise drive the API through the
//   browser of whoever runs walrelay. A request without Host is let through: browsers always
//   send one. Other listeners do not check Host (they answer to whatever names they have).
// - Reading (status, config with secrets hidden, /metrics, /healthz) needs nothing more, so
//   health checks and scrapers keep working.
// - Changing the relay (pause, resume, restart) needs the bearer token (rest.auth.token) or the
//   basic credentials (rest.auth.basic.*) whenever either is configured, on any listener;
//   missing or wrong ones get 401 with WWW-Authenticate. With none configured, changes are
//   allowed on a loopback listener and refused with 403, naming the keys to set, on any other.
// - A change sent by a web page of another origin is refused with 403 on every listener,
//   before credentials are looked at (a browser may add basic credentials it remembers, and on
//   a loopback listener there are often none): `Sec-Fetch-Site` other than same-origin or none,
//   or else an `Origin` whose host[:port] is not the request's Host. Browsers send one or both
//   with every cross-site POST or PUT and page scripts cannot forge them; clients that send
//   neither (curl, Kafka Connect tooling, scripts) are not affected. A browser page may still
//   read status: it cannot change anything, and without CORS headers it cannot read answers.
// - A change whose Content-Type is one an HTML form sends without a CORS preflight
//   (application/x-www-form-urlencoded, multipart/form-data, text/plain; the media type
//   compared without case or parameters) is refused with 403 as cross-site too, on every
//   listener and before credentials: a browser that sends neither Origin nor Sec-Fetch-Site
//   with a form post would otherwise let any page restart a loopback relay. The API takes no
//   body, so clients send none (curl -X POST) or application/json, and both are accepted.
// - Credentials are compared in constant time and never appear in answers or logs.
// Refusals are counted by reason ("host", "cross_site", "unauthorized", "no_credentials") for
// /metrics; cross-site ones are also logged, at most every 10 s with a count.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/relay_settings.h"
#include "status/http_server.h"

namespace walrelay {

// An error in Kafka Connect's shape: {"error_code": <status>, "message": "..."}.
HttpResponse KafkaConnectError(int status, const std::string& message);

class RestAccess {
 public:
  RestAccess(const RestAuthSettings& auth, const ListenerAddress& listener);

  // The refusal of any request on this listener, or nullopt to go on.
  std::optional<HttpResponse> CheckRequest(const HttpRequest& request);
  // The refusal of a request that changes the relay, or nullopt to go on.
  std::optional<HttpResponse> CheckChange(const HttpRequest& request);

  // What to warn about once at start ("" if nothing): changes refused for lack of credentials.
  std::string StartupWarning() const;

  const std::map<std::string, uint64_t>& refusals() const { return refusals_; }
  static const std::vector<std::string>& RefusalReasons();

 private:
  bool HostAllowed(const std::string& host) const;
  // The 403 for a change a web page may have sent (another origin, or a form's Content-Type),
  // counted and logged; nullopt to go on.
  std::optional<HttpResponse> CheckCrossSite(const HttpRequest& request);
  bool CredentialsMatch(const std::string& authorization) const;

  const RestAuthSettings auth_;
  const bool loopback_;
  const std::string listener_text_;  // e.g. http://0.0.0.0:8083, for messages
  std::string basic_expected_;       // base64("user:password"), as clients send it
  std::map<std::string, uint64_t> refusals_;
  uint64_t cross_site_unreported_ = 0;
  std::chrono::steady_clock::time_point next_cross_site_warning_{};
};

}  // namespace walrelay
