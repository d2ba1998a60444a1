// Who may use the REST API, and how it is served: credentials for pause, resume and restart
// (bearer token and basic auth, refused with 401 or, on a non-loopback listener without any,
// 403), reads open to everyone, the Host check of a loopback listener, changes refused when a
// browser sends them from another origin or with an HTML form's Content-Type, the bound on
// concurrent connections, an https listener, and an accept loop that neither spins nor stops
// when the process runs out of file descriptors.
// Relays run against real PostgreSQL and the mock Kafka cluster; the accept test runs an
// HttpServer in this process.
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <thread>

#include "config/connector_config.h"
#include "config/relay_settings.h"
#include "devtools/test_pki.h"
#include "relay_fixture.h"
#include "rest_client.h"
#include "status/http_server.h"

using namespace walrelay;
using namespace walrelay::testing;

namespace {

// Distinctive, so any appearance in an answer or a log is a leak.
constexpr const char* kToken = "tok-Vb83-never-shown";
constexpr const char* kBasicUser = "operator";
constexpr const char* kBasicPassword = "bpw-Jd61-never-shown";

std::string Base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t n = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) n |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) n |= static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

std::string BasicHeader(const std::string& user, const std::string& password) {
  return "Authorization: Basic " + Base64(user + ":" + password);
}

double Refused(int port, const std::string& reason) {
  const auto value = Metric(Http(port, "GET", "/metrics").body,
                            "walrelay_rest_requests_refused_total{reason=\"" + reason + "\"}");
  REQUIRE_MESSAGE(value, reason);
  return *value;
}

Result<RelaySettings> ParseWith(const std::map<std::string, std::string>& keys) {
  std::string json = R"({"name": "n", "config": {"database.hostname": "h", "database.user": "u",
      "database.dbname": "d", "topic.prefix": "p", "kafka.bootstrap.servers": "k:9092")";
  for (const auto& [k, v] : keys) json += ", \"" + k + "\": \"" + v + "\"";
  auto config = ParseConnectorConfig(json + "}}", "test");
  REQUIRE(config.ok());
  return ParseRelaySettings(*config);
}

// One request over TLS, verifying the server's certificate for 127.0.0.1 against `ca_file`.
Result<Reply> Https(int port, const std::string& ca_file, const std::string& path) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  namespace ssl = boost::asio::ssl;
  boost::asio::io_context io;
  ssl::context tls(ssl::context::tls_client);
  tls.load_verify_file(ca_file);
  tls.set_verify_mode(ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(io, tls);
  stream.set_verify_callback(ssl::host_name_verification("127.0.0.1"));
  beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(10));
  beast::error_code ec;
  beast::get_lowest_layer(stream).connect(
      boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                     static_cast<uint16_t>(port)),
      ec);
  if (!ec) stream.handshake(ssl::stream_base::client, ec);
  if (ec) return Status::Connection("TLS connect/handshake: " + ec.message());
  http::request<http::empty_body> request(http::verb::get, path, 11);
  request.set(http::field::host, "127.0.0.1");
  http::write(stream, request, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  if (!ec) http::read(stream, buffer, response, ec);
  if (ec) return Status::Connection("TLS request: " + ec.message());
  stream.shutdown(ec);  // the answer is complete whatever the shutdown says
  Reply reply;
  reply.status = response.result_int();
  reply.body = response.body();
  return reply;
}

}  // namespace

