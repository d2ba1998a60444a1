// A minimal HTTP client for walrelay's REST API in tests, and where a relay child process says
// the API listens (its log line; the tests use `listeners` port 0, on any host: tests connect
// to 127.0.0.1).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "relay_fixture.h"

namespace walrelay::testing {

struct Reply {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// One request over a fresh connection (Connection: close), read to EOF. `headers` are extra
// "Name: value" lines; one starting with "Host:" replaces the default Host: 127.0.0.1.
inline Reply Http(int port, const std::string& method, const std::string& path,
                  const std::vector<std::string>& headers = {}) {
  Reply reply;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return reply;
  }
  std::string request = method + " " + path + " HTTP/1.1\r\n";
  bool has_host = false;
  for (const auto& h : headers) {
    request += h + "\r\n";
    has_host = has_host || h.rfind("Host:", 0) == 0;
  }
  if (!has_host) request += "Host: 127.0.0.1\r\n";
  request += "Content-Length: 0\r\nConnection: close\r\n\r\n";
  REQUIRE(write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size()));
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

inline int RestPort(const RelayFixture& fx) {
  REQUIRE(devtools::WaitForFileContains(fx.log_path(), "REST API listening on",
                                        std::chrono::seconds(10)));
  std::smatch m;
  const std::string log = devtools::ReadFile(fx.log_path());
  REQUIRE(
      std::regex_search(log, m, std::regex("REST API listening on https?://\\S+:(\\d+)")));
  return std::stoi(m[1]);
}

}  // namespace walrelay::testing
