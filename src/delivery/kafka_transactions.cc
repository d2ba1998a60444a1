#include "delivery/kafka_transactions.h"

#include <utility>

namespace walrelay {
namespace {

int TimeoutMs(std::chrono::milliseconds timeout) { return static_cast<int>(timeout.count()); }

class RdKafkaTransactions final : public KafkaTransactions {
 public:
  RdKafkaTransactions(KafkaProducer& producer, std::string transactional_id)
      : producer_(producer), transactional_id_(std::move(transactional_id)) {}

  TxnStatus Init(std::chrono::milliseconds timeout) override {
    return Check(rd_kafka_init_transactions(rk(), TimeoutMs(timeout)), "initialising transactions");
  }
  TxnStatus Begin() override {
    return Check(rd_kafka_begin_transaction(rk()), "beginning a transaction");
  }
  TxnStatus SendOffset(const Record& record) override {
    rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
    Status sent = producer_.Produce(record, KafkaProducer::kNoReport, &code);
    if (sent.ok()) return TxnStatus::Ok();
    // Missing from the transaction, the offset record makes it uncommittable: abort, unless
    // the producer itself is gone.
    return TxnStatus{
        sent, code == RD_KAFKA_RESP_ERR__FATAL ? TxnErrorKind::kFatal : TxnErrorKind::kAbortable,
        code};
  }
  TxnStatus Commit(std::chrono::milliseconds timeout, const std::string& operation) override {
    return Check(rd_kafka_commit_transaction(rk(), TimeoutMs(timeout)), operation);
  }
  TxnStatus Abort(std::chrono::milliseconds timeout) override {
    return Check(rd_kafka_abort_transaction(rk(), TimeoutMs(timeout)), "aborting the transaction");
  }

 private:
  rd_kafka_t* rk() const { return producer_.native_handle(); }
  TxnStatus Check(rd_kafka_error_t* error, const std::string& operation) {
    return TxnStatusFromError(rk(), error, transactional_id_, operation);
  }

  KafkaProducer& producer_;
  const std::string transactional_id_;
};

}  // namespace

std::unique_ptr<KafkaTransactions> MakeKafkaTransactions(KafkaProducer& producer,
                                                         std::string transactional_id) {
  return std::make_unique<RdKafkaTransactions>(producer, std::move(transactional_id));
}

}  // namespace walrelay