TEST_CASE("REST credentials: pause, resume and restart need the token or basic credentials") {
  RelayFixture fx;
  const std::string token_file = fx.pg().base_dir() + "/rest_token";
  std::ofstream(token_file) << kToken << "\n";
  auto relay =
      fx.StartRelay(fx.WriteConfig("restauth", {{"rest.auth.token", "${file:" + token_file + "}"},
                                                {"rest.auth.basic.username", kBasicUser},
                                                {"rest.auth.basic.password", kBasicPassword},
                                                {"rest.allowed.hosts", "relay.internal"}}));
  const int port = RestPort(fx);
  const std::string base = "/connectors/itest-restauth";
  std::string bodies;
  auto call = [&](const std::string& method, const std::string& path,
                  const std::vector<std::string>& headers = {}) {
    Reply r = Http(port, method, path, headers);
    bodies += r.head + r.body;
    return r;
  };

  // Every refusal reason is exported at 0 before the first refusal.
  for (const char* reason : {"host", "unauthorized", "no_credentials"})
    CHECK(Refused(port, reason) == 0);

  const std::vector<std::pair<std::string, std::string>> changes = {
      {"PUT", base + "/pause"},
      {"PUT", base + "/resume"},
      {"POST", base + "/restart"},
      {"POST", base + "/tasks/0/restart"}};
  const std::vector<std::vector<std::string>> refused = {
      {},
      {"Authorization: Bearer wrong-token"},
      {"Authorization: Bearer"},
      {BasicHeader(kBasicUser, "wrong-password")},
      {BasicHeader("someone", kBasicPassword)},
      // The token is not a basic password, nor the other way round.
      {BasicHeader(kBasicUser, kToken)},
      {std::string("Authorization: Bearer ") + kBasicPassword},
      {std::string("Authorization: Digest ") + kToken}};
  int refusals = 0;
  for (const auto& route : changes) {
    const auto& method = route.first;
    const auto& path = route.second;
    for (const auto& headers : refused) {
      const Reply r = call(method, path, headers);
      ++refusals;
      CHECK_MESSAGE(r.status == 401, method << " " << path << " " << r.head);
      CHECK(r.body.find("{\"error_code\":401,\"message\":\"") == 0);
      CHECK(r.body.find("rest.auth.token") != std::string::npos);
      CHECK(r.head.find("WWW-Authenticate: Bearer realm=\"walrelay\"") != std::string::npos);
      CHECK(r.head.find("WWW-Authenticate: Basic realm=\"walrelay\"") != std::string::npos);
    }
  }
  CHECK(Refused(port, "unauthorized") == refusals);
  // Nothing was paused or restarted by the refused calls.
  CHECK(call("GET", base + "/status").body.find("\"connector\":{\"state\":\"RUNNING\"") !=
        std::string::npos);
  CHECK(Metric(call("GET", "/metrics").body, "walrelay_reconnects_total") == 0);

  // Reads need no credentials.
  for (const std::string& path :
       std::vector<std::string>{"/", "/connectors", base, base + "/config", base + "/status",
                                base + "/tasks/0/status", "/metrics", "/healthz"}) {
    CHECK_MESSAGE(call("GET", path).status == 200, path);
  }
  // The credentials are hidden in the config, whether from ${file:} or written in it.
  const std::string config = call("GET", base + "/config").body;
  CHECK(config.find("\"rest.auth.token\":\"[hidden]\"") != std::string::npos);
  CHECK(config.find("\"rest.auth.basic.password\":\"[hidden]\"") != std::string::npos);

  // The right token, with the scheme in any case, or the right basic credentials.
  const std::string bearer = std::string("Authorization: Bearer ") + kToken;
  Reply r = call("PUT", base + "/pause", {bearer});
  CHECK(r.status == 202);
  CHECK(call("GET", base + "/status").body.find("\"connector\":{\"state\":\"PAUSED\"") !=
        std::string::npos);
  r = call("PUT", base + "/resume", {BasicHeader(kBasicUser, kBasicPassword)});
  CHECK(r.status == 202);
  CHECK(call("GET", base + "/status").body.find("\"connector\":{\"state\":\"RUNNING\"") !=
        std::string::npos);
  r = call("PUT", base + "/pause", {std::string("Authorization: bearer ") + kToken});
  CHECK(r.status == 202);
  r = call("PUT", base + "/resume", {bearer});
  CHECK(r.status == 202);
  r = call("POST", base + "/restart", {BasicHeader(kBasicUser, kBasicPassword)});
  CHECK(r.status == 204);
  r = call("POST", base + "/tasks/0/restart", {bearer});
  CHECK(r.status == 204);
  CHECK(Refused(port, "unauthorized") == refusals);

  // Loopback listener: the Host header must name the loopback (DNS rebinding), even with the
  // right credentials; the port does not matter.
  const std::string port_text = std::to_string(port);
  for (const std::string& host :
       std::vector<std::string>{"evil.example", "evil.example:" + port_text,
                                "127.0.0.1.evil.example", "localhost.evil.example", "10.0.0.1"}) {
    r = call("GET", base + "/status", {"Host: " + host});
    CHECK_MESSAGE(r.status == 403, host);
    CHECK(r.body.find("rest.allowed.hosts") != std::string::npos);
  }
  r = call("PUT", base + "/pause", {"Host: evil.example", bearer});
  CHECK(r.status == 403);
  CHECK(Refused(port, "host") == 6);
  for (const std::string& host : std::vector<std::string>{
           "localhost", "LocalHost:" + port_text, "127.0.0.1", "127.0.0.1:" + port_text, "[::1]",
           "[::1]:" + port_text, "Relay.Internal:" + port_text}) {
    CHECK_MESSAGE(call("GET", base + "/status", {"Host: " + host}).status == 200, host);
  }
  CHECK(call("GET", base + "/status").body.find("\"connector\":{\"state\":\"RUNNING\"") !=
        std::string::npos);

  CHECK(relay->Running());
  for (const char* secret : {kToken, kBasicPassword}) {
    CHECK(bodies.find(secret) == std::string::npos);
    CHECK(devtools::ReadFile(fx.log_path()).find(secret) == std::string::npos);
  }
}

