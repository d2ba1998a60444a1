#include "delivery/kafka_transactions.h"

#include <algorithm>
#include <cstdint>
#include <future>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "common/cancellation.h"

namespace walrelay {
namespace {

int TimeoutMs(std::chrono::milliseconds timeout) { return static_cast<int>(timeout.count()); }

// How long the offset record waits for room in a full librdkafka queue.
constexpr std::chrono::seconds kRoomWait{30};

// Commits `rk`'s open transaction, retrying retriable errors until `timeout` has passed. On a
// thread of its own: librdkafka's commit polls the producer, and the callbacks that polling
// serves wait for the loop thread (KafkaProducer::DeferCallbacks).
TxnStatus CommitInBackground(rd_kafka_t* rk, std::chrono::milliseconds timeout,
                             const std::string& transactional_id, const std::string& operation) {
  KafkaProducer::DeferCallbacks on_loop_thread;
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    TxnStatus committed = TxnStatusFromError(
        rk, rd_kafka_commit_transaction(rk, TimeoutMs(timeout)), transactional_id, operation);
    if (committed.ok() || committed.kind != TxnErrorKind::kRetriable ||
        std::chrono::steady_clock::now() >= give_up) {
      return committed;
    }
  }
}

class RdKafkaTransactions final : public KafkaTransactions {
 public:
  explicit RdKafkaTransactions(KafkaOutput& output)
      : output_(output), open_(output.producer_count(), false) {}

