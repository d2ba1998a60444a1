#include "status/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace walrelay {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

constexpr auto kIdleTimeout = std::chrono::seconds(30);
constexpr uint64_t kMaxBodyBytes = 64 * 1024;

// One client connection: read a request, answer it, repeat while the client keeps it alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<HttpServer::Handler> handler)
      : stream_(std::move(socket)), handler_(std::move(handler)) {}

  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxBodyBytes);
    stream_.expires_after(kIdleTimeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) return Close();  // closed by the client, timed out, or not HTTP
    const auto& request = parser_->get();
    std::string target(request.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    HttpResponse answer = (*handler_)({std::string(request.method_string()), target});
    auto response = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(answer.status), request.version());
    response->set(http::field::server, "walrelay");
    response->set(http::field::content_type, answer.content_type);
    response->keep_alive(request.keep_alive());
    response->body() = std::move(answer.body);
    response->prepare_payload();
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](beast::error_code write_ec, size_t) {
                        if (write_ec || !response->keep_alive()) return self->Close();
                        self->Read();
                      });
  }

  void Close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpServer::Handler> handler_;
};

}  // namespace

HttpServer::HttpServer(boost::asio::io_context& io, Handler handler)
    : acceptor_(io), handler_(std::make_shared<Handler>(std::move(handler))) {}

HttpServer::~HttpServer() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(boost::asio::io_context& io,
                                                      const ListenerAddress& address,
                                                      Handler handler) {
  std::unique_ptr<HttpServer> server(new HttpServer(io, std::move(handler)));
  boost::system::error_code ec;
  const tcp::endpoint endpoint(boost::asio::ip::make_address(address.host, ec), address.port);
  auto& acceptor = server->acceptor_;
  if (!ec) acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(boost::asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::Config("cannot listen on " + address.host + ":" + std::to_string(address.port) +
                          " (listeners): " + ec.message());
  }
  server->port_ = acceptor.local_endpoint().port();
  server->Accept();
  return server;
}

std::string HttpServer::HostPort() const {
  boost::system::error_code ec;
  const auto endpoint = acceptor_.local_endpoint(ec);
  const auto address = endpoint.address();
  const std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
  return host + ":" + std::to_string(port_);
}

void HttpServer::Accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == boost::asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      spdlog::debug("REST API: accept failed: {}", ec.message());
    } else {
      std::make_shared<Session>(std::move(socket), handler_)->Read();
    }
    Accept();
  });
}

}  // namespace walrelay