TEST_CASE("REST on a non-loopback listener without credentials: changes get 403, reads stay open") {
  RelayFixture fx;
  // 0.0.0.0 is every interface, so not loopback, though the test connects through 127.0.0.1.
  auto relay = fx.StartRelay(fx.WriteConfig("restopen", {{"listeners", "http://0.0.0.0:0"}}));
  const int port = RestPort(fx);
  const std::string base = "/connectors/itest-restopen";
  for (const auto& route : std::vector<std::pair<std::string, std::string>>{
           {"PUT", base + "/pause"}, {"PUT", base + "/resume"}, {"POST", base + "/restart"}}) {
    const auto& method = route.first;
    const auto& path = route.second;
    const Reply r = Http(port, method, path);
    CHECK_MESSAGE(r.status == 403, method << " " << path);
    CHECK(r.body.find("{\"error_code\":403,") == 0);
    CHECK_MESSAGE(r.body.find("set rest.auth.token, or rest.auth.basic.username and "
                              "rest.auth.basic.password") != std::string::npos,
                  r.body);
  }
  CHECK(Refused(port, "no_credentials") == 3);
  CHECK(Refused(port, "unauthorized") == 0);
  // Container health checks and scrapers keep working; no Host check off loopback.
  for (const std::string& path :
       std::vector<std::string>{base + "/status", base + "/config", "/metrics", "/healthz"}) {
    CHECK_MESSAGE(Http(port, "GET", path).status == 200, path);
    CHECK(Http(port, "GET", path, {"Host: relay.example:8083"}).status == 200);
  }
  CHECK(Http(port, "GET", base + "/status").body.find("\"connector\":{\"state\":\"RUNNING\"") !=
        std::string::npos);
  const std::string log = devtools::ReadFile(fx.log_path());
  CHECK_MESSAGE(Count(log, "(not loopback) has no credentials") == 1, log);
  CHECK(relay->Running());
}

