// ReceiveWatch: notices a replication connection on which nothing arrives any more.
//
// A walsender that hangs, or a network that drops packets without a reset, leaves the relay's
// socket quiet while the host's TCP stack may still acknowledge what the relay sends. With
// nothing received for half of database.replication.receive.timeout.ms, `probe` runs (the
// relay sends a status update that asks the server to answer: an idle walsender that gets
// regular status updates sends nothing of its own); with nothing for the whole timeout, `lost`
// runs. Bytes waiting unread on the socket count as received, as the relay does not read while
// paused or backpressured.
//
// Loop thread only. `probe` and `lost` may call Stop().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "common/status.h"

namespace walrelay {

class ReceiveWatch {
 public:
  // `timeout_ms` 0 = never watch.
  ReceiveWatch(boost::asio::io_context& io, int64_t timeout_ms, std::function<void()> probe,
               std::function<void(Status)> lost);

  // Watches a new connection's socket.
  void Start(int socket);
  // Something arrived.
  void Received();
  void Stop();

 private:
  void Schedule();
  void Check();

  boost::asio::steady_timer timer_;
  std::chrono::milliseconds timeout_;
  std::function<void()> probe_;
  std::function<void(Status)> lost_;
  int socket_ = -1;
  bool active_ = false;
  bool probed_ = false;
  std::chrono::steady_clock::time_point last_received_;
};

}  // namespace walrelay
