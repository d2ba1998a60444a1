#include "relay/receive_watch.h"

#include <poll.h>

#include <string>

namespace walrelay {

ReceiveWatch::ReceiveWatch(boost::asio::io_context& io, int64_t timeout_ms,
                           std::function<void()> probe, std::function<void(Status)> lost)
    : timer_(io), timeout_(timeout_ms), probe_(std::move(probe)), lost_(std::move(lost)) {}

void ReceiveWatch::Start(int socket) {
  if (timeout_.count() <= 0) return;
  socket_ = socket;
  active_ = true;
  Received();
  Schedule();
}

void ReceiveWatch::Received() {
  last_received_ = std::chrono::steady_clock::now();
  probed_ = false;
}

void ReceiveWatch::Stop() {
  active_ = false;
  timer_.cancel();
}

void ReceiveWatch::Schedule() {
  timer_.expires_at(last_received_ + (probed_ ? timeout_ : timeout_ / 2));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && active_) Check();
  });
}

void ReceiveWatch::Check() {
  pollfd readable{socket_, POLLIN, 0};
  if (poll(&readable, 1, 0) > 0) Received();
  const auto silent = std::chrono::steady_clock::now() - last_received_;
  if (silent >= timeout_ / 2 && !probed_) {
    probed_ = true;
    probe_();
    if (!active_) return;
  } else if (silent >= timeout_) {
    active_ = false;
    return lost_(Status::Connection(
        "nothing received from the server for " + std::to_string(timeout_.count()) +
        " ms (database.replication.receive.timeout.ms), not even an answer to a status update "
        "that asked for one"));
  }
  Schedule();
}

}  // namespace walrelay
