// SendHttp over Boost.Beast (see aws_http.h). Like DynamoClient, the exchange runs
// asynchronously on a private io_context so the stream's deadline bounds each step.
#include "consumer/aws_http.h"

#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace walrelay::consumer {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

std::string HttpUrl::Origin() const {
  return std::string(tls ? "https://" : "http://") + host + ":" + port;
}

Result<HttpUrl> ParseHttpUrl(const std::string& url) {
  HttpUrl out;
  std::string rest;
  if (url.rfind("https://", 0) == 0) {
    out.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return Status::Config("URL '" + url + "' must start with http:// or https://");
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) out.target = rest.substr(slash);
  if (authority.empty()) return Status::Config("URL '" + url + "' has no host");
  const size_t bracket = authority.rfind(']');
  const size_t colon = authority.rfind(':');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    out.host = authority.substr(0, colon);
    out.port = authority.substr(colon + 1);
    if (out.port.empty() || out.port.find_first_not_of("0123456789") != std::string::npos)
      return Status::Config("URL '" + url + "' has a bad port");
  } else {
    out.host = authority;
    out.port = out.tls ? "443" : "80";
  }
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2);
  if (out.host.empty()) return Status::Config("URL '" + url + "' has no host");
  return out;
}

Result<tcp::resolver::results_type> ResolveWithin(const std::string& host, const std::string& port,
                                                  std::chrono::milliseconds timeout) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  // An IP literal needs no lookup: numeric_host never blocks.
  auto literal = resolver.resolve(host, port,
                                  tcp::resolver::numeric_host | tcp::resolver::numeric_service, ec);
  if (!ec) return literal;
  // getaddrinfo has no timeout of its own: it runs on a thread that may outlive this call,
  // sharing only this state with it.
  struct Lookup {
    std::mutex mu;
    std::condition_variable done;
    bool finished = false;
    beast::error_code ec;
    tcp::resolver::results_type results;
  };
  auto lookup = std::make_shared<Lookup>();
  std::thread([lookup, host, port] {
    net::io_context own;
    tcp::resolver r(own);
    beast::error_code e;
    auto results = r.resolve(host, port, e);
    std::lock_guard<std::mutex> lock(lookup->mu);
    lookup->ec = e;
    lookup->results = std::move(results);
    lookup->finished = true;
    lookup->done.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(lookup->mu);
  if (!lookup->done.wait_for(lock, timeout, [&] { return lookup->finished; }))
    return Status::Connection("cannot resolve " + host + " within " +
                              std::to_string(timeout.count()) + " ms");
  if (lookup->ec) return Status::Connection("cannot resolve " + host + ": " + lookup->ec.message());
  return lookup->results;
}

namespace {

// Runs the queued operations until they finish; the stream's deadline ends them otherwise.
void RunIo(net::io_context& ioc) {
  ioc.restart();
  ioc.run();
}

template <class Stream>
beast::error_code Exchange(net::io_context& ioc, Stream& stream, beast::tcp_stream& lowest,
                           std::chrono::steady_clock::time_point deadline,
                           http::request<http::string_body>& request,
                           http::response<http::string_body>& response) {
  beast::error_code ec;
  beast::flat_buffer buffer;
  lowest.expires_at(deadline);
  http::async_write(stream, request, [&](beast::error_code e, size_t) {
    ec = e;
    if (e) return;
    http::async_read(stream, buffer, response, [&ec](beast::error_code e2, size_t) { ec = e2; });
  });
  RunIo(ioc);
  return ec;
}

}  // namespace

Result<HttpAnswer> SendHttp(const HttpCall& call) {
  const auto deadline = std::chrono::steady_clock::now() + call.timeout;
  const std::string where = call.url.Origin();
  const std::string what = call.method + " " + where + call.url.target;
  auto addresses = ResolveWithin(call.url.host, call.url.port, call.timeout);
  if (!addresses.ok()) return addresses.status().WithContext(what);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return Status::Connection(what + ": no time left after the lookup");

  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  stream.expires_at(deadline);
  stream.async_connect(*addresses, [&ec](beast::error_code e, const tcp::endpoint&) { ec = e; });
  RunIo(ioc);
  if (ec) return Status::Connection("cannot connect for " + what + ": " + ec.message());

  http::request<http::string_body> request{http::string_to_verb(call.method), call.url.target, 11};
  const bool default_port = call.url.port == (call.url.tls ? "443" : "80");
  request.set(http::field::host,
              default_port ? call.url.host : call.url.host + ":" + call.url.port);
  for (const auto& [name, value] : call.headers) request.set(name, value);
  request.keep_alive(false);
  request.body() = call.body;
  if (!call.body.empty() || call.method == "POST" || call.method == "PUT")
    request.prepare_payload();
  http::response<http::string_body> response;

  if (call.url.tls) {
    ssl::context context(ssl::context::tls_client);
    context.set_default_verify_paths(ec);
    context.set_verify_mode(ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> secure(std::move(stream), context);
    if (!SSL_set_tlsext_host_name(secure.native_handle(), call.url.host.c_str()))
      return Status::Connection("cannot set the TLS server name for " + what);
    secure.set_verify_callback(ssl::host_name_verification(call.url.host));
    beast::get_lowest_layer(secure).expires_at(deadline);
    secure.async_handshake(ssl::stream_base::client, [&ec](beast::error_code e) { ec = e; });
    RunIo(ioc);
    if (ec) return Status::Connection("TLS handshake for " + what + " failed: " + ec.message());
    ec = Exchange(ioc, secure, beast::get_lowest_layer(secure), deadline, request, response);
  } else {
    ec = Exchange(ioc, stream, stream, deadline, request, response);
  }
  if (ec) return Status::Connection(what + " failed: " + ec.message());
  HttpAnswer answer;
  answer.status = response.result_int();
  answer.body = std::move(response.body());
  return answer;
}

}  // namespace walrelay::consumer
