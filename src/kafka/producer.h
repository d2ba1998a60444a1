// KafkaProducer: a librdkafka producer whose delivery reports are served on the caller's
// thread, never on librdkafka's internal threads.
//
// Produce() copies the record (key, value, headers) into librdkafka and tags it with a
// ticket. Poll() serves delivery reports, calling the DeliveryHandler once per record with
// its ticket. event_fd() becomes readable when reports are waiting, so an event loop can wait
// on it instead of spinning. Not thread-safe: use from one thread.
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "transform/record.h"

namespace walrelay {

struct DeliveryReport {
  uint64_t ticket;
  rd_kafka_resp_err_t error;  // RD_KAFKA_RESP_ERR_NO_ERROR when Kafka acknowledged it
  std::string description;    // "event id X (topic T, partition P, key K)" when it failed
  Record failed;              // when it failed: topic, key, value and headers, for a dead letter
};

class KafkaProducer {
 public:
  using DeliveryHandler = std::function<void(const DeliveryReport&)>;

  // `properties` go to librdkafka unchanged; errors name the `kafka.`-prefixed key.
  static Result<std::unique_ptr<KafkaProducer>> Create(
      const std::map<std::string, std::string>& properties, DeliveryHandler handler);
  ~KafkaProducer();
  KafkaProducer(const KafkaProducer&) = delete;
  KafkaProducer& operator=(const KafkaProducer&) = delete;

  // Errors carry librdkafka's code in `error_code` when the caller needs to classify them.
  Status Produce(const Record& record, uint64_t ticket, rd_kafka_resp_err_t* error_code = nullptr);
  // The largest value that fits message.max.bytes with room for dead-letter headers.
  size_t MaxValueBytes() const { return max_value_bytes_; }
  // Serves waiting delivery reports without blocking; returns how many were served.
  int Poll();
  int event_fd() const { return event_read_fd_; }
  // Drains event_fd() after it became readable.
  void ClearEvent();
  int OutstandingMessages() const;
  // One metadata request, bounded by `timeout_ms`: "N broker(s) at ..." or why not.
  Result<std::string> CheckBrokers(int timeout_ms);
  // Drops everything not yet delivered; their delivery reports arrive with a purge error.
  void PurgeAll();

 private:
  KafkaProducer() = default;
  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* message, void* opaque);

  struct HandleDeleter {
    void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
  };
  struct QueueDeleter {
    void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
  };
  std::unique_ptr<rd_kafka_t, HandleDeleter> rk_;
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> main_queue_;
  DeliveryHandler handler_;
  int event_read_fd_ = -1;
  int event_write_fd_ = -1;
  size_t max_value_bytes_ = 0;
};

// Human-readable identity of a record for error messages: its `id` header, topic and key.
std::string DescribeRecord(const Record& record);

}  // namespace walrelay
