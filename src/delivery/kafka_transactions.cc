#include "delivery/kafka_transactions.h"

#include <cstdint>
#include <utility>

namespace walrelay {
namespace {

int TimeoutMs(std::chrono::milliseconds timeout) { return static_cast<int>(timeout.count()); }

class RdKafkaTransactions final : public KafkaTransactions {
 public:
  explicit RdKafkaTransactions(KafkaOutput& output) : output_(output) {}

  TxnStatus Init(std::chrono::milliseconds timeout) override {
    for (size_t i = 0; i < output_.producer_count(); ++i) {
      TxnStatus done = Check(i, rd_kafka_init_transactions(rk(i), TimeoutMs(timeout)),
                             "initialising transactions");
      if (!done.ok()) return done;
    }
    return TxnStatus::Ok();
  }
  TxnStatus Begin() override {
    // The other producer's last transaction ended a whole transaction ago: its coordinator is
    // done with it, unlike the one that just committed or aborted.
    current_ = (current_ + 1) % output_.producer_count();
    output_.Activate(current_);
    return Check(current_, rd_kafka_begin_transaction(rk(current_)), "beginning a transaction");
  }
  TxnStatus SendOffset(const Record& record) override {
    rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
    Status sent = output_.active().Produce(record, KafkaProducer::kNoReport, &code);
    if (sent.ok()) return TxnStatus::Ok();
    // Missing from the transaction, the offset record makes it uncommittable: abort, unless
    // the producer itself is gone.
    return TxnStatus{
        sent, code == RD_KAFKA_RESP_ERR__FATAL ? TxnErrorKind::kFatal : TxnErrorKind::kAbortable,
        code};
  }
  TxnStatus Commit(std::chrono::milliseconds timeout, const std::string& operation) override {
    return Check(current_, rd_kafka_commit_transaction(rk(current_), TimeoutMs(timeout)),
                 operation);
  }
  TxnStatus Abort(std::chrono::milliseconds timeout) override {
    return Check(current_, rd_kafka_abort_transaction(rk(current_), TimeoutMs(timeout)),
                 "aborting the transaction");
  }

 private:
  rd_kafka_t* rk(size_t index) const { return output_.producer(index).native_handle(); }
  TxnStatus Check(size_t index, rd_kafka_error_t* error, const std::string& operation) {
    return TxnStatusFromError(rk(index), error, output_.transactional_id(index), operation);
  }

  KafkaOutput& output_;
  // The producer of the open or the last transaction; the first Begin() moves to producer 0.
  size_t current_ = SIZE_MAX;
};

}  // namespace

std::unique_ptr<KafkaTransactions> MakeKafkaTransactions(KafkaOutput& output) {
  return std::make_unique<RdKafkaTransactions>(output);
}

}  // namespace walrelay