  TxnStatus Init(std::chrono::milliseconds timeout) override {
    for (size_t i = 0; i < output_.producer_count(); ++i) {
      TxnStatus done = InitOne(i, timeout);
      if (!done.ok()) return done;
    }
    return TxnStatus::Ok();
  }
  TxnStatus Begin() override {
    // The other producer's last transaction ended a whole transaction ago: its coordinator is
    // done with it, unlike the one that just committed or aborted.
    const size_t next = (current_ + 1) % output_.producer_count();
    if (commit_.valid() && committing_ == next) {
      return TxnStatus{Status::Internal("beginning a Kafka transaction on producer '" +
                                        output_.transactional_id(next) +
                                        "' while it still commits the one before"),
                       TxnErrorKind::kFatal, RD_KAFKA_RESP_ERR__STATE};
    }
    current_ = next;
    output_.Activate(current_);
    TxnStatus begun =
        Check(current_, rd_kafka_begin_transaction(rk(current_)), "beginning a transaction");
    if (begun.ok()) open_[current_] = true;
    return begun;
  }
  TxnStatus SendOffset(const Record& record) override {
    rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
    Status sent = output_.active().Produce(record, KafkaProducer::kNoReport, &code);
    // A full queue empties as Kafka acknowledges the transaction's records: wait for room
    // (their reports wait for the loop), as the commit would wait for them anyway.
    const auto give_up = std::chrono::steady_clock::now() + kRoomWait;
    while (code == RD_KAFKA_RESP_ERR__QUEUE_FULL && std::chrono::steady_clock::now() < give_up) {
      KafkaProducer::DeferCallbacks on_next_poll;
      rd_kafka_poll(rk(current_), 10);
      code = RD_KAFKA_RESP_ERR_NO_ERROR;
      sent = output_.active().Produce(record, KafkaProducer::kNoReport, &code);
    }
    if (sent.ok()) return TxnStatus::Ok();
    // Missing from the transaction, the offset record makes it uncommittable: abort, unless
    // the producer itself is gone (fenced, when its fatal error says so).
    if (code != RD_KAFKA_RESP_ERR__FATAL) return TxnStatus{sent, TxnErrorKind::kAbortable, code};
    const rd_kafka_resp_err_t cause = rd_kafka_fatal_error(rk(current_), nullptr, 0);
    if (cause == RD_KAFKA_RESP_ERR__FENCED || cause == RD_KAFKA_RESP_ERR_PRODUCER_FENCED)
      return TxnStatus{Status(ErrorCode::kKafkaFenced, sent.message()), TxnErrorKind::kFenced,
                       cause};
    return TxnStatus{sent, TxnErrorKind::kFatal, code};
  }
  TxnStatus StartCommit(std::chrono::milliseconds timeout, const std::string& operation) override {
    if (TxnStatus previous = FinishCommit(); !previous.ok()) return previous;
    // Every record acknowledged before the next transaction's records leave on the other
    // producer: none of those can overtake one of these in a partition. Their reports wait for
    // the loop's next poll: served here, a refusal would end the stream in the middle of the
    // caller's handling of a message.
    KafkaProducer::DeferCallbacks on_next_poll;
    if (rd_kafka_resp_err_t flushed = rd_kafka_flush(rk(current_), TimeoutMs(timeout))) {
      return TxnStatus{
          Status::Kafka(operation + " (transactional.id '" + output_.transactional_id(current_) +
                        "'): its records were not all acknowledged within " +
                        std::to_string(timeout.count()) + " ms: " + rd_kafka_err2str(flushed)),
          TxnErrorKind::kRetriable, flushed};
    }
    committing_ = current_;
    rd_kafka_t* handle = rk(current_);
    const std::string& id = output_.transactional_id(current_);
    try {
      commit_ = std::async(std::launch::async, CommitInBackground, handle, timeout, id, operation);
    } catch (const std::system_error&) {
      // No thread to be had: commit here, blocking, as the result is the same.
      std::promise<TxnStatus> done;
      done.set_value(CommitInBackground(handle, timeout, id, operation));
      commit_ = done.get_future();
    }
    return TxnStatus::Ok();
  }
  bool Flushed() override {
    // The records not yet acknowledged, plus the reports waiting for the loop's poll.
    return current_ == SIZE_MAX || rd_kafka_outq_len(rk(current_)) == 0;
  }
  bool CommitFinished() override {
    return !commit_.valid() ||
           commit_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  TxnStatus FinishCommit() override {
    if (!commit_.valid()) return TxnStatus::Ok();
    TxnStatus committed = commit_.get();
    if (committed.ok()) open_[committing_] = false;
    return committed;
  }
  TxnStatus Abort(std::chrono::milliseconds timeout) override {
    FinishCommit();  // a commit that failed leaves its transaction open, and is aborted below
    for (size_t i = 0; i < output_.producer_count(); ++i) {
      if (!open_[i]) continue;
      TxnStatus aborted = InSlices(timeout, [&](std::chrono::milliseconds slice) {
        return Check(i, rd_kafka_abort_transaction(rk(i), TimeoutMs(slice)),
                     "aborting the transaction");
      });
      if (!aborted.ok()) return aborted;
      open_[i] = false;
    }
    return TxnStatus::Ok();
  }
  bool NeedsRenewal() override {
    for (size_t i = 0; i < output_.producer_count(); ++i) {
      if (rd_kafka_fatal_error(rk(i), nullptr, 0) != RD_KAFKA_RESP_ERR_NO_ERROR) return true;
    }
    return false;
  }
  TxnStatus Renew() override {
    FinishCommit();
    commit_ = {};
    Status renewed = output_.Renew();
    open_.assign(output_.producer_count(), false);
    current_ = SIZE_MAX;
    if (renewed.ok()) return TxnStatus::Ok();
    return TxnStatus{renewed, TxnErrorKind::kFatal, RD_KAFKA_RESP_ERR__FATAL};
  }

 private:
  rd_kafka_t* rk(size_t index) const { return output_.producer(index).native_handle(); }
  // Producer `index`'s init_transactions within `timeout` (InSlices).
  TxnStatus InitOne(size_t index, std::chrono::milliseconds timeout) {
    return InSlices(timeout, [&](std::chrono::milliseconds slice) {
      return Check(index, rd_kafka_init_transactions(rk(index), TimeoutMs(slice)),
                   "initialising transactions");
    });
  }
  // A resumable librdkafka call (init or abort) within `timeout`, in slices of
  // Cancellation::kSlice. A slice that times out answers with a retriable error (the last one
  // the coordinator gave, else TIMED_OUT) and the next call resumes it; the next slice is not
  // begun once the caller gave up (common/cancellation.h), which then has that retriable error.
  template <typename Call>
  static TxnStatus InSlices(std::chrono::milliseconds timeout, Call call) {
    using Clock = std::chrono::steady_clock;
    const auto give_up = Clock::now() + timeout;
    for (;;) {
      const auto began = Clock::now();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - began);
      const auto slice = std::clamp(left, std::chrono::milliseconds(1), Cancellation::kSlice);
      TxnStatus done = call(slice);
      if (done.ok() || done.kind != TxnErrorKind::kRetriable || Clock::now() >= give_up)
        return done;
      if (Cancellation::Requested()) {
        done.status = done.status.WithContext("the connect attempt was cancelled");
        return done;
      }
      // An answer before the slice ran out is not retried at once.
      std::this_thread::sleep_until(std::min(began + slice, give_up));
    }
  }
  TxnStatus Check(size_t index, rd_kafka_error_t* error, const std::string& operation) {
    return TxnStatusFromError(rk(index), error, output_.transactional_id(index), operation);
  }

  KafkaOutput& output_;
  // The producer of the open or the last transaction; the first Begin() moves to producer 0.
  size_t current_ = SIZE_MAX;
  // Per producer: a transaction begun and neither committed nor aborted.
  std::vector<bool> open_;
  // The background commit, of producer `committing_`'s transaction; its destructor waits.
  std::future<TxnStatus> commit_;
  size_t committing_ = 0;
};

}  // namespace

std::unique_ptr<KafkaTransactions> MakeKafkaTransactions(KafkaOutput& output) {
  return std::make_unique<RdKafkaTransactions>(output);
}

}  // namespace walrelay
