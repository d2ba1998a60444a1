#include "delivery/transactional_producer.h"

#include <algorithm>

#include "common/rdkafka_handles.h"

namespace walrelay {
namespace {

int TimeoutMs(std::chrono::milliseconds timeout) {
  return static_cast<int>(std::max<int64_t>(1, timeout.count()));
}

}  // namespace

const char* TxnErrorKindName(TxnErrorKind kind) {
  switch (kind) {
    case TxnErrorKind::kNone: return "none";
    case TxnErrorKind::kRetriable: return "retriable";
    case TxnErrorKind::kAbortable: return "abortable";
    case TxnErrorKind::kFatal: return "fatal";
    case TxnErrorKind::kFenced: return "fenced";
  }
  return "unknown";
}

TxnErrorKind ClassifyTxnError(rd_kafka_resp_err_t code, bool is_fatal, bool requires_abort,
                              bool is_retriable) {
  if (code == RD_KAFKA_RESP_ERR__FENCED || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED)
    return TxnErrorKind::kFenced;
  if (is_fatal) return TxnErrorKind::kFatal;
  if (requires_abort) return TxnErrorKind::kAbortable;
  if (is_retriable) return TxnErrorKind::kRetriable;
  // Neither retriable nor abortable (e.g. a call in the wrong state): only a new transaction helps.
  return TxnErrorKind::kAbortable;
}

Result<std::unique_ptr<TransactionalProducer>> TransactionalProducer::Create(
    const std::map<std::string, std::string>& properties, const std::string& transactional_id,
    DeliveryHandler handler) {
  if (transactional_id.empty()) return Status::Config("transactional.id must not be empty");
  std::unique_ptr<TransactionalProducer> producer(new TransactionalProducer());
  producer->transactional_id_ = transactional_id;
  auto properties_with_id = properties;
  properties_with_id["transactional.id"] = transactional_id;
  auto made = KafkaProducer::Create(
      properties_with_id, [handler = std::move(handler)](const DeliveryReport& report) {
        if (handler) handler(TransactionDeliveryReport{report.ticket, report.error});
      });
  if (!made.ok()) return made.status();
  producer->producer_ = std::move(made).value();
  return producer;
}

TransactionalProducer::~TransactionalProducer() = default;

TxnStatus TransactionalProducer::FromError(rd_kafka_error_t* raw, const std::string& operation) {
  return TxnStatusFromError(producer_->native_handle(), raw, transactional_id_, operation);
}

TxnStatus TxnStatusFromError(rd_kafka_t* rk, rd_kafka_error_t* raw,
                             const std::string& transactional_id, const std::string& operation) {
  KafkaErrorPtr error(raw);
  if (!error) return TxnStatus::Ok();
  rd_kafka_resp_err_t code = rd_kafka_error_code(error.get());
  std::string text = rd_kafka_error_string(error.get());
  const bool fatal = rd_kafka_error_is_fatal(error.get());
  if (fatal && code == RD_KAFKA_RESP_ERR__FATAL) {
    // The error that made the producer unusable, e.g. the fence.
    char reason[512];
    code = rd_kafka_fatal_error(rk, reason, sizeof reason);
    text = reason;
  }
  TxnStatus result;
  result.code = code;
  result.kind = ClassifyTxnError(code, fatal, rd_kafka_error_txn_requires_abort(error.get()),
                                 rd_kafka_error_is_retriable(error.get()));
  result.status =
      Status(result.kind == TxnErrorKind::kFenced ? ErrorCode::kKafkaFenced : ErrorCode::kKafka,
             "transactional.id '" + transactional_id + "': " + operation + " failed (" +
                 TxnErrorKindName(result.kind) + "): " + rd_kafka_err2name(code) + ": " + text);
  return result;
}

TxnStatus TransactionalProducer::FromProduceCode(rd_kafka_resp_err_t code, const Status& status) {
  TxnStatus result;
  result.code = code;
  if (code == RD_KAFKA_RESP_ERR__FATAL) {
    char reason[512];
    result.code = rd_kafka_fatal_error(producer_->native_handle(), reason, sizeof reason);
    result.kind = ClassifyTxnError(result.code, true, false, false);
    result.status =
        Status::Kafka("transactional.id '" + transactional_id_ + "': " + status.message() + " (" +
                      TxnErrorKindName(result.kind) + "): " + reason);
    return result;
  }
  // A record refused before it was sent is missing from the transaction: the transaction no
  // longer holds whole source transactions, so it must be aborted; a full queue only has to wait.
  result.kind =
      code == RD_KAFKA_RESP_ERR__QUEUE_FULL ? TxnErrorKind::kRetriable : TxnErrorKind::kAbortable;
  result.status =
      Status::Kafka("transactional.id '" + transactional_id_ + "': " + status.message() + " (" +
                    TxnErrorKindName(result.kind) + ")");
  return result;
}

TxnStatus TransactionalProducer::InitTransactions(std::chrono::milliseconds timeout) {
  return FromError(rd_kafka_init_transactions(producer_->native_handle(), TimeoutMs(timeout)),
                   "initialising transactions");
}

TxnStatus TransactionalProducer::Begin() {
  return FromError(rd_kafka_begin_transaction(producer_->native_handle()),
                   "beginning a transaction");
}

TxnStatus TransactionalProducer::ProduceWithTicket(const Record& record, uint64_t ticket) {
  rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
  Status produced = producer_->Produce(record, ticket, &code);
  if (produced.ok()) return TxnStatus::Ok();
  return FromProduceCode(code, produced);
}

TxnStatus TransactionalProducer::Produce(const Record& record, uint64_t ticket) {
  return ProduceWithTicket(record, ticket);
}

TxnStatus TransactionalProducer::SendOffset(const Record& offset_record) {
  // Commit()'s success is its acknowledgement.
  return ProduceWithTicket(offset_record, KafkaProducer::kNoReport);
}

TxnStatus TransactionalProducer::Flush(std::chrono::milliseconds timeout) {
  const rd_kafka_resp_err_t err = rd_kafka_flush(producer_->native_handle(), TimeoutMs(timeout));
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return TxnStatus::Ok();
  TxnStatus result;
  result.code = err;
  result.kind = TxnErrorKind::kRetriable;
  result.status = Status::Kafka(
      "transactional.id '" + transactional_id_ +
      "': flushing: " + std::to_string(rd_kafka_outq_len(producer_->native_handle())) +
      " record(s) still unacknowledged after " + std::to_string(timeout.count()) + " ms");
  return result;
}

TxnStatus TransactionalProducer::Commit(std::chrono::milliseconds timeout) {
  TxnStatus result =
      FromError(rd_kafka_commit_transaction(producer_->native_handle(), TimeoutMs(timeout)),
                "committing the transaction");
  Poll();  // the reports of the records the commit flushed
  return result;
}

TxnStatus TransactionalProducer::Abort(std::chrono::milliseconds timeout) {
  TxnStatus result =
      FromError(rd_kafka_abort_transaction(producer_->native_handle(), TimeoutMs(timeout)),
                "aborting the transaction");
  Poll();
  return result;
}

int TransactionalProducer::Poll() { return producer_->Poll(); }

}  // namespace walrelay
