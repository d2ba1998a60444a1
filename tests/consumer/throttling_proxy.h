// A DynamoDB-API stand-in for throttling: an HTTP/1.1 proxy on loopback in front of dynalite
// that, while Throttle(true), answers every request with HTTP 400
// ProvisionedThroughputExceededException (what DynamoDB answers a table over its capacity) and
// otherwise forwards it unchanged. Each client connection gets its own thread and its own
// connection to the server.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace walrelay::testing {

class ThrottlingProxy {
 public:
  // Forwards to `upstream_port` on 127.0.0.1.
  explicit ThrottlingProxy(int upstream_port)
      : upstream_port_(upstream_port),
        acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    accepting_ = std::thread([this] { Accept(); });
  }
  ~ThrottlingProxy() {
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
  ThrottlingProxy(const ThrottlingProxy&) = delete;
  ThrottlingProxy& operator=(const ThrottlingProxy&) = delete;

  std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  void Throttle(bool on) { throttling_ = on; }
  int throttled() const { return throttled_; }

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
    boost::asio::io_context ioc;
    boost::system::error_code ec;
    // The server closes an idle connection (Node's keep-alive timeout): one per request.
    auto forward = [&](const http::request<http::string_body>& req,
                       http::response<http::string_body>& res) {
      boost::asio::ip::tcp::socket server(ioc);
      boost::beast::flat_buffer from_server;
      server.connect(
          {boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(upstream_port_)},
          ec);
      if (!ec) http::write(server, req, ec);
      if (!ec) http::read(server, from_server, res, ec);
    };
    boost::beast::flat_buffer from_client;
    while (!stopping_) {
      http::request<http::string_body> req;
      http::read(client, from_client, req, ec);
      if (ec) break;
      if (throttling_) {
        ++throttled_;
        http::response<http::string_body> res{http::status::bad_request, req.version()};
        res.set(http::field::content_type, "application/x-amz-json-1.0");
        res.body() =
            "{\"__type\":\"com.amazonaws.dynamodb.v20120810#"
            "ProvisionedThroughputExceededException\",\"message\":\"The level of configured "
            "provisioned throughput for the table was exceeded.\"}";
        res.keep_alive(req.keep_alive());
        res.prepare_payload();
        http::write(client, res, ec);
        if (ec) break;
        continue;
      }
      http::response<http::string_body> res;
      forward(req, res);
      if (ec) break;
      res.keep_alive(req.keep_alive());
      http::write(client, res, ec);
      if (ec) break;
    }
    client.close(ec);  // the client sees the end at once, not after its timeout
  }

  const int upstream_port_;
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> throttling_{false};
  std::atomic<int> throttled_{0};
  std::mutex mu_;
  std::vector<std::shared_ptr<boost::asio::ip::tcp::socket>> sockets_;
  std::vector<std::thread> connections_;
  std::thread accepting_;
};

}  // namespace walrelay::testing
