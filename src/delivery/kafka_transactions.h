// KafkaTransactions: the Kafka transactional calls exactly once makes (delivery/exactly_once.h),
// behind an interface so the exactly-once rules are unit-tested with a fake
// (tests/unit/exactly_once_test.cc) and run over the relay's librdkafka producer in production.
//
// Contract (errors are TxnStatus, delivery/transactional_producer.h, whose kind says what to do;
// `operation` names the call in the error's message):
// - Init(timeout): registers the transactional ids, fencing older producers with them. Called
//   on a connect attempt's worker: it gives up within Cancellation::kSlice once the attempt is
//   cancelled (common/cancellation.h), with a retriable error (the producers are then renewed).
// - Begin(): opens a transaction; every record produced until Commit/Abort belongs to it.
// - SendOffset(record): produces the offset record into the open transaction, without a
//   delivery report for the pipeline (the commit is its acknowledgement); in a full queue it
//   waits for room (up to 30 s) rather than fail the transaction.
// - StartCommit(timeout, operation): waits, on the calling thread, until Kafka acknowledged
//   every record of the open transaction (their delivery reports wait for the producer's next
//   Poll(), never nested in the caller), then commits it in the background; the next Begin()
//   may follow at once. Retriable errors are retried within `timeout`.
// - Flushed(): true when Kafka acknowledged every record of the open transaction (the offset
//   record included) and their delivery reports were served: StartCommit then waits for
//   nothing. Never blocks.
// - CommitFinished(): true when no background commit is running or it has ended.
// - FinishCommit(): waits for the background commit and returns its outcome (OK without one).
//   Until it returned OK, the transaction is not committed.
// - Abort(timeout): drops every transaction not committed: the open one, and one whose
//   background commit failed (it waits for a running commit first).
// - Renew(): replaces the producers with new ones, not initialised (it waits for a running
//   commit first). librdkafka initialises a producer's transactions once: a producer that was
//   fenced, failed half-way through Init, or may have been fenced by another process while
//   this one did not hold the slot, is replaced and initialised again.
// All on the relay's loop thread; at most one commit runs at a time, and a Begin() never lands
// on the producer that is committing (the caller finishes a commit before starting the next).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "delivery/kafka_output.h"
#include "delivery/transactional_producer.h"
#include "transform/record.h"

namespace walrelay {

class KafkaTransactions {
 public:
  virtual ~KafkaTransactions() = default;
  virtual TxnStatus Init(std::chrono::milliseconds timeout) = 0;
  virtual TxnStatus Begin() = 0;
  virtual TxnStatus SendOffset(const Record& record) = 0;
  virtual TxnStatus StartCommit(std::chrono::milliseconds timeout,
                                const std::string& operation) = 0;
  virtual bool Flushed() = 0;
  virtual bool CommitFinished() = 0;
  virtual TxnStatus FinishCommit() = 0;
  virtual TxnStatus Abort(std::chrono::milliseconds timeout) = 0;
  virtual TxnStatus Renew() = 0;
  // True when a producer reports a fatal error (fenced): it can only be renewed.
  virtual bool NeedsRenewal() = 0;
};

// Over the relay's transactional output (it must outlive the result): each Begin() moves to
// the next of its producers, which receives the transaction's records (delivery/kafka_output.h);
// Init() initialises every one of them.
std::unique_ptr<KafkaTransactions> MakeKafkaTransactions(KafkaOutput& output);

}  // namespace walrelay
