// HttpServer: a small HTTP/1.1 server (Boost.Beast) for the REST API, on the relay's own
// single-threaded io_context.
//
// Handlers therefore run on the relay's event-loop thread, between its other handlers, and read
// or change relay state without locks; they must be quick and never block. Requests carry no
// body that matters (bodies over 64 KiB are refused); connections are kept alive as the client
// asks and closed after 30 s of silence.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it
// clang-format off
#include <boost/asio.hpp>
// clang-format on

#include "common/status.h"
#include "config/relay_settings.h"

namespace walrelay {

struct HttpRequest {
  std::string method;  // "GET", "PUT", ...
  std::string path;    // target without the query string
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Binds and listens; the port actually bound is port().
  static Result<std::unique_ptr<HttpServer>> Start(boost::asio::io_context& io,
                                                   const ListenerAddress& address, Handler handler);
  ~HttpServer();

  uint16_t port() const { return port_; }
  // "host:port" as bound, IPv6 hosts in brackets.
  std::string HostPort() const;

 private:
  HttpServer(boost::asio::io_context& io, Handler handler);
  void Accept();

  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<Handler> handler_;  // shared with live sessions
  uint16_t port_ = 0;
};

}  // namespace walrelay
