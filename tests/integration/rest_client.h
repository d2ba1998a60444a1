// A minimal HTTP client for walrelay's REST API in tests, a /metrics sample reader, and where a
// relay child process says the API listens (its log line; the tests use `listeners` port 0, on any
// host: tests connect to 127.0.0.1).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "relay_fixture.h"

namespace walrelay::testing {

struct Reply {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// A socket connected to 127.0.0.1:`port`; -1 when that fails. A nonzero `timeout` bounds each
// read and write on it.
inline int ConnectLoopback(int port, std::chrono::milliseconds timeout = {}) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (timeout.count() > 0) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// One request over a fresh connection (Connection: close), read to EOF. `headers` are extra
// "Name: value" lines; one starting with "Host:" replaces the default Host: 127.0.0.1. Status 0
// when the connection fails, or when a nonzero `timeout` passes before a read or write is done.
inline Reply Http(int port, const std::string& method, const std::string& path,
                  const std::vector<std::string>& headers = {},
                  std::chrono::milliseconds timeout = {}) {
  Reply reply;
  const int fd = ConnectLoopback(port, timeout);
  if (fd < 0) return reply;
  std::string request = method + " " + path + " HTTP/1.1\r\n";
  bool has_host = false;
  for (const auto& h : headers) {
    request += h + "\r\n";
    has_host = has_host || h.rfind("Host:", 0) == 0;
  }
  if (!has_host) request += "Host: 127.0.0.1\r\n";
  request += "Content-Length: 0\r\nConnection: close\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return reply;
  }
  std::string raw;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) raw.append(buf, n);
  close(fd);
  if (raw.rfind("HTTP/1.1 ", 0) == 0) reply.status = std::atoi(raw.c_str() + 9);
  if (auto body = raw.find("\r\n\r\n"); body != std::string::npos) {
    reply.head = raw.substr(0, body);
    reply.body = raw.substr(body + 4);
  }
  return reply;
}

// The value of one sample line in /metrics text, e.g. Metric(text, "walrelay_up") or with
// labels in `name`; nullopt when there is none.
inline std::optional<double> Metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return std::nullopt;
}

inline int RestPort(const RelayFixture& fx) {
  REQUIRE(devtools::WaitForFileContains(fx.log_path(), "REST API listening on",
                                        std::chrono::seconds(10)));
  std::smatch m;
  const std::string log = devtools::ReadFile(fx.log_path());
  REQUIRE(std::regex_search(log, m, std::regex("REST API listening on https?://\\S+:(\\d+)")));
  return std::stoi(m[1]);
}

}  // namespace walrelay::testing