TEST_CASE("REST cross-site: a web page cannot change the relay; curl and same-origin pages can") {
  RelayFixture fx;
  // Loopback and no credentials: what a page in the operator's browser could reach before.
  auto relay = fx.StartRelay(fx.WriteConfig("restsite", {}));
  const int port = RestPort(fx);
  const std::string self = "127.0.0.1:" + std::to_string(port);
  const std::string base = "/connectors/itest-restsite";
  auto reconnects = [&] {
    return Metric(Http(port, "GET", "/metrics").body, "walrelay_reconnects_total");
  };

  // What browsers send with a cross-site fetch() or form POST (page scripts cannot change it).
  const std::vector<std::vector<std::string>> cross_site = {
      {"Origin: http://evil.example"},
      {"Origin: http://evil.example", "Sec-Fetch-Site: cross-site"},
      {"Sec-Fetch-Site: cross-site"},
      // Another port of the same host is the same site, not the same origin.
      {"Origin: http://127.0.0.1:3000", "Sec-Fetch-Site: same-site"},
      {"Host: " + self, "Origin: http://localhost:" + std::to_string(port)},
      {"Origin: null"},  // sandboxed frame, file:// page
      {"Origin: http://" + self, "Sec-Fetch-Site: cross-site"}};
  const std::vector<std::pair<std::string, std::string>> changes = {
      {"POST", base + "/restart"},
      {"POST", base + "/tasks/0/restart"},
      {"PUT", base + "/pause"},
      {"PUT", base + "/resume"}};
  int refusals = 0;
  for (const auto& route : changes) {
    const auto& method = route.first;
    const auto& path = route.second;
    for (const auto& headers : cross_site) {
      const Reply r = Http(port, method, path, headers);
      ++refusals;
      CHECK_MESSAGE(r.status == 403, method << " " << path << " " << headers.back());
      CHECK_MESSAGE(
          r.body.find("{\"error_code\":403,\"message\":\"cross-site request refused (") == 0,
          r.body);
      CHECK(r.body.find("pause, resume and restart are not accepted from a web page of another "
                        "origin") != std::string::npos);
    }
  }
  CHECK(Refused(port, "cross_site") == refusals);
  // Nothing was restarted or paused.
  CHECK(reconnects() == 0);
  CHECK(Http(port, "GET", base + "/status").body.find("\"connector\":{\"state\":\"RUNNING\"") !=
        std::string::npos);
  // One warning for the burst, naming what was refused and why.
  std::string log = devtools::ReadFile(fx.log_path());
  CHECK_MESSAGE(Count(log, "cross-site change request(s)") == 1, log);
  CHECK(log.find("refused 1 cross-site change request(s) since the last warning, last POST " +
                 base +
                 "/restart (Origin 'http://evil.example' is not this listener's Host "
                 "'127.0.0.1')") != std::string::npos);

  // Reads from any page stay open (no CORS headers: a page cannot read the answers).
  CHECK(Http(port, "GET", base + "/status", {"Origin: http://evil.example"}).status == 200);
  CHECK(Http(port, "GET", "/healthz", {"Sec-Fetch-Site: cross-site"}).status == 200);

  // curl and Kafka Connect tools send neither header; a page of the API's own origin, or an
  // address typed by hand (Sec-Fetch-Site: none), is not cross-site.
  Reply r = Http(port, "PUT", base + "/pause", {"Host: " + self, "Origin: http://" + self});
  CHECK_MESSAGE(r.status == 202, r.head << r.body);
  CHECK(Http(port, "GET", base + "/status").body.find("\"connector\":{\"state\":\"PAUSED\"") !=
        std::string::npos);
  r = Http(port, "PUT", base + "/resume",
           {"Host: " + self, "Sec-Fetch-Site: same-origin", "Origin: http://" + self});
  CHECK(r.status == 202);
  r = Http(port, "PUT", base + "/pause", {"Sec-Fetch-Site: none"});
  CHECK(r.status == 202);
  r = Http(port, "PUT", base + "/resume",
           {"Host: localhost:" + std::to_string(port),
            "Origin: http://LOCALHOST:" + std::to_string(port)});
  CHECK(r.status == 202);
  r = Http(port, "POST", base + "/restart");
  CHECK_MESSAGE(r.status == 204, r.head << r.body);
  CHECK(Eventually([&] { return reconnects() == 1; }, std::chrono::seconds(20)));
  CHECK(Refused(port, "cross_site") == refusals);
  CHECK(relay->Running());
}

