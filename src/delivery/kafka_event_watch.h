// KafkaEventWatch: serves the producer's delivery reports on the loop thread. It waits on
// librdkafka's queue event descriptor and polls the producer when it signals, and also every
// kSafetyPoll for events that do not signal it (errors). Stop() cancels both; nothing is
// polled after it.
#pragma once

#include <chrono>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "common/status.h"
#include "delivery/producer.h"

namespace walrelay {

class KafkaEventWatch {
 public:
  static constexpr std::chrono::milliseconds kSafetyPoll{200};

  KafkaEventWatch(boost::asio::io_context& io, KafkaProducer& producer);
  Status Start();
  void Stop();

 private:
  void WaitForEvents();
  void ArmSafetyPoll();

  KafkaProducer& producer_;
  boost::asio::posix::stream_descriptor events_;
  boost::asio::steady_timer safety_poll_;
  bool stopped_ = false;
};

// A descriptor of our own for Asio, which closes what it is given.
Result<int> DuplicateDescriptor(int fd, const char* what);

}  // namespace walrelay
