// TransactionalProducer: a librdkafka producer with a `transactional.id`, for exactly-once
// delivery: the records of whole source transactions and one offset record (offset_store.h)
// go to Kafka in one transaction, visible to read_committed consumers all together or not at all.
//
// Contract:
// - Create() sets `transactional.id` (DefaultTransactionalId() unless configured) on top of the
//   given librdkafka properties; librdkafka then forces idempotence and acks=all.
// - InitTransactions() registers the id with the transaction coordinator. Doing so fences every
//   older producer with the same id: their next transactional call fails with kFenced, and
//   a transaction they left open is aborted (one they were committing is completed first).
// - Begin(), Produce()/SendOffset() ..., Commit() or Abort(). Commit() flushes every record and
//   returns only when the transaction is committed; Abort() drops whatever was not delivered.
// - Produce() is KafkaProducer::Produce() (the producer underneath): it copies the record and
//   tags it with a ticket;
//   Poll() serves delivery reports on the caller's thread. SendOffset()'s record has no ticket:
//   Commit()'s success is its acknowledgement. A delivery report is not a commit: a relay
//   confirms the source position only after Commit() succeeded.
// - Every error is a TxnStatus whose kind says what the caller may do next:
//     kRetriable: call the same operation again (e.g. a timeout of Commit());
//     kAbortable: Abort(), then replay the whole transaction in a new one;
//     kFatal:     the producer is unusable; stop without confirming anything more;
//     kFenced:    another process took over this transactional.id; stop without confirming.
// - Destruction does not commit: an open transaction is left to the coordinator, which aborts
//   it when the next producer with the same id initialises or when it times out.
// Not thread-safe: use from one thread.
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "delivery/producer.h"
#include "delivery/transactional_ids.h"  // DefaultTransactionalId()
#include "transform/record.h"

namespace walrelay {

enum class TxnErrorKind { kNone, kRetriable, kAbortable, kFatal, kFenced };
const char* TxnErrorKindName(TxnErrorKind kind);

struct TxnStatus {
  Status status;
  TxnErrorKind kind = TxnErrorKind::kNone;
  rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;  // librdkafka's, for logs and tests

  bool ok() const { return status.ok(); }
  static TxnStatus Ok() { return {}; }
};

// The kind of a librdkafka transactional error. Fencing wins over fatal (librdkafka reports
// a fence as a fatal error), fatal over abortable, abortable over retriable.
TxnErrorKind ClassifyTxnError(rd_kafka_resp_err_t code, bool is_fatal, bool requires_abort,
                              bool is_retriable);

// A librdkafka transactional call's error (owned, and destroyed here) as a TxnStatus naming
// the operation and the transactional.id; a fatal error is reported with its cause (the fence,
// say). Fenced errors carry ErrorCode::kKafkaFenced. nullptr is OK.
TxnStatus TxnStatusFromError(rd_kafka_t* rk, rd_kafka_error_t* error,
                             const std::string& transactional_id, const std::string& operation);

struct TransactionDeliveryReport {
  uint64_t ticket;
  rd_kafka_resp_err_t error;  // RD_KAFKA_RESP_ERR_NO_ERROR when the broker took the record
};

class TransactionalProducer {
 public:
  using DeliveryHandler = std::function<void(const TransactionDeliveryReport&)>;

  // `properties` go to librdkafka unchanged, plus `transactional.id`; errors name the
  // `kafka.`-prefixed key without its value.
  static Result<std::unique_ptr<TransactionalProducer>> Create(
      const std::map<std::string, std::string>& properties, const std::string& transactional_id,
      DeliveryHandler handler = {});
  ~TransactionalProducer();
  TransactionalProducer(const TransactionalProducer&) = delete;
  TransactionalProducer& operator=(const TransactionalProducer&) = delete;

  TxnStatus InitTransactions(std::chrono::milliseconds timeout);
  TxnStatus Begin();
  // QUEUE_FULL is kRetriable: Poll() and produce the record again.
  TxnStatus Produce(const Record& record, uint64_t ticket);
  TxnStatus SendOffset(const Record& offset_record);
  // Waits until every record produced so far is acknowledged (or failed), without committing.
  TxnStatus Flush(std::chrono::milliseconds timeout);
  TxnStatus Commit(std::chrono::milliseconds timeout);
  TxnStatus Abort(std::chrono::milliseconds timeout);
  // Serves waiting delivery reports without blocking; returns how many were served.
  int Poll();

  const std::string& transactional_id() const { return transactional_id_; }
  // kInternal once the DeliveryHandler threw (the report it was serving is lost), or a
  // producer-wide failure (KafkaProducer::failure()); OK before.
  const Status& handler_failure() const { return producer_->failure(); }

 private:
  TransactionalProducer() = default;
  TxnStatus FromError(rd_kafka_error_t* error, const std::string& operation);
  TxnStatus FromProduceCode(rd_kafka_resp_err_t code, const Status& status);
  TxnStatus ProduceWithTicket(const Record& record, uint64_t ticket);

  // The records go through the relay's producer class: one produce path for both modes.
  std::unique_ptr<KafkaProducer> producer_;
  std::string transactional_id_;
};

}  // namespace walrelay