TEST_CASE("REST cross-site: a change with an HTML form's Content-Type is refused without Origin") {
  RelayFixture fx;
  // Loopback, no credentials, and no Origin or Sec-Fetch-Site: what an older browser sends
  // when a page's form posts to the relay.
  auto relay = fx.StartRelay(fx.WriteConfig("restform", {}));
  const int port = RestPort(fx);
  const std::string base = "/connectors/itest-restform";
  auto reconnects = [&] {
    return Metric(Http(port, "GET", "/metrics").body, "walrelay_reconnects_total");
  };

  // The three types a form sends without a preflight, in any case, with or without parameters.
  const std::vector<std::pair<std::string, std::string>> form_types = {
      {"application/x-www-form-urlencoded", "application/x-www-form-urlencoded"},
      {"multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxk", "multipart/form-data"},
      {"text/plain", "text/plain"},
      {"Text/Plain;charset=UTF-8", "text/plain"},
      {" APPLICATION/X-WWW-FORM-URLENCODED ; charset=utf-8", "application/x-www-form-urlencoded"}};
  const std::vector<std::pair<std::string, std::string>> changes = {
      {"POST", base + "/restart"},
      {"POST", base + "/tasks/0/restart"},
      {"PUT", base + "/pause"},
      {"PUT", base + "/resume"}};
  int refusals = 0;
  for (const auto& route : changes) {
    const auto& method = route.first;
    const auto& path = route.second;
    for (const auto& form : form_types) {
      const auto& content_type = form.first;
      const auto& media_type = form.second;
      const Reply r = Http(port, method, path, {"Content-Type: " + content_type});
      ++refusals;
      CHECK_MESSAGE(r.status == 403, method << " " << path << " " << content_type);
      CHECK_MESSAGE(r.body.find("{\"error_code\":403,\"message\":\"cross-site request refused "
                                "(Content-Type '" +
                                media_type + "' is what an HTML form") == 0,
                    r.body);
      CHECK(r.body.find("send them with no body, or with Content-Type: application/json") !=
            std::string::npos);
    }
  }
  CHECK(Refused(port, "cross_site") == refusals);
  CHECK(Refused(port, "unauthorized") == 0);
  // Nothing was restarted or paused.
  CHECK(reconnects() == 0);
  CHECK(Http(port, "GET", base + "/status").body.find("\"connector\":{\"state\":\"RUNNING\"") !=
        std::string::npos);
  const std::string log = devtools::ReadFile(fx.log_path());
  CHECK_MESSAGE(log.find("refused 1 cross-site change request(s) since the last warning, last "
                         "POST " +
                         base +
                         "/restart (Content-Type application/x-www-form-urlencoded, which an "
                         "HTML form of any web page can send)") != std::string::npos,
                log);

  // Clients of the API send no body (curl -X POST) or JSON; neither is a form.
  Reply r = Http(port, "PUT", base + "/pause", {"Content-Type: application/json"});
  CHECK_MESSAGE(r.status == 202, r.head << r.body);
  CHECK(Http(port, "GET", base + "/status").body.find("\"connector\":{\"state\":\"PAUSED\"") !=
        std::string::npos);
  r = Http(port, "PUT", base + "/resume", {"Content-Type: application/json; charset=utf-8"});
  CHECK(r.status == 202);
  r = Http(port, "POST", base + "/restart");
  CHECK_MESSAGE(r.status == 204, r.head << r.body);
  CHECK(Eventually([&] { return reconnects() == 1; }, std::chrono::seconds(20)));
  CHECK(Refused(port, "cross_site") == refusals);
  CHECK(relay->Running());
}

TEST_CASE("REST cross-site: refused before credentials, on a listener that is not loopback") {
  RelayFixture fx;
  // A browser replays basic credentials it remembers to any page's request: they prove nothing.
  auto relay =
      fx.StartRelay(fx.WriteConfig("restsiteauth", {{"listeners", "http://0.0.0.0:0"},
                                                    {"rest.auth.basic.username", kBasicUser},
                                                    {"rest.auth.basic.password", kBasicPassword}}));
  const int port = RestPort(fx);
  const std::string path = "/connectors/itest-restsiteauth/pause";
  const std::string basic = BasicHeader(kBasicUser, kBasicPassword);
  Reply r = Http(port, "PUT", path, {basic, "Origin: https://evil.example"});
  CHECK(r.status == 403);
  CHECK(r.body.find("cross-site request refused (Origin 'https://evil.example' is not this "
                    "listener's Host '127.0.0.1')") != std::string::npos);
  r = Http(port, "PUT", path, {basic, "Sec-Fetch-Site: cross-site"});
  CHECK(r.status == 403);
  // A form's Content-Type is refused even with the right credentials: a browser may add them.
  r = Http(port, "PUT", path, {basic, "Content-Type: text/plain"});
  CHECK(r.status == 403);
  CHECK(r.body.find("cross-site request refused (Content-Type 'text/plain'") != std::string::npos);
  CHECK(Refused(port, "cross_site") == 3);
  CHECK(Refused(port, "unauthorized") == 0);
  // Behind a proxy that keeps the browser's Host, the page's own origin matches it.
  r = Http(port, "PUT", path, {basic, "Host: relay.example", "Origin: https://relay.example"});
  CHECK_MESSAGE(r.status == 202, r.head << r.body);
  CHECK(relay->Running());
}

namespace {

// Sends one keep-alive request on `fd` and returns the whole answer ("" on failure).
std::string KeepAliveRequest(int fd, const std::string& path) {
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) return "";
  std::string raw;
  char buf[4096];
  for (;;) {
    if (const auto end = raw.find("\r\n\r\n"); end != std::string::npos) {
      std::smatch m;
      const std::string head = raw.substr(0, end);
      if (!std::regex_search(head, m, std::regex("Content-Length: (\\d+)"))) return "";
      if (raw.size() >= end + 4 + std::stoul(m[1])) return raw;
    }
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return "";
    raw.append(buf, n);
  }
}

