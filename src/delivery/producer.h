// KafkaProducer: a librdkafka producer whose delivery reports are served on the caller's
// thread, never on librdkafka's internal threads.
//
// Produce() copies the record (key, value, headers) into librdkafka and tags it with a
// ticket. Poll() serves delivery reports, calling the DeliveryHandler once per record with
// its ticket. event_fd() becomes readable when reports are waiting, so an event loop can wait
// on it instead of spinning. Not thread-safe: use from one thread.
//
// The first record for a topic triggers a metadata request for that topic on a background
// thread: librdkafka on its own learns a new topic's partitions only on its one-second topic
// scan, so every new topic (and a relay's start) would otherwise hold its first records
// for up to a second. Topic handles are kept for the producer's lifetime.
//
// Produce() never waits: when librdkafka's queue is full (queue.buffering.max.messages or
// .max.kbytes) it returns at once with RD_KAFKA_RESP_ERR__QUEUE_FULL as the error code, and
// the caller keeps the record until delivery reports have made room.
//
// Exceptions thrown by the DeliveryHandler or FailureHandler never unwind through librdkafka:
// they become a kInternal failure() (the record whose report was being served is not
// acknowledged to the handler by the producer).
//
// Producer-wide errors (librdkafka's error_cb) are served by Poll() as well. The ones that
// retrying cannot cure (a refused SASL login, a failed TLS handshake, a fatal librdkafka
// error) become failure() and go to the FailureHandler once; the others (a broker down, a
// connection reset) are only logged, as librdkafka retries them itself.
//
// A blocking librdkafka call made on another thread (a transaction's commit, which polls:
// delivery/kafka_transactions.cc), or made on the loop thread in the middle of handling a
// message (the flush before a commit, waiting for room for the offset record), runs inside a
// DeferCallbacks scope: the reports and errors it would serve there are kept, the loop is
// woken through event_fd(), and its next Poll() serves them in order, so handlers still run on
// the producer's own thread only, and never nested inside the relay's own handling (a refused
// report that ends the stream must not close the connection whose message is being handled).
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/rdkafka_handles.h"
#include "common/status.h"
#include "delivery/record_sink.h"
#include "transform/record.h"

namespace walrelay {

struct DeliveryReport {
  uint64_t ticket;
  rd_kafka_resp_err_t error;  // RD_KAFKA_RESP_ERR_NO_ERROR when Kafka acknowledged it
  std::string description;    // "event id X (topic T, partition P, key K)" when it failed
  Record failed;              // when it failed: topic, key, value and headers, for a dead letter
};

class KafkaProducer final : public RecordSink {
 public:
  using DeliveryHandler = std::function<void(const DeliveryReport&)>;
  using FailureHandler = std::function<void(const Status&)>;

  // `properties` go to librdkafka unchanged; errors name the `kafka.`-prefixed key. Values of
  // secret-named keys and of `hidden_value_keys` (unprefixed: values that came from ${env:}
  // or ${file:}) never appear in an error.
  static Result<std::unique_ptr<KafkaProducer>> Create(
      const std::map<std::string, std::string>& properties, DeliveryHandler handler,
      FailureHandler on_failure = {}, const std::set<std::string>& hidden_value_keys = {});
  ~KafkaProducer();
  KafkaProducer(const KafkaProducer&) = delete;
  KafkaProducer& operator=(const KafkaProducer&) = delete;

