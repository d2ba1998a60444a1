#include "status/http_server.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <type_traits>

namespace walrelay {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;

constexpr auto kIdleTimeout = std::chrono::seconds(30);
constexpr auto kTlsShutdownTimeout = std::chrono::seconds(5);
constexpr auto kAcceptWarningInterval = std::chrono::seconds(10);
constexpr uint64_t kMaxBodyBytes = 64 * 1024;
// What a connection over rest.max.connections is told before it is closed (http only).
const std::string& TooManyConnectionsResponse() {
  static const std::string kResponse = [] {
    const std::string body = R"({"error_code":503,"message":"too many connections to the REST API )"
                             R"((rest.max.connections); retry once one has closed"})";
    return "HTTP/1.1 503 Service Unavailable\r\nServer: walrelay\r\n"
           "Content-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n"
           "Content-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  return kResponse;
}

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// One client connection: (for TLS, a handshake, then) read a request, answer it, repeat while
// the client keeps it alive.
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  Session(tcp::socket socket, std::shared_ptr<HttpServer::Handler> handler,
          std::shared_ptr<ssl::context> tls, std::shared_ptr<int> open_connections)
      : stream_(MakeStream(std::move(socket), tls.get())),
        handler_(std::move(handler)),
        tls_(std::move(tls)),
        open_connections_(std::move(open_connections)) {
    ++*open_connections_;
  }
  // The last handler holding the session has run: the connection is closed.
  ~Session() { --*open_connections_; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void Start() {
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(kIdleTimeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return beast::get_lowest_layer(self->stream_).close();
                                self->Read();
                              });
    } else {
      Read();
    }
  }

 private:
  static Stream MakeStream(tcp::socket socket, ssl::context* tls) {
    if constexpr (kTls) {
      return Stream(std::move(socket), *tls);
    } else {
      return Stream(std::move(socket));
    }
  }

  void Read() {
    parser_.emplace();
    parser_->body_limit(kMaxBodyBytes);
    beast::get_lowest_layer(stream_).expires_after(kIdleTimeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec) return Close();  // closed by the client, timed out, or not HTTP
    const auto& request = parser_->get();
    HttpRequest input;
    input.method = std::string(request.method_string());
    input.path = std::string(request.target());
    if (auto q = input.path.find('?'); q != std::string::npos) input.path.resize(q);
    if (auto host = request.find(http::field::host); host != request.end()) {
      input.host = std::string(host->value());
    }
    if (auto auth = request.find(http::field::authorization); auth != request.end()) {
      input.authorization = std::string(auth->value());
    }
    if (auto origin = request.find(http::field::origin); origin != request.end()) {
      input.origin = std::string(origin->value());
    }
    if (auto site = request.find("Sec-Fetch-Site"); site != request.end()) {
      input.sec_fetch_site = std::string(site->value());
    }
    if (auto type = request.find(http::field::content_type); type != request.end()) {
      input.content_type = std::string(type->value());
    }
    HttpResponse answer = (*handler_)(input);
    auto response = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(answer.status), request.version());
    response->set(http::field::server, "walrelay");
    response->set(http::field::content_type, answer.content_type);
    for (const auto& [name, value] : answer.headers) response->insert(name, value);
    response->keep_alive(request.keep_alive());
    response->body() = std::move(answer.body);
    response->prepare_payload();
    http::async_write(
        stream_, *response,
        [self = this->shared_from_this(), response](beast::error_code write_ec, size_t) {
          if (write_ec || !response->keep_alive()) return self->Close();
          self->Read();
        });
  }

  void Close() {
    if constexpr (kTls) {
      // close_notify, so clients that read to the end see a clean end rather than a truncation.
      beast::get_lowest_layer(stream_).expires_after(kTlsShutdownTimeout);
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        beast::get_lowest_layer(self->stream_).close();
      });
    } else {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      stream_.close();
    }
  }

  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpServer::Handler> handler_;
  std::shared_ptr<ssl::context> tls_;  // outlives stream_'s SSL object
  std::shared_ptr<int> open_connections_;
};

// Why OpenSSL refused a PEM file: Asio took the first error off OpenSSL's queue into `ec`;
// the rest of the queue is dropped so it cannot be taken for a later failure's.
std::string OpenSslReason(const boost::system::error_code& ec) {
  ERR_clear_error();
  return ec.message();
}

// OpenSSL refuses a key that is not the certificate's while loading it.
bool IsKeyMismatch(const boost::system::error_code& ec) {
  if (ec.category() != boost::asio::error::get_ssl_category()) return false;
  const auto code = static_cast<unsigned long>(ec.value());
  return ERR_GET_LIB(code) == ERR_LIB_X509 && (ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH ||
                                               ERR_GET_REASON(code) == X509_R_KEY_TYPE_MISMATCH);
}