// Reads until the server closes `fd` (or 5 s pass): what a refused connection is told.
std::string ReadToEnd(int fd) {
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string raw;
  char buf[1024];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) raw.append(buf, n);
  return raw;
}

}  // namespace

TEST_CASE("REST connections: beyond rest.max.connections refused and logged, open ones served") {
  RelayFixture fx;
  auto relay = fx.StartRelay(fx.WriteConfig("restconns", {{"rest.max.connections", "3"}}));
  const int port = RestPort(fx);
  const std::string status = "/connectors/itest-restconns/status";

  std::vector<int> kept;
  for (int i = 0; i < 3; ++i) {
    kept.push_back(ConnectLoopback(port));
    REQUIRE(kept.back() >= 0);
    CHECK(KeepAliveRequest(kept.back(), status).rfind("HTTP/1.1 200 OK", 0) == 0);
  }
  // A fourth and fifth connection: answered 503 before any request, then closed.
  for (int i = 0; i < 2; ++i) {
    const int extra = ConnectLoopback(port);
    REQUIRE(extra >= 0);
    const std::string answer = ReadToEnd(extra);
    close(extra);
    CHECK_MESSAGE(answer.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0, answer);
    CHECK(answer.find("\r\n\r\n{\"error_code\":503,\"message\":\"too many connections to the "
                      "REST API (rest.max.connections)") != std::string::npos);
  }
  // The open connections are served as before, and /metrics counts the refusals.
  for (int fd : kept) CHECK(KeepAliveRequest(fd, status).rfind("HTTP/1.1 200 OK", 0) == 0);
  const std::string metrics = KeepAliveRequest(kept[0], "/metrics");
  CHECK(Metric(metrics.substr(metrics.find("\r\n\r\n") + 4),
               "walrelay_rest_connections_refused_total") == 2);
  CHECK(Metric(metrics.substr(metrics.find("\r\n\r\n") + 4), "walrelay_rest_connections_open") ==
        3);
  // Logged once for the burst, with its count on the next warning at most every 10 s.
  const std::string log = devtools::ReadFile(fx.log_path());
  CHECK_MESSAGE(Count(log, "REST API: refused ") == 1, log);
  CHECK(log.find("REST API: refused 1 connection(s) since the last warning, last from 127.0.0.1: "
                 "3 are open, the most rest.max.connections allows") != std::string::npos);

  // Once one closes, a new connection is served again.
  close(kept.back());
  kept.pop_back();
  CHECK(
      Eventually([&] { return Http(port, "GET", status).status == 200; }, std::chrono::seconds(5)));
  for (int fd : kept) close(fd);
  CHECK(relay->Running());
}

