// KafkaOutput: the Kafka side of a relay, the sink its record pipeline produces to
// (delivery/record_sink.h), with the loop-thread watch that serves delivery reports.
//
// At least once it is one KafkaProducer. With exactly once it is two transactional producers
// taking turns, one Kafka transaction each (delivery/kafka_transactions.h): `transactional.id`
// and SecondTransactionalId() of it (delivery/transactional_ids.h). Right after a commit
// Kafka's coordinator is still writing the transaction's markers, and a producer that begins
// its next transaction then is refused (CONCURRENT_TRANSACTIONS) and waits a fixed 20 ms in
// librdkafka before its records may go out; the other producer's last transaction ended a
// whole transaction ago.
//
// Contract:
// - Produce() goes to the active producer (Activate() chooses it); records of both share one
//   DeliveryHandler and one FailureHandler, served on the loop thread by Poll() and the watch
//   Start() arms until Stop().
// - OutstandingMessages() and PurgeAll() cover every producer; failure() is the first
//   producer-wide failure of any of them.
// The relay's loop thread, but for a transaction's commit, which runs on a thread of its own
// (delivery/kafka_transactions.cc); the callbacks it serves wait for the loop's next Poll().
#pragma once

#include <utility>

#include <boost/asio.hpp>
#include <cstddef>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "config/relay_settings.h"
#include "delivery/kafka_event_watch.h"
#include "delivery/producer.h"
#include "delivery/record_sink.h"
#include "delivery/transactional_ids.h"

namespace walrelay {

class KafkaOutput final : public RecordSink {
 public:
  static constexpr const char* kSecondIdSuffix = walrelay::kSecondIdSuffix;

  // One producer, or two with exactly.once.support (settings.kafka's transactional.id).
  static Result<std::unique_ptr<KafkaOutput>> Create(boost::asio::io_context& io,
                                                     const RelaySettings& settings,
                                                     KafkaProducer::DeliveryHandler handler,
                                                     KafkaProducer::FailureHandler on_failure);
  KafkaOutput(const KafkaOutput&) = delete;
  KafkaOutput& operator=(const KafkaOutput&) = delete;

  Status Produce(const Record& record, uint64_t ticket,
                 rd_kafka_resp_err_t* error_code = nullptr) override {
    return active().Produce(record, ticket, error_code);
  }
  size_t MaxValueBytes() const override { return producers_.front()->MaxValueBytes(); }
  int OutstandingMessages() const override;

  size_t producer_count() const { return producers_.size(); }
  KafkaProducer& producer(size_t index) { return *producers_.at(index); }
  const std::string& transactional_id(size_t index) const { return transactional_ids_.at(index); }
  void Activate(size_t index) { active_ = index; }
  KafkaProducer& active() { return *producers_[active_]; }

  // Replaces every producer (and its watch) with a new one made from the same properties:
  // exactly once initialises a fresh producer at each takeover of the slot, as librdkafka
  // initialises a producer's transactions only once, and another process may have fenced the
  // old one meanwhile. Whatever the old producers still held is purged. Loop thread, between
  // streams.
  Status Renew();
  // Serves waiting delivery reports of every producer; returns how many were served.
  int Poll();
  void PurgeAll();
  const Status& failure() const;
  Status Start();
  void Stop();

 private:
  explicit KafkaOutput(boost::asio::io_context& io) : io_(io) {}
  // Makes the producers and their watches (started when the output is).
  Status MakeProducers();

  boost::asio::io_context& io_;
  std::vector<std::map<std::string, std::string>> properties_;  // one per producer
  KafkaProducer::DeliveryHandler handler_;
  KafkaProducer::FailureHandler on_failure_;
  std::set<std::string> hidden_value_keys_;
  bool started_ = false;
  std::vector<std::unique_ptr<KafkaProducer>> producers_;
  std::vector<std::string> transactional_ids_;  // empty strings without transactions
  std::vector<std::unique_ptr<KafkaEventWatch>> watches_;
  size_t active_ = 0;
};

}  // namespace walrelay
