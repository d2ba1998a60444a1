// Redis Cluster key slots and node names as the Redis store's cluster routing computes them,
// against values Redis documents (cluster spec) and `CLUSTER KEYSLOT` answers; and the routing's
// deadline against a node that redirects forever.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "consumer/redis_cluster.h"

namespace walrelay::consumer {
namespace {

TEST_CASE("Redis Cluster: CRC16-XMODEM and key slots") {
  CHECK(Crc16("123456789") == 0x31C3);  // the cluster specification's check value
  CHECK(Crc16("") == 0);
  CHECK(KeySlot("foo") == 12182);
  CHECK(KeySlot("bar") == 5061);
  CHECK(KeySlot("123456789") == 12739);
  CHECK(KeySlot("walrelay:consumer:svc:k-0") == 12268);  // CLUSTER KEYSLOT on redis 7.0
}

TEST_CASE("Redis Cluster: hash tags") {
  // The part between the first '{' and the next '}' decides, when it is not empty.
  CHECK(KeySlot("{user1000}.following") == KeySlot("user1000"));
  CHECK(KeySlot("{user1000}.followers") == KeySlot("{user1000}.following"));
  CHECK(KeySlot("foo{bar}{zap}") == KeySlot("bar"));
  CHECK(KeySlot("foo{{bar}}zap") == KeySlot("{bar"));
  // An empty tag, or no closing brace: the whole key.
  CHECK(KeySlot("foo{}{bar}") == 8363);
  CHECK(KeySlot("foo{bar") == Crc16("foo{bar") % 16384);
  CHECK(KeySlot("walrelay:consumer:{svc}:a") == KeySlot("walrelay:consumer:{svc}:b"));
}

TEST_CASE("Redis Cluster: node names") {
  auto a = ParseHostPort("127.0.0.1:7000");
  REQUIRE(a.ok());
  CHECK(a->first == "127.0.0.1");
  CHECK(a->second == 7000);
  auto v6 = ParseHostPort("[::1]:7001");
  REQUIRE(v6.ok());
  CHECK(v6->first == "::1");
  CHECK(v6->second == 7001);
  for (const char* bad : {"localhost", "host:", ":7000", "host:70000", "host:7x", "host:0"}) {
    auto r = ParseHostPort(bad);
    CHECK_MESSAGE(!r.ok(), bad);
    if (!r.ok()) CHECK(r.status().message().find(bad) != std::string::npos);
  }
}

}  // namespace
}  // namespace walrelay::consumer

namespace walrelay::consumer {
namespace {

// A stand-in cluster node that redirects every key to itself, slowly: what a client meets
// when a slot's owner keeps changing or a redirect target hangs. A real cluster cannot be made
// to do this on purpose; the client's handling of its own deadline is the point.
class RedirectLoopNode {
 public:
  explicit RedirectLoopNode(std::chrono::milliseconds delay) : delay_(delay) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RedirectLoopNode() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  std::string name() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  void Serve() {
    std::vector<std::thread> clients;
    while (!stop_) {
      const int c = accept(fd_, nullptr, nullptr);
      if (c < 0) break;
      clients.emplace_back([this, c] { Client(c); });
    }
    for (auto& t : clients) t.join();
  }
  // Reads RESP commands; CLUSTER SLOTS maps every slot here, anything else is MOVED here.
  void Client(int c) {
    std::string buf;
    char chunk[4096];
    while (!stop_) {
      const ssize_t n = recv(c, chunk, sizeof chunk, 0);
      if (n <= 0) break;
      buf.append(chunk, static_cast<size_t>(n));
      while (true) {
        std::vector<std::string> args;
        size_t used = Parse(buf, &args);
        if (used == 0) break;
        buf.erase(0, used);
        std::string reply;
        if (args.size() >= 2 && args[0] == "CLUSTER" && args[1] == "SLOTS") {
          reply = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + std::to_string(port_) +
                  "\r\n";
        } else {
          std::this_thread::sleep_for(delay_);
          reply = "-MOVED 1 " + name() + "\r\n";
        }
        if (send(c, reply.data(), reply.size(), MSG_NOSIGNAL) < 0) break;
      }
    }
    close(c);
  }
  // One complete RESP array of bulk strings from the front of `buf`: bytes used, or 0.
  static size_t Parse(const std::string& buf, std::vector<std::string>* args) {
    size_t at = 0;
    auto line = [&](std::string* out) {
      const size_t end = buf.find("\r\n", at);
      if (end == std::string::npos) return false;
      *out = buf.substr(at, end - at);
      at = end + 2;
      return true;
    };
    std::string head;
    if (!line(&head) || head.empty() || head[0] != '*') return 0;
    const int count = std::stoi(head.substr(1));
    for (int i = 0; i < count; ++i) {
      std::string len;
      if (!line(&len) || len.empty() || len[0] != '$') return 0;
      const size_t size = std::stoul(len.substr(1));
      if (buf.size() < at + size + 2) return 0;
      args->push_back(buf.substr(at, size));
      at += size + 2;
    }
    return at;
  }

  std::chrono::milliseconds delay_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_CASE("Redis Cluster: redirections honour the call's deadline") {
  using namespace std::chrono_literals;
  RedirectLoopNode node(200ms);
  RedisClusterOptions o;
  o.seeds = {node.name()};
  o.timeout = 1000ms;
  auto cluster = RedisCluster::Connect(o);
  REQUIRE_MESSAGE(cluster.ok(), cluster.status().ToString());
  const auto start = std::chrono::steady_clock::now();
  auto r = (*cluster)->Command("k", {"GET", "k"});
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(!r.ok());
  CHECK(r.status().code() == ErrorCode::kConnection);
  CHECK(r.status().message().find("gave up after 1000 ms") != std::string::npos);
  // Sixteen 200 ms redirections would take 3.2 s: the call stops at its 1 s.
  CHECK(took < 1500ms);
  CHECK(took >= 1000ms);
  CHECK((*cluster)->stats().moved >= 3);
}

}  // namespace
}  // namespace walrelay::consumer