TEST_CASE("https listener: serves the API over TLS with its certificate and refuses plain HTTP") {
  RelayFixture fx;
  const std::string dir = fx.pg().base_dir();
  const devtools::TestPki pki(dir);
  for (Status st : {pki.MakeCa("rest-ca", "walrelay REST test CA"),
                    pki.MakeSigned("rest", "localhost", "rest-ca",
                                   "subjectAltName = IP:127.0.0.1, DNS:localhost"),
                    pki.MakeSigned("other", "localhost", "rest-ca", "")}) {
    REQUIRE_MESSAGE(st.ok(), st.ToString());
  }
  const std::map<std::string, std::string> https = {
      {"listeners", "https://127.0.0.1:0"},
      {"listeners.https.ssl.certificate.location", pki.CertPath("rest")},
      {"listeners.https.ssl.key.location", pki.KeyPath("rest")}};
  auto relay = fx.StartRelay(fx.WriteConfig("resttls", https));
  REQUIRE(devtools::ReadFile(fx.log_path()).find("REST API listening on https://127.0.0.1:") !=
          std::string::npos);
  const int port = RestPort(fx);
  auto reply = Https(port, pki.CertPath("rest-ca"), "/connectors/itest-resttls/status");
  REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
  CHECK(reply->status == 200);
  CHECK(reply->body.find("\"connector\":{\"state\":\"RUNNING\"") != std::string::npos);
  // Plain HTTP gets no HTTP answer: the connection ends in the TLS handshake.
  const Reply plain = Http(port, "GET", "/healthz");
  CHECK(plain.status == 0);
  // The server still serves TLS after that.
  reply = Https(port, pki.CertPath("rest-ca"), "/healthz");
  REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
  CHECK(reply->status == 200);
  CHECK(relay->Running());

  // A wrong or missing file is a configuration error naming its key.
  const std::string garbage = dir + "/garbage.pem";
  std::ofstream(garbage) << "not a certificate\n";
  struct Case {
    std::map<std::string, std::string> changes;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {{{"listeners.https.ssl.certificate.location", ""}},
            "'listeners' is https://... but 'listeners.https.ssl.certificate.location' is not set"},
           {{{"listeners.https.ssl.key.location", dir + "/missing.key"}},
            "'listeners.https.ssl.key.location': cannot read '" + dir + "/missing.key'"},
           {{{"listeners.https.ssl.certificate.location", dir}},
            "'listeners.https.ssl.certificate.location': '" + dir + "' is not a regular file"},
           {{{"listeners.https.ssl.certificate.location", garbage}},
            "'listeners.https.ssl.certificate.location': cannot load a PEM certificate chain"},
           {{{"listeners.https.ssl.key.location", garbage}},
            "'listeners.https.ssl.key.location': cannot load an unencrypted PEM private key"},
           {{{"listeners.https.ssl.key.location", pki.KeyPath("other")}},
            "'listeners.https.ssl.key.location' does not hold the private key of the certificate"},
           {{{"listeners", "http://127.0.0.1:0"}},
            "'listeners.https.ssl.certificate.location' is set but 'listeners' is http://"}}) {
    auto keys = https;
    for (const auto& [k, v] : c.changes) keys[k] = v;
    auto result = fx.RunCommand({"run", "--config", fx.WriteConfig("resttlsbad", keys)});
    auto& code = result.first;
    auto& out = result.second;
    CHECK_MESSAGE(code == 2, out);
    CHECK_MESSAGE(out.find(c.expected) != std::string::npos, out);
  }
}

TEST_CASE("rest.auth.*, rest.allowed.hosts, rest.max.connections: wrong values are config errors") {
  auto error = [](const std::map<std::string, std::string>& keys) {
    auto settings = ParseWith(keys);
    REQUIRE(!settings.ok());
    CHECK(settings.status().code() == ErrorCode::kConfig);
    return settings.status().message();
  };
  CHECK(error({{"rest.auth.token", ""}}).find("'rest.auth.token' is empty") == 0);
  CHECK(error({{"rest.auth.basic.username", "u"}}).find("'rest.auth.basic.password' is missing") ==
        0);
  CHECK(error({{"rest.auth.basic.password", "p-Qz7"}})
            .find("'rest.auth.basic.username' is "
                  "missing") == 0);
  CHECK(error({{"rest.auth.basic.username", "a:b"}, {"rest.auth.basic.password", "p"}})
            .find("contains ':'") != std::string::npos);
  const std::string spaced = error({{"rest.auth.token", "two words-Qz7"}});
  CHECK(spaced.find("'rest.auth.token' contains whitespace") == 0);
  CHECK(spaced.find("Qz7") == std::string::npos);
  CHECK(error({{"rest.allowed.hosts", "relay.internal:8083"}}).find("'rest.allowed.hosts'") == 0);
  CHECK(error({{"rest.max.connections", "0"}}) ==
        "'rest.max.connections' must be between 1 and 10000, got 0");
  CHECK(error({{"rest.max.connections", "many"}})
            .find("'rest.max.connections' must be an "
                  "integer") == 0);
  CHECK(ParseWith({})->listener.max_connections == 64);
  CHECK(ParseWith({{"rest.max.connections", "5"}})->listener.max_connections == 5);

  auto ok = ParseWith({{"rest.auth.token", "t"}, {"rest.allowed.hosts", "Relay.Internal, other"}});
  REQUIRE(ok.ok());
  CHECK(ok->rest_auth.HasCredentials());
  CHECK(ok->rest_auth.allowed_hosts == std::vector<std::string>{"relay.internal", "other"});
  auto https = ParseWith({{"listeners", "https://[::1]:8443"}});
  REQUIRE(!https.ok());
  CHECK(https.status().message().find("'listeners.https.ssl.certificate.location' is not set") !=
        std::string::npos);

  ListenerAddress listener;
  for (const char* host : {"127.0.0.1", "127.8.9.10", "::1"}) {
    listener.host = host;
    CHECK_MESSAGE(listener.IsLoopback(), host);
  }
  for (const char* host : {"0.0.0.0", "::", "10.1.2.3", "128.0.0.1"}) {
    listener.host = host;
    CHECK_MESSAGE(!listener.IsLoopback(), host);
  }
}