Result<std::shared_ptr<ssl::context>> LoadTls(const ListenerAddress& address) {
  auto tls = std::make_shared<ssl::context>(ssl::context::tls_server);
  tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  // OpenSSL would otherwise ask for an encrypted key's passphrase on the terminal.
  tls->set_password_callback([](size_t, ssl::context::password_purpose) { return std::string(); });
  boost::system::error_code ec;
  tls->use_certificate_chain_file(address.certificate_path, ec);
  if (ec) {
    return Status::Config("'listeners.https.ssl.certificate.location': cannot load a PEM "
                          "certificate chain from '" +
                          address.certificate_path + "': " + OpenSslReason(ec));
  }
  tls->use_private_key_file(address.key_path, ssl::context::pem, ec);
  if (ec && IsKeyMismatch(ec)) {
    ERR_clear_error();
    return Status::Config("'listeners.https.ssl.key.location' does not hold the private key of "
                          "the certificate in 'listeners.https.ssl.certificate.location'");
  }
  if (ec) {
    return Status::Config("'listeners.https.ssl.key.location': cannot load an unencrypted PEM "
                          "private key from '" +
                          address.key_path + "': " + OpenSslReason(ec));
  }
  if (SSL_CTX_check_private_key(tls->native_handle()) != 1) {
    ERR_clear_error();
    return Status::Config("'listeners.https.ssl.key.location' does not hold the private key of "
                          "the certificate in 'listeners.https.ssl.certificate.location'");
  }
  return tls;
}

}  // namespace

HttpServer::HttpServer(boost::asio::io_context& io, Handler handler)
    : acceptor_(io), accept_retry_(io), handler_(std::make_shared<Handler>(std::move(handler))) {}

HttpServer::~HttpServer() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(boost::asio::io_context& io,
                                                      const ListenerAddress& address,
                                                      Handler handler) {
  std::unique_ptr<HttpServer> server(new HttpServer(io, std::move(handler)));
  server->max_connections_ = address.max_connections;
  if (address.https) {
    auto tls = LoadTls(address);
    if (!tls.ok()) return tls.status();
    server->tls_ = std::move(tls).value();
  }
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
    if (ec) return RetryAcceptLater(ec);
    if (*open_connections_ >= max_connections_) {
      RefuseConnection(std::move(socket));
    } else if (tls_) {
      std::make_shared<Session<TlsStream>>(std::move(socket), handler_, tls_, open_connections_)
          ->Start();
    } else {
      std::make_shared<Session<PlainStream>>(std::move(socket), handler_, nullptr,
                                             open_connections_)
          ->Start();
    }
    Accept();
  });
}

void HttpServer::RefuseConnection(tcp::socket socket) {
  boost::system::error_code ignored;
  // Asked before answering: once the peer has read the answer and closed, the address is gone.
  boost::system::error_code peer_error;
  const auto peer = socket.remote_endpoint(peer_error);
  const std::string peer_address = peer_error ? "an unknown address" : peer.address().to_string();
  if (!tls_) {
    // A fresh socket's send buffer is empty, so this small write completes at once or not at
    // all; it must never wait on the loop thread.
    socket.non_blocking(true, ignored);
    socket.write_some(boost::asio::buffer(TooManyConnectionsResponse()), ignored);
    socket.shutdown(tcp::socket::shutdown_send, ignored);
  }
  socket.close(ignored);
  connections_refused_.fetch_add(1, std::memory_order_relaxed);
  ++connections_refused_unreported_;
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_refusal_warning_) {
    spdlog::warn("REST API: refused {} connection(s) since the last warning, last from {}: "
                 "{} are open, the most rest.max.connections allows; connections already open "
                 "are served (walrelay_rest_connections_refused_total counts refusals)",
                 connections_refused_unreported_, peer_address, max_connections_);
    connections_refused_unreported_ = 0;
    next_refusal_warning_ = now + kAcceptWarningInterval;
  }
}

void HttpServer::RetryAcceptLater(const boost::system::error_code& error) {
  accept_errors_.fetch_add(1, std::memory_order_relaxed);
  ++accept_errors_unreported_;
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_accept_warning_) {
    spdlog::warn("REST API: accepting a connection failed {} time(s) since the last warning, "
                 "last with: {}; retrying every {} ms (connections already open are served; "
                 "walrelay_rest_accept_errors_total counts them)",
                 accept_errors_unreported_, error.message(), kAcceptRetryDelay.count());
    accept_errors_unreported_ = 0;
    next_accept_warning_ = now + kAcceptWarningInterval;
  }
  accept_retry_.expires_after(kAcceptRetryDelay);
  accept_retry_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !acceptor_.is_open()) return;
    Accept();
  });
}

}  // namespace walrelay
