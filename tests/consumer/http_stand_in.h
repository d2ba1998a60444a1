// A small HTTP/1.1 server on loopback for tests: each request is answered by the handler the
// test gives, so a test can stand in for an AWS endpoint (STS, the container credentials
// endpoint, the instance metadata service) or sit in front of dynalite. Each client
// connection gets its own thread; the handler may therefore run on several threads at once.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace walrelay::testing {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

// A response with `status` and `body`, for handlers.
inline HttpResponse Answer(int status, std::string body,
                           const std::string& content_type = "application/json") {
  HttpResponse res{static_cast<boost::beast::http::status>(status), 11};
  res.set(boost::beast::http::field::content_type, content_type);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

class HttpStandIn {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  explicit HttpStandIn(Handler handler)
      : handler_(std::move(handler)),
        acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    accepting_ = std::thread([this] { Accept(); });
  }
  ~HttpStandIn() {
    stopping_ = true;
    boost::system::error_code ec;
    {
      // A blocking accept() does not wake when another thread closes the acceptor: a
      // connection does.
      boost::asio::io_context ioc;
      boost::asio::ip::tcp::socket wake(ioc);
      wake.connect(acceptor_.local_endpoint(), ec);
    }
    accepting_.join();
    acceptor_.close(ec);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : sockets_) s->shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
    }
    for (auto& t : connections_) t.join();
  }
  HttpStandIn(const HttpStandIn&) = delete;
  HttpStandIn& operator=(const HttpStandIn&) = delete;

  // "http://127.0.0.1:<port>".
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

 private:
  void Accept() {
    while (!stopping_) {
      auto socket = std::make_shared<boost::asio::ip::tcp::socket>(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(*socket, ec);
      if (ec || stopping_) return;
      std::lock_guard<std::mutex> lock(mu_);
      sockets_.push_back(socket);
      connections_.emplace_back([this, socket] { Serve(*socket); });
    }
  }

  void Serve(boost::asio::ip::tcp::socket& client) {
    namespace http = boost::beast::http;
    boost::system::error_code ec;
    boost::beast::flat_buffer buffer;
    while (!stopping_) {
      HttpRequest req;
      http::read(client, buffer, req, ec);
      if (ec) break;
      HttpResponse res = handler_(req);
      res.keep_alive(req.keep_alive());
      http::write(client, res, ec);
      if (ec || !req.keep_alive()) break;
    }
    client.close(ec);
  }

  const Handler handler_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::vector<std::shared_ptr<boost::asio::ip::tcp::socket>> sockets_;
  std::vector<std::thread> connections_;
  std::thread accepting_;
};

// Sends `req` to 127.0.0.1:`port` on a connection of its own and returns the answer (a 502
// when the server cannot be reached), for stand-ins that forward to dynalite.
inline HttpResponse Forward(HttpRequest req, int port) {
  namespace http = boost::beast::http;
  boost::asio::io_context ioc;
  boost::asio::ip::tcp::socket server(ioc);
  boost::system::error_code ec;
  server.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)},
                 ec);
  HttpResponse res;
  boost::beast::flat_buffer buffer;
  req.keep_alive(false);
  if (!ec) http::write(server, req, ec);
  if (!ec) http::read(server, buffer, res, ec);
  if (ec) return Answer(502, "{\"message\":\"" + ec.message() + "\"}");
  return res;
}

}  // namespace walrelay::testing