namespace {

// The highest file descriptor number this process has open.
int HighestOpenFd() {
  int highest = 2;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(dir)) highest = std::max(highest, std::atoi(entry->d_name));
    closedir(dir);
  }
  return highest;
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Sends one keep-alive GET on `fd` and returns the answer's status line ("" on failure).
std::string Exchange(int fd) {
  const std::string request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) return "";
  std::string raw;
  char buf[1024];
  while (raw.find("\r\n\r\nok") == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return "";
    raw.append(buf, n);
  }
  return raw.substr(0, raw.find("\r\n"));
}

// Holds the process at its file descriptor limit: lowers RLIMIT_NOFILE and fills every free
// descriptor; the destructor gives them back and restores the limit.
class FdExhaustion {
 public:
  FdExhaustion() {
    REQUIRE(getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(HighestOpenFd() + 16);
    REQUIRE(low.rlim_cur <= saved_.rlim_cur);
    REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
    for (int fd; (fd = open("/dev/null", O_RDONLY)) >= 0;) fillers_.push_back(fd);
    REQUIRE(errno == EMFILE);
  }
  ~FdExhaustion() {
    for (int fd : fillers_) close(fd);
    setrlimit(RLIMIT_NOFILE, &saved_);
  }
  // Frees one descriptor, for the caller's next open or socket.
  void FreeOne() {
    REQUIRE(!fillers_.empty());
    close(fillers_.back());
    fillers_.pop_back();
  }

 private:
  rlimit saved_{};
  std::vector<int> fillers_;
};

}  // namespace

TEST_CASE("REST accept: out of file descriptors, the server neither spins nor stops serving") {
  boost::asio::io_context io(1);
  ListenerAddress address;
  address.port = 0;
  auto server = HttpServer::Start(io, address, [](const HttpRequest&) {
    return HttpResponse{200, "text/plain", "ok"};
  });
  REQUIRE_MESSAGE(server.ok(), server.status().ToString());
  const int port = (*server)->port();
  std::thread loop([&io] { io.run(); });
  struct StopLoop {
    boost::asio::io_context& io;
    std::thread& loop;
    ~StopLoop() {
      io.stop();
      loop.join();
    }
  } stop_loop{io, loop};

  // A client connected before the shortage must keep being served through it.
  const int kept = ConnectLoopback(port, std::chrono::seconds(5));
  REQUIRE(kept >= 0);
  CHECK(Exchange(kept) == "HTTP/1.1 200 OK");

  int waiting = -1;
  {
    FdExhaustion exhaustion;
    exhaustion.FreeOne();
    // Accepted by the kernel; walrelay's accept() now fails with EMFILE.
    waiting = ConnectLoopback(port, std::chrono::seconds(5));
    REQUIRE(waiting >= 0);
    REQUIRE(Eventually([&] { return (*server)->accept_errors() >= 1; }, std::chrono::seconds(5)));

    const uint64_t errors_before = (*server)->accept_errors();
    const double cpu_before = ProcessCpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double cpu_used = ProcessCpuSeconds() - cpu_before;
    const uint64_t retries = (*server)->accept_errors() - errors_before;
    MESSAGE("while out of descriptors for 1 s: " << cpu_used << " s CPU, " << retries
                                                 << " accept retries");
    // A loop that retries at once burns the whole second (and millions of retries).
    CHECK(cpu_used < 0.2);
    CHECK(retries >= 2);
    CHECK(retries <= 1000 / HttpServer::kAcceptRetryDelay.count() + 2);
    CHECK(Exchange(kept) == "HTTP/1.1 200 OK");
  }
  // Descriptors are free again: the waiting connection is accepted and served.
  CHECK(Exchange(waiting) == "HTTP/1.1 200 OK");
  const int fresh = ConnectLoopback(port, std::chrono::seconds(5));
  REQUIRE(fresh >= 0);
  CHECK(Exchange(fresh) == "HTTP/1.1 200 OK");
  for (int fd : {kept, waiting, fresh}) close(fd);
}
