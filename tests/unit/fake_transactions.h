// FakeTransactions: Kafka's transactional calls (delivery/kafka_transactions.h) as a recording
// fake for the exactly-once unit tests, with the rules every caller must keep checked on each
// call (never Begin while a transaction is open, never a second commit before the first ended).
#pragma once

#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "delivery/kafka_transactions.h"
#include "delivery/source_offsets.h"

namespace walrelay::testing {

// A failed call of `kind` with librdkafka's `code`.
inline TxnStatus Error(TxnErrorKind kind, rd_kafka_resp_err_t code) {
  TxnStatus status;
  status.kind = kind;
  status.code = code;
  status.status =
      Status(kind == TxnErrorKind::kFenced ? ErrorCode::kKafkaFenced : ErrorCode::kKafka,
             std::string("fake: ") + rd_kafka_err2name(code));
  return status;
}

// Records the calls; Init and FinishCommit answer from their queues (OK once they are used
// up). A started commit runs until FinishCommit; CommitFinished() says `finished`.
class FakeTransactions final : public KafkaTransactions {
 public:
  TxnStatus Init(std::chrono::milliseconds) override {
    ++inits;
    return Answer(init_answers);
  }
  TxnStatus Begin() override {
    CHECK_FALSE(open);  // never begins while one is open
    open = true;
    ++begins;
    return TxnStatus::Ok();
  }
  TxnStatus SendOffset(const Record& record) override {
    CHECK(open);
    offsets.push_back(record);
    return TxnStatus::Ok();
  }
  TxnStatus StartCommit(std::chrono::milliseconds, const std::string& operation) override {
    CHECK(open);
    CHECK_FALSE(committing);  // the one before finished first
    ++commit_calls;
    commit_operations.push_back(operation);
    if (on_commit) on_commit();
    open = false;
    committing = true;
    return TxnStatus::Ok();
  }
  bool Flushed() override { return flushed; }
  bool CommitFinished() override { return !committing || finished; }
  TxnStatus FinishCommit() override {
    if (!committing) return TxnStatus::Ok();
    committing = false;
    TxnStatus answer = Answer(commit_answers);
    if (answer.ok()) {
      ++commits;
    } else {
      failed_open = true;
    }
    return answer;
  }
  TxnStatus Abort(std::chrono::milliseconds) override {
    CHECK_FALSE(committing);  // a running commit is finished first
    if (TxnStatus answer = Answer(abort_answers); !answer.ok()) return answer;
    open = false;
    failed_open = false;
    ++aborts;
    return TxnStatus::Ok();
  }
  bool NeedsRenewal() override { return fenced; }
  TxnStatus Renew() override {
    fenced = false;
    CHECK_FALSE(committing);
    open = false;
    failed_open = false;
    ++renewals;
    return TxnStatus::Ok();
  }

  // The offset record of the n-th commit.
  SourceOffset Offset(size_t n) const {
    REQUIRE(n < offsets.size());
    REQUIRE(offsets[n].value.has_value());
    auto parsed = ParseSourceOffset(*offsets[n].value);
    REQUIRE_MESSAGE(parsed.ok(), parsed.status().ToString());
    return *parsed;
  }

  bool open = false;
  bool committing = false;   // started, not finished
  bool finished = true;      // what CommitFinished() says while committing
  bool flushed = true;       // what Flushed() says
  bool failed_open = false;  // a commit failed and its transaction awaits Abort
  bool fenced = false;       // what NeedsRenewal() says (Renew() clears it)
  int inits = 0, begins = 0, commits = 0, commit_calls = 0, aborts = 0, renewals = 0;
  std::vector<Record> offsets;
  std::vector<std::string> commit_operations;
  std::deque<TxnStatus> init_answers;
  std::deque<TxnStatus> commit_answers;
  std::deque<TxnStatus> abort_answers;  // before any, every Abort() succeeds
  std::function<void()> on_commit;

 private:
  static TxnStatus Answer(std::deque<TxnStatus>& answers) {
    if (answers.empty()) return TxnStatus::Ok();
    TxnStatus answer = answers.front();
    answers.pop_front();
    return answer;
  }
};

}  // namespace walrelay::testing