  // The ticket of a record whose delivery report is not passed on: a transactional record whose
  // acknowledgement is its transaction's commit (an offset record).
  static constexpr uint64_t kNoReport = UINT64_MAX;
  // Errors carry librdkafka's code in `error_code` when the caller needs to classify them.
  Status Produce(const Record& record, uint64_t ticket,
                 rd_kafka_resp_err_t* error_code = nullptr) override;
  // The largest value that fits message.max.bytes with room for dead-letter headers.
  size_t MaxValueBytes() const override { return max_value_bytes_; }
  // Serves waiting delivery reports without blocking; returns how many were served.
  int Poll();
  int event_fd() const { return event_read_fd_; }
  // Drains event_fd() after it became readable.
  void ClearEvent();
  int OutstandingMessages() const override;
  // One metadata request, bounded by `timeout_ms`: "N broker(s) at ..." or why not (the
  // producer-wide failure, if one explains it).
  Result<std::string> CheckBrokers(int timeout_ms);
  // The first producer-wide error retrying cannot cure (kKafkaAuthentication, kKafkaTls or
  // kKafka for a fatal one); OK while there is none. Its message names the `kafka.` keys to check.
  const Status& failure() const { return failure_; }
  // Drops everything not yet delivered; their delivery reports arrive with a purge error.
  void PurgeAll();
  // The librdkafka handle, for its transaction API (delivery/exactly_once.h); the producer keeps
  // ownership. Created with `transactional.id` among the properties, the producer is
  // transactional and every Produce() must fall inside a transaction begun on this handle.
  rd_kafka_t* native_handle() const { return rk_.get(); }

  // While one lives on a thread, every producer's callbacks served on that thread are kept for
  // the next Poll() (see above). Scopes nest on one thread (the outermost one ends the
  // deferral); not across producers' own threads.
  class DeferCallbacks {
   public:
    DeferCallbacks();
    ~DeferCallbacks();
    DeferCallbacks(const DeferCallbacks&) = delete;
    DeferCallbacks& operator=(const DeferCallbacks&) = delete;

   private:
    const bool outer_;  // whether a scope around this one defers already
  };

 private:
  struct DeferredError {
    int code;
    std::string reason;
  };
  using Deferred = std::variant<DeliveryReport, DeferredError>;
  class MetadataPrefetcher;
  KafkaProducer();
  rd_kafka_topic_t* TopicHandle(const std::string& name);
  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* message, void* opaque);
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque);
  // The callbacks' bodies; they may throw, the static callbacks catch. A report is nullopt
  // for a record without one (kNoReport).
  std::optional<DeliveryReport> MakeReport(const rd_kafka_message_t* message) const;
  void ServeDelivery(rd_kafka_t* rk, const DeliveryReport& report);
  void ServeError(rd_kafka_t* rk, int err, const char* reason);
  // Keeps a callback served inside a DeferCallbacks scope and wakes the loop for it.
  void Defer(Deferred callback);
  // Serves what Defer() kept, in order, before anything newer; returns how many.
  int ServeDeferred();
  // An exception escaped a callback: failure() becomes kInternal and the FailureHandler is told.
  void ReportCallbackException(const char* serving, const char* what) noexcept;
  // Sets failure() and calls the FailureHandler, once.
  void ReportFailure(const Status& failure);
  // A failed delivery report may be the first sign of a fatal error whose callback is not
  // served yet: report the fatal error before it.
  void ReportFatalErrorFirst(rd_kafka_t* rk);

  KafkaHandlePtr rk_;
  KafkaQueuePtr main_queue_;
  std::unordered_map<std::string, KafkaTopicPtr> topics_;
  // Declared after rk_ so that it is destroyed (and its thread joined) before the handle.
  std::unique_ptr<MetadataPrefetcher> prefetcher_;
  DeliveryHandler handler_;
  FailureHandler on_failure_;
  Status failure_;
  // Values of secret properties, removed from librdkafka's error texts before they are shown.
  std::vector<std::string> secrets_;
  std::mutex deferred_mutex_;
  std::vector<Deferred> deferred_;  // guarded by deferred_mutex_
  int event_read_fd_ = -1;
  int event_write_fd_ = -1;
  size_t max_value_bytes_ = 0;
};

// Human-readable identity of a record for error messages: its `id` header, topic and key.
std::string DescribeRecord(const Record& record);

// librdkafka's text for a delivery error, plus what the broker most likely refused and what
// to change, for the refusals an operator can act on (record too large, topic name invalid
// or missing, too few in-sync replicas).
std::string DeliveryErrorText(rd_kafka_resp_err_t error);

// True when a delivery or produce error concerns only the one record it is reported for, so
// errors.tolerance=all may dead-letter or skip that record and go on. False for everything
// that says the producer, a broker or a whole topic cannot take records: skipping then would
// skip, and confirm, every record after it.
bool IsRecordSpecificError(rd_kafka_resp_err_t error);

}  // namespace walrelay
