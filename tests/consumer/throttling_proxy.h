// A DynamoDB-API stand-in for throttling: an HTTP/1.1 proxy on loopback in front of dynalite
// (an HttpStandIn) that, while Throttle(true), answers every request with HTTP 400
// ProvisionedThroughputExceededException (what DynamoDB answers a table over its capacity) and
// otherwise forwards it unchanged, on a connection of its own per request (the server closes
// an idle connection: Node's keep-alive timeout).
#pragma once

#include <atomic>
#include <string>

#include "http_stand_in.h"

namespace walrelay::testing {

class ThrottlingProxy {
 public:
  // Forwards to `upstream_port` on 127.0.0.1.
  explicit ThrottlingProxy(int upstream_port)
      : server_([this, upstream_port](const HttpRequest& req) {
          if (!throttling_) return Forward(req, upstream_port);
          ++throttled_;
          return Answer(400,
                        "{\"__type\":\"com.amazonaws.dynamodb.v20120810#"
                        "ProvisionedThroughputExceededException\",\"message\":\"The level of "
                        "configured provisioned throughput for the table was exceeded.\"}",
                        "application/x-amz-json-1.0");
        }) {}

  std::string endpoint() const { return server_.url(); }
  void Throttle(bool on) { throttling_ = on; }
  int throttled() const { return throttled_; }

 private:
  // Before server_: its handler reads them from its threads until server_ is destroyed.
  std::atomic<bool> throttling_{false};
  std::atomic<int> throttled_{0};
  HttpStandIn server_;
};

}  // namespace walrelay::testing
