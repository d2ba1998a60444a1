// HttpServer: a small HTTP/1.1 server (Boost.Beast) for the REST API, on the relay's own
// single-threaded io_context.
//
// Handlers therefore run on the relay's event-loop thread, between its other handlers, and read
// or change relay state without locks; they must be quick and never block. Requests carry no
// body that matters (bodies over 64 KiB are refused); connections are kept alive as the client
// asks and closed after 30 s of silence.
//
// An https listener serves TLS 1.2 or later with the PEM certificate chain and key it names;
// a client that does not complete the handshake (plain HTTP, say) gets no answer.
//
// A failing accept() (out of file descriptors: EMFILE, ENFILE; out of memory: ENOBUFS,
// ENOMEM) leaves the connection in the listen queue, so accepting again at once would fail at
// once, forever, at full CPU. The server instead logs (at most every 10 s, with a count) and
// retries after 100 ms; connections already open are served meanwhile, and the queued ones
// once descriptors are free again.
//
// At most `max_connections` (rest.max.connections) connections are served at once, so idle or
// slow clients cannot hold every descriptor of the relay. One more is accepted and closed at
// once: on http after a best-effort `503` (it is sent before the request is read), on https
// without an answer (no handshake is spent on it). Refusals are counted and logged at most every
// 10 s with a count; the connections already open are served as before.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it
#include <vector>

#include <boost/asio.hpp>
// clang-format off
// clang-format on

namespace boost::asio::ssl {
class context;
}

#include "common/status.h"
#include "config/relay_settings.h"

namespace walrelay {

struct HttpRequest {
  std::string method;                              // "GET", "PUT", ...
  std::string path;                                // target without the query string
  std::optional<std::string> host = std::nullopt;  // the Host header, if any
  std::string authorization = {};                  // the Authorization header; "" if none
  // Set by browsers (never by curl): where the request comes from, to refuse cross-site ones.
  std::optional<std::string> origin = std::nullopt;          // the Origin header, if any
  std::optional<std::string> sec_fetch_site = std::nullopt;  // the Sec-Fetch-Site header
  // What a body would be: an HTML form's types are refused for changes (status/rest_access.h).
  std::optional<std::string> content_type = std::nullopt;  // the Content-Type header, if any
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers = {};  // e.g. WWW-Authenticate
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Loads the certificate and key of an https listener, binds and listens; the port actually
  // bound is port(). Errors name the config key.
  static Result<std::unique_ptr<HttpServer>> Start(boost::asio::io_context& io,
                                                   const ListenerAddress& address, Handler handler);
  ~HttpServer();

  uint16_t port() const { return port_; }
  // "host:port" as bound, IPv6 hosts in brackets.
  std::string HostPort() const;
  // accept() calls that failed since the start; read from any thread.
  uint64_t accept_errors() const { return accept_errors_.load(std::memory_order_relaxed); }
  // Connections refused for rest.max.connections since the start; read from any thread.
  uint64_t connections_refused() const {
    return connections_refused_.load(std::memory_order_relaxed);
  }
  // Connections being served now; read on the loop thread.
  int open_connections() const { return *open_connections_; }

  static constexpr std::chrono::milliseconds kAcceptRetryDelay{100};

 private:
  HttpServer(boost::asio::io_context& io, Handler handler);
  void Accept();
  void RetryAcceptLater(const boost::system::error_code& error);
  void RefuseConnection(boost::asio::ip::tcp::socket socket);

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::shared_ptr<Handler> handler_;                // shared with live sessions
  std::shared_ptr<boost::asio::ssl::context> tls_;  // null for http; shared with live sessions
  uint16_t port_ = 0;
  int max_connections_ = 1;
  // Shared with live sessions, which decrement it when they end (possibly after the server).
  std::shared_ptr<int> open_connections_ = std::make_shared<int>(0);
  std::atomic<uint64_t> connections_refused_{0};
  uint64_t connections_refused_unreported_ = 0;
  std::chrono::steady_clock::time_point next_refusal_warning_{};
  std::atomic<uint64_t> accept_errors_{0};
  uint64_t accept_errors_unreported_ = 0;
  std::chrono::steady_clock::time_point next_accept_warning_{};
};

}  // namespace walrelay
