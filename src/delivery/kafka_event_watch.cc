#include "delivery/kafka_event_watch.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace walrelay {

Result<int> DuplicateDescriptor(int fd, const char* what) {
  const int copy = dup(fd);
  if (copy < 0) {
    return Status::Internal(std::string("cannot duplicate the ") + what + ": " +
                            std::strerror(errno));
  }
  return copy;
}

KafkaEventWatch::KafkaEventWatch(boost::asio::io_context& io, KafkaProducer& producer)
    : producer_(producer), events_(io), safety_poll_(io) {}

Status KafkaEventWatch::Start() {
  auto fd = DuplicateDescriptor(producer_.event_fd(), "Kafka event descriptor");
  if (!fd.ok()) return fd.status();
  events_.assign(*fd);
  WaitForEvents();
  ArmSafetyPoll();
  return Status::Ok();
}

void KafkaEventWatch::Stop() {
  stopped_ = true;
  boost::system::error_code ignored;
  safety_poll_.cancel();
  events_.cancel(ignored);
  events_.close(ignored);
}

void KafkaEventWatch::WaitForEvents() {
  events_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     [this](const boost::system::error_code& ec) {
                       if (ec || stopped_) return;
                       producer_.ClearEvent();
                       producer_.Poll();
                       WaitForEvents();
                     });
}

void KafkaEventWatch::ArmSafetyPoll() {
  safety_poll_.expires_after(kSafetyPoll);
  safety_poll_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    producer_.Poll();
    ArmSafetyPoll();
  });
}

}  // namespace walrelay
