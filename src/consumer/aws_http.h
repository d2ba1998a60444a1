// One-shot HTTP/1.1 requests for the AWS credential sources (STS, the container credentials
// endpoint, the instance metadata service), and the host-name resolution DynamoClient shares.
//
// Contract: SendHttp opens a new connection for each request (plain TCP for http://, TLS with
// certificate and host-name checks for https://), sends it and reads the whole reply; every
// step, the name lookup included, ends within the request's timeout, and a failure to get any
// reply is Status::Connection naming the URL (never a header value: they may hold tokens). An
// answer with an error status is returned as it came, for the caller to judge.
//
// Thread-safety: the functions keep no state and may be called from any thread at once.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace walrelay::consumer {

struct HttpUrl {
  bool tls = false;
  std::string host;
  std::string port;            // as given, or "80" / "443"
  std::string target = "/";    // path and query
  std::string Origin() const;  // "scheme://host:port", for messages
};

// Parses "http://host[:port][/path]" and "https://host[:port][/path]" (IPv6 hosts in []).
Result<HttpUrl> ParseHttpUrl(const std::string& url);

struct HttpCall {
  std::string method = "GET";
  HttpUrl url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds timeout{1000};
};

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// Sends `call` on a new connection and returns the server's answer, whatever its status.
Result<HttpAnswer> SendHttp(const HttpCall& call);

// Looks `host` up within `timeout`: an IP literal at once, a name on a helper thread that is
// left behind (it cannot be interrupted) when the lookup outlasts the timeout.
Result<boost::asio::ip::tcp::resolver::results_type> ResolveWithin(
    const std::string& host, const std::string& port, std::chrono::milliseconds timeout);

}  // namespace walrelay::consumer
