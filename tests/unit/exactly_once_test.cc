// The exactly-once rules (delivery/exactly_once.h) with a fake in place of Kafka's transactional
// calls (delivery/kafka_transactions.h) and a fake sink under the record pipeline: what is
// confirmable around commits, when commits happen, and what aborts, failures, the end of a
// stream and restarts do.
#include <doctest/doctest.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "delivery/exactly_once.h"
#include "delivery/record_pipeline.h"
#include "delivery/source_offsets.h"
#include "fake_transactions.h"
#include "pipeline_fakes.h"

using namespace walrelay;

namespace {

using testing::FakeSink;

using testing::Error;
using testing::FakeTransactions;

RelaySettings Settings(const std::string& extra) {
  return testing::PipelineSettings(
      R"(,"exactly.once.support":"required","offsets.storage.topic":"offsets",)"
      R"("max.queue.size":"100")" +
      extra);
}

const SourceIdentity kServer{"7000000000000000001", 1};
constexpr Lsn L(uint64_t v) { return Lsn(v); }

const char* kEverySourceCommit = R"(,"transaction.boundary":"source.commit")";
// Grouped, and never due by time within a test: EndStream or max.records decide.
const char* kLongInterval = R"(,"transaction.boundary.interval.ms":"3600000")";

// A pipeline over a FakeSink with ExactlyOnce over FakeTransactions. Every commit checks that
// it happens outside a source transaction and with no record waiting for room.
struct Harness {
  explicit Harness(const std::string& extra = kEverySourceCommit) : settings(Settings(extra)) {
    auto fake = std::make_unique<FakeTransactions>();
    txn = fake.get();
    txn->on_commit = [this] {
      CHECK_FALSE(inside_source);
      CHECK_FALSE(pipeline->holding());
    };
    auto guarantee = std::make_unique<ExactlyOnce>(settings, std::move(fake), counters, [this] {
      ++stored_reads;
      return Result<std::optional<SourceOffset>>(stored);
    });
    eos = guarantee.get();
    auto made = RecordPipeline::Create(settings, sink, std::move(guarantee), counters,
                                       [this](Status failure) { failures.push_back(failure); });
    REQUIRE_MESSAGE(made.ok(), made.status().ToString());
    pipeline = std::move(made).value();
  }

  // A stream from the slot at `slot` (a reconnect to the same server when started before).
  // This slot's position is stored already: no transaction records the start.
  void Start(Lsn slot) {
    REQUIRE(Attempt().ok());
    REQUIRE(eos->StreamStarts(kServer, slot, /*own_position_stored=*/true).ok());
    pipeline->StreamStarted(StreamStart{kServer, slot, slot, false, std::nullopt});
  }
  // What the next connect attempt's worker does before anything else: it completes a commit
  // or an abort the last stream left (the loop never waits for one), then reads the position.
  Status Attempt() {
    WALRELAY_RETURN_IF_ERROR(eos->FinishLastStream());
    return eos->StoredPosition(kServer, /*slot_missing=*/false).status();
  }
  Status Begin(uint32_t xid) {
    inside_source = true;
    return pipeline->Handle(testing::BeginMessage(xid));
  }
  Status Row(Lsn lsn) { return pipeline->Handle(testing::RowMessage(lsn)); }
  Status Commit(uint32_t xid, Lsn end) {
    inside_source = false;
    return pipeline->Handle(testing::CommitMessage(xid, end));
  }
  // One source transaction of `rows` rows of public.outbox, ending at `end`: the status of
  // its commit.
  Status Transaction(uint32_t xid, Lsn first, int rows, Lsn end) {
    WALRELAY_RETURN_IF_ERROR(Begin(xid));
    for (int i = 0; i < rows; ++i) WALRELAY_RETURN_IF_ERROR(Row(Lsn(first.value() + i)));
    return Commit(xid, end);
  }
  // Kafka acknowledges every record produced so far (the relay serves the reports).
  Status AckAll() {
    while (acked < sink.produced.size()) {
      --sink.outstanding;
      DeliveryReport report{sink.produced[acked].ticket, RD_KAFKA_RESP_ERR_NO_ERROR, "", Record{}};
      ++acked;
      WALRELAY_RETURN_IF_ERROR(pipeline->OnDelivery(report));
    }
    return Status::Ok();
  }

  RelaySettings settings;
  RelayCounters counters;
  // What the offsets topic holds under the connector's key, and how often it was read.
  std::optional<SourceOffset> stored;
  int stored_reads = 0;
  FakeSink sink;
  FakeTransactions* txn = nullptr;
  ExactlyOnce* eos = nullptr;
  std::vector<Status> failures;
  std::unique_ptr<RecordPipeline> pipeline;
  size_t acked = 0;
  bool inside_source = false;
};

}  // namespace

TEST_CASE("exactly once: nothing is confirmable before its Kafka transaction committed") {
  Harness h(std::string(kLongInterval) + R"(,"transaction.boundary.max.records":"3")");
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 2, L(200)).ok());
  REQUIRE(h.AckAll().ok());
  // Kafka acknowledged every record, but their transaction is open.
  CHECK(h.txn->commit_calls == 0);
  CHECK(h.pipeline->Confirmable() == L(100));
  CHECK(h.eos->Confirmable(L(200)) == L(100));
  // The third record makes the transaction due at its source commit: its commit starts and
  // runs in the background, and until it has ended nothing of it is confirmable.
  h.txn->finished = false;
  REQUIRE(h.Transaction(2, L(210), 1, L(300)).ok());
  CHECK(h.txn->commit_calls == 1);
  REQUIRE(h.txn->offsets.size() == 1);
  CHECK(h.txn->Offset(0).lsn_commit == L(300));
  CHECK(h.txn->commit_operations[0] == "committing the transaction up to LSN " + L(300).ToString());
  const auto deadline = h.pipeline->TickDeadline();  // the relay looks again soon
  REQUIRE(deadline.has_value());
  CHECK(*deadline <= std::chrono::steady_clock::now() + ExactlyOnce::kCommitCheck);
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commits == 0);
  CHECK(h.eos->Confirmable(L(900)) == L(100));
  h.txn->finished = true;
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commits == 1);
  CHECK(h.counters.kafka_transactions.committed == 1);
  CHECK_FALSE(h.pipeline->TickDeadline().has_value());
  // Committed, but the ledger still waits for the last record's report: the minimum of both.
  CHECK(h.eos->Confirmable(L(900)) == L(300));
  CHECK(h.pipeline->Confirmable() == L(200));
  REQUIRE(h.AckAll().ok());
  CHECK(h.pipeline->Confirmable() == L(300));
}

TEST_CASE("exactly once: transaction.boundary=source.commit commits at every source commit, "
          "never inside one") {
  Harness h;
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 2, L(200)).ok());
  CHECK(h.txn->commit_calls == 1);
  CHECK(h.txn->begins == 1);
  REQUIRE(h.Begin(2).ok());
  REQUIRE(h.Row(L(210)).ok());
  CHECK(h.txn->begins == 2);  // with its first record
  REQUIRE(h.pipeline->Tick().ok());
  REQUIRE(h.Row(L(211)).ok());
  CHECK(h.txn->commits == 1);
  CHECK(h.txn->commit_calls == 1);
  REQUIRE(h.Commit(2, L(300)).ok());
  CHECK(h.txn->commit_calls == 2);
  CHECK(h.txn->Offset(1).lsn_commit == L(300));
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commits == 2);
  REQUIRE(h.AckAll().ok());
  CHECK(h.pipeline->Confirmable() == L(300));
}

TEST_CASE("exactly once: a commit waits for the end of a source transaction and for records "
          "waiting for room") {
  Harness h(R"(,"transaction.boundary.interval.ms":"1")");
  h.Start(L(100));
  h.sink.room = 1;
  REQUIRE(h.Begin(1).ok());
  REQUIRE(h.Row(L(110)).ok());
  REQUIRE(h.Row(L(111)).ok());  // no room in librdkafka's queue: held
  CHECK(h.pipeline->holding());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(h.pipeline->Tick().ok());  // due, but inside the source transaction
  CHECK(h.txn->offsets.empty());
  REQUIRE(h.Commit(1, L(200)).ok());  // due, but a record still waits for room
  CHECK(h.txn->offsets.empty());
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->offsets.empty());
  REQUIRE(h.AckAll().ok());
  REQUIRE(h.pipeline->SendHeld().ok());
  CHECK_FALSE(h.pipeline->holding());
  REQUIRE(h.pipeline->Tick().ok());  // idle and due: its commit starts
  CHECK(h.txn->commit_calls == 1);
  CHECK(h.txn->Offset(0).lsn_commit == L(200));
  CHECK(h.pipeline->Confirmable() == L(100));  // the held record is not acknowledged yet
  REQUIRE(h.AckAll().ok());
  REQUIRE(h.pipeline->Tick().ok());  // the commit has ended
  CHECK(h.txn->commits == 1);
  CHECK(h.pipeline->Confirmable() == L(200));
}

TEST_CASE("exactly once: an idle keepalive between transactions becomes confirmable") {
  Harness h(kLongInterval);
  h.Start(L(100));
  CHECK_FALSE(h.pipeline->TickDeadline().has_value());  // nothing open
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  CHECK(h.pipeline->TickDeadline().has_value());  // when the idle transaction is due
  REQUIRE(h.AckAll().ok());
  // A Kafka transaction is open: the keepalive is not confirmable past it.
  h.pipeline->ServerPosition(L(250));
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.pipeline->EndStream().ok());
  REQUIRE(h.Attempt().ok());  // the next connect attempt's worker commits it
  CHECK(h.txn->commits == 1);
  CHECK_FALSE(h.pipeline->TickDeadline().has_value());
  CHECK(h.pipeline->Confirmable() == L(200));
  h.pipeline->ServerPosition(L(350));
  CHECK(h.pipeline->Confirmable() == L(350));
  // A source transaction without records opens no Kafka transaction and is confirmable at once.
  REQUIRE(h.Transaction(2, L(360), 0, L(400)).ok());
  CHECK(h.txn->begins == 1);
  CHECK(h.pipeline->Confirmable() == L(400));
  // Inside a source transaction, a keepalive is not adopted.
  REQUIRE(h.Begin(3).ok());
  h.pipeline->ServerPosition(L(450));
  CHECK(h.pipeline->Confirmable() == L(400));
}

TEST_CASE("exactly once: an abortable commit failure aborts, replays, and forgets the records "
          "in flight") {
  Harness h;
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.AckAll().ok());
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.pipeline->Confirmable() == L(200));
  h.txn->commit_answers.push_back(
      Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR_INVALID_TXN_STATE));
  REQUIRE(h.Transaction(2, L(210), 2, L(300)).ok());  // its commit fails in the background
  Status failed = h.pipeline->Tick();
  CHECK(failed.code() == ErrorCode::kConnection);  // the relay reconnects and replays
  CHECK(failed.message().find("replaying from LSN " + L(200).ToString()) != std::string::npos);
  // The loop forgot the transaction; the next connect attempt aborts it.
  CHECK(h.txn->aborts == 0);
  CHECK(h.pipeline->inflight_records() == 0);
  CHECK_FALSE(h.pipeline->TickDeadline().has_value());
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 1);
  CHECK_FALSE(h.txn->open);
  CHECK(h.counters.kafka_transactions.aborted == 1);
  CHECK(h.pipeline->inflight_records() == 0);
  CHECK(h.pipeline->Confirmable() == L(200));
  // The aborted records' delivery reports come later: ignored.
  REQUIRE(h.AckAll().ok());
  CHECK(h.failures.empty());
  CHECK(h.pipeline->Confirmable() == L(200));
  // The replay from the committed position goes out in a new transaction.
  h.Start(L(200));
  REQUIRE(h.Transaction(2, L(210), 2, L(300)).ok());
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commits == 2);
  CHECK(h.txn->begins == 3);
  REQUIRE(h.AckAll().ok());
  CHECK(h.pipeline->Confirmable() == L(300));
}

TEST_CASE("exactly once: the loop never waits for an abort: the next connect attempt completes "
          "it before streaming, retrying while the coordinator does not answer; a stop "
          "completes it first") {
  Harness h(kLongInterval);
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.Begin(2).ok());
  REQUIRE(h.Row(L(210)).ok());
  REQUIRE(h.pipeline->EndStream().ok());  // inside source transaction 2: dropped, not waited for
  CHECK(h.txn->aborts == 0);
  CHECK(h.txn->open);
  CHECK(h.pipeline->inflight_records() == 0);
  CHECK(h.counters.kafka_transactions.aborted == 1);
  CHECK_FALSE(h.pipeline->TickDeadline().has_value());
  REQUIRE(h.pipeline->Tick().ok());  // a late tick touches nothing
  CHECK(h.txn->aborts == 0);
  // The coordinator does not answer the first attempt's abort: that attempt is retried, and
  // nothing streams before the abort completed.
  h.txn->abort_answers.push_back(Error(TxnErrorKind::kRetriable, RD_KAFKA_RESP_ERR__TIMED_OUT));
  const Status waiting = h.Attempt();
  CHECK(waiting.code() == ErrorCode::kConnection);
  CHECK(waiting.message().find("the abort is retried") != std::string::npos);
  CHECK(h.txn->open);
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 1);
  CHECK_FALSE(h.txn->open);
  CHECK(h.eos->Confirmable(L(900)) == L(100));
  REQUIRE(h.Attempt().ok());  // done once
  CHECK(h.txn->aborts == 1);

  // A relay that stops aborts before it exits, so read_committed consumers are not held back
  // until the coordinator's timeout.
  h.Start(L(100));
  REQUIRE(h.Begin(2).ok());
  REQUIRE(h.Row(L(210)).ok());
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.txn->aborts == 1);
  // FinishBeforeExit acts only on initialised producers: the harness's are (SlotTaken).
  REQUIRE(h.eos->SlotTaken(kServer).ok());
  REQUIRE(h.eos->FinishBeforeExit().ok());
  CHECK(h.txn->aborts == 2);
  CHECK_FALSE(h.txn->open);

  // Fenced while aborting: another process aborted it; the producers are replaced at the next
  // end of a stream, on the loop, and the attempt is retried.
  h.Start(L(100));
  REQUIRE(h.Begin(3).ok());
  REQUIRE(h.Row(L(310)).ok());
  REQUIRE(h.pipeline->EndStream().ok());
  h.txn->abort_answers.push_back(Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
  const Status fenced = h.Attempt();
  CHECK(fenced.code() == ErrorCode::kConnection);
  CHECK(fenced.message().find("fenced") != std::string::npos);
  CHECK(h.txn->renewals == 0);
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.txn->renewals == 1);
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 2);  // the new producers have nothing to abort
}

TEST_CASE("exactly once: a commit that waits for Kafka holds the stream, not the loop: it is due "
          "until its records are acknowledged and the commit before it ended, and Tick starts it") {
  Harness h;
  h.Start(L(100));
  // Kafka has not acknowledged the transaction's records yet.
  h.txn->flushed = false;
  REQUIRE(h.Transaction(1, L(110), 2, L(200)).ok());
  CHECK(h.txn->commit_calls == 0);
  REQUIRE(h.txn->offsets.size() == 1);  // the offset record went out at once
  CHECK(h.txn->Offset(0).lsn_commit == L(200));
  CHECK(h.eos->Holding());
  CHECK(h.pipeline->Backpressured());  // the relay reads no further meanwhile
  const auto deadline = h.pipeline->TickDeadline();
  REQUIRE(deadline.has_value());
  CHECK(*deadline <= std::chrono::steady_clock::now() + ExactlyOnce::kCommitCheck);
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commit_calls == 0);
  CHECK(h.eos->Confirmable(L(900)) == L(100));
  REQUIRE(h.AckAll().ok());
  h.txn->flushed = true;
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commit_calls == 1);
  CHECK_FALSE(h.eos->Holding());
  CHECK_FALSE(h.pipeline->Backpressured());
  CHECK(h.eos->Confirmable(L(900)) == L(100));  // started, not committed
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commits == 1);
  CHECK(h.eos->Confirmable(L(900)) == L(200));

  // The commit before it still runs: the next one is due behind it.
  h.txn->finished = false;
  REQUIRE(h.Transaction(2, L(210), 1, L(300)).ok());
  CHECK(h.txn->commit_calls == 2);  // nothing ran before it: started at once
  REQUIRE(h.Transaction(3, L(310), 1, L(400)).ok());
  CHECK(h.txn->commit_calls == 2);
  CHECK(h.eos->Holding());
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commit_calls == 2);
  CHECK(h.eos->Confirmable(L(900)) == L(200));
  h.txn->finished = true;
  REQUIRE(h.pipeline->Tick().ok());  // the one before ended: this one starts
  CHECK(h.txn->commits == 2);
  CHECK(h.txn->commit_calls == 3);
  CHECK(h.eos->Confirmable(L(900)) == L(300));
  CHECK_FALSE(h.eos->Holding());
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.eos->Confirmable(L(900)) == L(400));

  // The end of the stream does not wait for a due transaction either: the next connect
  // attempt's worker commits it first, before anything is read or streamed.
  h.txn->flushed = false;
  REQUIRE(h.Transaction(4, L(410), 1, L(500)).ok());
  CHECK(h.eos->Holding());
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.txn->commit_calls == 3);
  CHECK(h.eos->Confirmable(L(900)) == L(400));
  REQUIRE(h.AckAll().ok());
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->commits == 4);
  CHECK_FALSE(h.eos->Holding());
  CHECK(h.eos->Confirmable(L(900)) == L(500));

  // Nor for one that ends with whole source transactions open in Kafka and their records not
  // yet acknowledged: the offset record goes out, and the commit is due until the worker
  // commits it. The next stream replays from what committed, so it starts only after that
  // (a due commit started by the next stream's first record would hold the records replayed).
  Harness g(kLongInterval);
  g.Start(L(100));
  g.txn->flushed = false;
  REQUIRE(g.Transaction(1, L(110), 1, L(200)).ok());
  CHECK(g.txn->commit_calls == 0);  // the interval has not passed
  REQUIRE(g.pipeline->EndStream().ok());
  CHECK(g.txn->offsets.size() == 1);
  CHECK(g.txn->commit_calls == 0);
  CHECK(g.eos->Holding());
  REQUIRE(g.pipeline->Tick().ok());  // a late tick on the loop starts nothing
  CHECK(g.txn->commit_calls == 0);
  CHECK(g.eos->StreamStarts(kServer, L(100), true).code() == ErrorCode::kInternal);
  REQUIRE(g.Attempt().ok());
  CHECK(g.txn->commits == 1);
  CHECK_FALSE(g.eos->Holding());
  CHECK(g.eos->Confirmable(L(900)) == L(200));
}

TEST_CASE("exactly once: a commit left by the end of a stream that fails on the worker is "
          "aborted there; the pipeline forgets its records on the loop, and the stop commits "
          "what is left") {
  Harness h(kLongInterval);
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 2, L(200)).ok());
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.pipeline->inflight_records() == 2);
  // The commit fails abortably on the worker: it aborts there, and the attempt is retried;
  // the records stay the loop's until its next EndStream forgets them.
  h.txn->commit_answers.push_back(Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR__STATE));
  const Status failed = h.Attempt();
  CHECK(failed.code() == ErrorCode::kConnection);
  CHECK(h.txn->aborts == 1);
  CHECK(h.counters.kafka_transactions.aborted == 1);
  CHECK(h.pipeline->inflight_records() == 2);
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.pipeline->inflight_records() == 0);
  REQUIRE(h.AckAll().ok());  // late reports of the aborted records are ignored
  CHECK(h.pipeline->Confirmable() == L(100));
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 1);

  // Fenced on the worker: the records are forgotten on the loop too, and the producers are
  // replaced there.
  REQUIRE(h.eos->StreamStarts(kServer, L(100), true).ok());
  h.pipeline->StreamStarted(StreamStart{kServer, L(100), L(100), false, std::nullopt});
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.pipeline->EndStream().ok());
  h.txn->commit_answers.push_back(Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
  CHECK(h.Attempt().code() == ErrorCode::kConnection);
  CHECK(h.pipeline->inflight_records() == 1);
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.pipeline->inflight_records() == 0);
  CHECK(h.txn->renewals == 1);
  CHECK(h.eos->Confirmable(L(900)) == L(100));

  // A relay that stops commits what the last stream left before it exits, so the slot is
  // confirmed up to it.
  Harness s(kLongInterval);
  s.Start(L(100));
  REQUIRE(s.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(s.pipeline->EndStream().ok());
  CHECK(s.txn->commits == 0);
  REQUIRE(s.AckAll().ok());
  REQUIRE(s.eos->SlotTaken(kServer).ok());  // FinishBeforeExit acts on initialised producers
  REQUIRE(s.eos->FinishBeforeExit().ok());
  CHECK(s.txn->commits == 1);
  CHECK(s.pipeline->Confirmable() == L(200));
}

TEST_CASE("exactly once: a failed commit before a due one aborts both; a record arriving while a "
          "commit is due starts it first, so the commit holds what its offset record names") {
  Harness h;
  h.Start(L(100));
  h.txn->finished = false;
  h.txn->commit_answers.push_back(
      Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR_INVALID_TXN_STATE));
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.Transaction(2, L(210), 1, L(300)).ok());  // due behind the running one
  CHECK(h.eos->Holding());
  h.txn->finished = true;
  Status failed = h.pipeline->Tick();
  CHECK(failed.code() == ErrorCode::kConnection);
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 1);
  CHECK(h.txn->commit_calls == 1);  // the second never started
  CHECK_FALSE(h.eos->Holding());
  CHECK(h.pipeline->inflight_records() == 0);
  CHECK(h.eos->Confirmable(L(900)) == L(100));

  // Within one payload a change can follow the change a split was due at: the split commit
  // starts before the next record, whose transaction is the next one.
  h.Start(L(100));
  h.txn->on_commit = {};  // the harness's inside_source is that of the next record here
  h.txn->flushed = false;
  REQUIRE(h.Transaction(3, L(110), 1, L(200)).ok());
  CHECK(h.eos->Holding());
  const int begins = h.txn->begins;
  const int calls = h.txn->commit_calls;
  REQUIRE(h.Begin(4).ok());
  REQUIRE(h.Row(L(210)).ok());
  CHECK(h.txn->commit_calls == calls + 1);
  CHECK(h.txn->begins == begins + 1);
  CHECK_FALSE(h.eos->Holding());
}

TEST_CASE("exactly once: the next transaction's records go out while the one before commits; "
          "what needs nothing from Kafka behind it becomes confirmable with it") {
  Harness h;
  h.Start(L(100));
  h.txn->finished = false;
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.AckAll().ok());
  CHECK(h.txn->committing);
  // An empty source transaction and a keepalive need nothing from Kafka, but come after a
  // transaction that is not committed yet.
  REQUIRE(h.Transaction(2, L(210), 0, L(250)).ok());
  h.pipeline->ServerPosition(L(260));
  CHECK(h.eos->Confirmable(L(900)) == L(100));
  // The next source transaction's records go out in the next Kafka transaction meanwhile.
  REQUIRE(h.Begin(3).ok());
  REQUIRE(h.Row(L(270)).ok());
  CHECK(h.txn->begins == 2);
  CHECK(h.sink.produced.size() == 2);
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commits == 0);
  CHECK(h.eos->Confirmable(L(900)) == L(100));
  h.txn->finished = true;
  REQUIRE(h.pipeline->Tick().ok());
  CHECK(h.txn->commits == 1);
  CHECK(h.eos->Confirmable(L(900)) == L(260));
  REQUIRE(h.Commit(3, L(300)).ok());
  CHECK(h.txn->commit_calls == 2);
  REQUIRE(h.pipeline->EndStream().ok());  // leaves the last commit running
  CHECK(h.txn->commits == 1);
  REQUIRE(h.Attempt().ok());  // the next connect attempt's worker waits for it
  CHECK(h.txn->commits == 2);
  CHECK(h.eos->Confirmable(L(900)) == L(300));
}

TEST_CASE("exactly once: a background commit that fails takes the transaction after it along, "
          "and the stream is replayed from before both") {
  Harness h;
  h.Start(L(100));
  h.txn->finished = false;
  h.txn->commit_answers.push_back(
      Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR_INVALID_TXN_STATE));
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.Begin(2).ok());
  REQUIRE(h.Row(L(210)).ok());  // in the next Kafka transaction
  CHECK(h.txn->open);
  REQUIRE(h.AckAll().ok());
  h.txn->finished = true;
  Status failed = h.Commit(2, L(300));  // its commit waits for the one before, which failed
  CHECK(failed.code() == ErrorCode::kConnection);
  CHECK(failed.message().find("replaying from LSN " + L(100).ToString()) != std::string::npos);
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 1);  // both transactions
  CHECK_FALSE(h.txn->open);
  CHECK_FALSE(h.txn->failed_open);
  CHECK(h.txn->commit_calls == 1);  // the second never started
  CHECK(h.pipeline->inflight_records() == 0);
  CHECK(h.eos->Confirmable(L(900)) == L(100));
  CHECK(h.counters.kafka_transactions.committed == 0);
  // A transaction aborted while the one before it commits: that one still counts.
  h.Start(L(100));
  h.txn->finished = false;
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.Begin(2).ok());
  REQUIRE(h.Row(L(210)).ok());
  REQUIRE(h.pipeline->EndStream().ok());  // inside source transaction 2: aborted
  // The loop waited for neither the running commit nor the abort: the next attempt does.
  CHECK(h.txn->commits == 0);
  CHECK(h.txn->aborts == 1);
  CHECK(h.eos->Confirmable(L(900)) == L(100));
  h.txn->finished = true;
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->commits == 1);
  CHECK(h.txn->aborts == 2);
  CHECK(h.eos->Confirmable(L(900)) == L(200));
}

TEST_CASE("exactly once: a fenced commit drops the transaction, confirms nothing more, and "
          "replaces the producers before the next stream") {
  Harness h;
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  REQUIRE(h.pipeline->Tick().ok());
  h.txn->commit_answers.push_back(Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
  REQUIRE(h.Transaction(2, L(210), 1, L(300)).ok());
  // Another process of the connector took the slot over: this one connects again (kConnection)
  // and waits as a standby while the other holds the slot.
  Status failed = h.pipeline->Tick();
  CHECK(failed.code() == ErrorCode::kConnection);
  CHECK(failed.message().find("fenced") != std::string::npos);
  CHECK(h.txn->aborts == 0);  // another process owns the transactional.id now
  CHECK(h.pipeline->inflight_records() == 0);
  CHECK(h.eos->Confirmable(L(900)) == L(200));
  CHECK(h.txn->renewals == 0);  // on the loop, before the next attempt
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.txn->renewals == 1);
  // The next takeover initialises new producers and reads the topic again, instead of
  // trusting what this process committed.
  const int reads = h.stored_reads;
  auto taken = h.eos->SlotTaken(kServer);
  REQUIRE(taken.ok());
  CHECK(taken->read);
  CHECK(h.stored_reads == reads + 1);
}

TEST_CASE("exactly once: fencings again and again after committing mean a shared "
          "transactional.id: the relay stops; fencings before a stream's first commit do not "
          "count") {
  Harness h;
  // Fenced at the first commit of each stream: producers another process fenced while this
  // one did not hold the slot (a takeover it never saw). Expected, however often.
  for (size_t i = 0; i < 3 * ExactlyOnce::kFencingsAllowed; ++i) {
    h.Start(L(100));
    h.txn->commit_answers.push_back(Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
    REQUIRE(h.Transaction(static_cast<uint32_t>(i + 1), L(110), 1, L(200)).ok());
    CHECK(h.pipeline->Tick().code() == ErrorCode::kConnection);
    REQUIRE(h.pipeline->EndStream().ok());
  }
  // Fenced after committing while holding the slot: another process initialised the ids
  // meanwhile. Again and again, that is another connector with the same transactional.id.
  Status last;
  uint32_t xid = 1000;
  for (size_t i = 0; i <= ExactlyOnce::kFencingsAllowed; ++i) {
    h.Start(L(100));
    REQUIRE(h.Transaction(++xid, L(110), 1, L(200)).ok());
    REQUIRE(h.pipeline->Tick().ok());
    h.txn->commit_answers.push_back(Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
    REQUIRE(h.Transaction(++xid, L(210), 1, L(300)).ok());
    last = h.pipeline->Tick();
    if (i < ExactlyOnce::kFencingsAllowed) CHECK(last.code() == ErrorCode::kConnection);
    REQUIRE(h.pipeline->EndStream().ok());
  }
  CHECK(last.code() == ErrorCode::kKafkaFenced);
  CHECK(last.message().find("another connector may use the same transactional.id") !=
        std::string::npos);
}

TEST_CASE("exactly once: a stream that ends between source transactions commits, inside one "
          "aborts") {
  Harness h(kLongInterval);
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  CHECK(h.txn->offsets.empty());          // the interval has not passed
  REQUIRE(h.pipeline->EndStream().ok());  // whole source transactions: committed
  REQUIRE(h.Attempt().ok());              // by the next connect attempt's worker
  CHECK(h.txn->commits == 1);
  REQUIRE(h.AckAll().ok());
  CHECK(h.pipeline->Confirmable() == L(200));
  REQUIRE(h.Transaction(2, L(210), 1, L(300)).ok());
  REQUIRE(h.Begin(3).ok());
  REQUIRE(h.Row(L(310)).ok());
  REQUIRE(h.pipeline->EndStream().ok());  // inside source transaction 3: dropped
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 1);
  CHECK(h.txn->commits == 1);
  CHECK(h.pipeline->inflight_records() == 0);
  REQUIRE(h.AckAll().ok());
  CHECK(h.pipeline->Confirmable() == L(200));
  CHECK(h.pipeline->EndStream().ok());  // nothing open: nothing to do
  CHECK(h.txn->aborts == 1);
}

TEST_CASE("exactly once: the decided start is what Kafka holds; a stream whose slot position is "
          "not stored records it in a transaction of its own") {
  Harness h;
  // Past the slot (the start decision skips what Kafka committed): confirmable from there.
  REQUIRE(h.eos->StreamStarts(kServer, L(500), /*own_position_stored=*/true).ok());
  CHECK(h.eos->Confirmable(L(900)) == L(500));
  CHECK(h.txn->begins == 0);
  // What this process committed, or knew to need nothing from Kafka, stays confirmable on the
  // same server: a later start below it (the slot, after a fence) does not take it back.
  REQUIRE(h.eos->StreamStarts(kServer, L(400), /*own_position_stored=*/true).ok());
  CHECK(h.eos->Confirmable(L(900)) == L(500));
  // On another server (or timeline) it is no floor.
  REQUIRE(h.eos->StreamStarts(SourceIdentity{kServer.system_id, 2}, L(450), true).ok());
  CHECK(h.eos->Confirmable(L(900)) == L(450));
  // A first start: the offset record alone says that this connector streams from the slot,
  // so a later process that finds the slot missing stops instead of creating it.
  REQUIRE(h.eos->StreamStarts(kServer, L(300), /*own_position_stored=*/false).ok());
  CHECK(h.eos->Confirmable(L(900)) == L(300));
  REQUIRE(h.txn->commits == 1);
  REQUIRE(h.txn->offsets.size() == 1);
  const SourceOffset recorded = h.txn->Offset(0);
  CHECK(recorded.lsn_commit == L(300));
  CHECK(recorded.system_identifier == kServer.system_id);
  CHECK(recorded.timeline == 1u);
  CHECK(recorded.slot == "orders_slot");
  CHECK_FALSE(h.txn->open);
  // A commit that fails is aborted, and the attempt is retried (kConnection).
  h.txn->commit_answers.push_back(Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR__STATE));
  const Status failed = h.eos->StreamStarts(kServer, L(300), false);
  CHECK(failed.code() == ErrorCode::kConnection);
  CHECK(h.txn->aborts == 1);
  CHECK_FALSE(h.txn->failed_open);
  // Fenced (producers still initialised from before another process held the slot): the
  // attempt is retried with new producers, not a stop; nothing was committed in the stream.
  const int renewals = h.txn->renewals;
  h.txn->commit_answers.push_back(Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
  const Status fenced = h.eos->StreamStarts(kServer, L(300), false);
  CHECK(fenced.code() == ErrorCode::kConnection);
  CHECK(fenced.message().find("recording the stream's start") != std::string::npos);
  REQUIRE(h.pipeline->EndStream().ok());  // the loop, before the next attempt
  CHECK(h.txn->renewals == renewals + 1);
}

TEST_CASE("exactly once: transactions are initialised only once the slot is taken, again only "
          "with new producers; a process that still holds them answers with what it committed") {
  Harness h;
  h.stored = SourceOffset{};
  h.stored->lsn = h.stored->lsn_commit = L(100);
  h.stored->system_identifier = kServer.system_id;
  h.stored->timeline = 1;
  h.stored->slot = "orders_slot";
  // Before the slot is taken, never initialised (a standby fences nobody): with the slot
  // present nothing is read (a dead process's open transaction would hold the read up until
  // Init aborts it); a missing slot needs the answer before it may be created.
  auto before = h.eos->StoredPosition(kServer, false);
  REQUIRE(before.ok());
  CHECK_FALSE(before->has_value());
  CHECK(h.stored_reads == 0);
  auto missing = h.eos->StoredPosition(kServer, true);
  REQUIRE(missing.ok());
  CHECK(*missing == h.stored);
  CHECK(h.stored_reads == 1);
  CHECK(h.txn->inits == 0);
  // An Init that fails half-way: retried with new producers (librdkafka initialises once).
  h.txn->init_answers.push_back(Error(TxnErrorKind::kRetriable, RD_KAFKA_RESP_ERR__TIMED_OUT));
  CHECK(h.eos->SlotTaken(kServer).status().code() == ErrorCode::kConnection);
  REQUIRE(h.pipeline->EndStream().ok());  // the loop, before the next attempt
  CHECK(h.txn->renewals == 1);
  // With the slot taken: initialised, and the topic read again, now final.
  auto taken = h.eos->SlotTaken(kServer);
  REQUIRE(taken.ok());
  CHECK(h.txn->inits == 2);
  CHECK(taken->read);
  CHECK(taken->stored == h.stored);
  h.Start(L(100));
  REQUIRE(h.Transaction(1, L(110), 1, L(200)).ok());
  // A reconnect while it still holds its producers: what it committed, without reading.
  const int reads = h.stored_reads;
  REQUIRE(h.eos->FinishLastStream().ok());
  auto own = h.eos->StoredPosition(kServer, false);
  REQUIRE(own.ok());
  REQUIRE(own->has_value());
  CHECK((*own)->lsn_commit == L(200));
  CHECK(h.stored_reads == reads);
  auto again = h.eos->SlotTaken(kServer);
  REQUIRE(again.ok());
  CHECK_FALSE(again->read);
  CHECK(h.txn->inits == 2);  // still initialised
  // Another process held the slot meanwhile: it fenced these producers. New ones, initialised
  // again when this process takes the slot back, after reading the topic again.
  h.eos->SlotHeldElsewhere();
  CHECK(h.txn->renewals == 2);
  REQUIRE(h.eos->StoredPosition(kServer, false).ok());
  CHECK(h.stored_reads == reads);
  auto back = h.eos->SlotTaken(kServer);
  REQUIRE(back.ok());
  CHECK(back->read);
  CHECK(h.stored_reads == reads + 1);
  CHECK(h.txn->inits == 3);
  // Producers found fenced while this process did not hold the slot: replaced first.
  h.txn->fenced = true;
  CHECK(h.eos->SlotTaken(kServer).status().code() == ErrorCode::kConnection);
  REQUIRE(h.pipeline->EndStream().ok());
  CHECK(h.txn->renewals == 3);
  Harness fenced;
  fenced.txn->init_answers.push_back(Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
  CHECK(fenced.eos->SlotTaken(kServer).status().code() == ErrorCode::kKafkaFenced);
}

namespace {
DecodedMessage BeginAt(uint32_t xid, Lsn first_lsn) {
  DecodedMessage m = testing::BeginMessage(xid);
  m.begin.first_lsn = first_lsn;
  return m;
}
std::vector<uint64_t> ProducedLsns(const FakeSink& sink, size_t from = 0) {
  std::vector<uint64_t> lsns;
  for (size_t i = from; i < sink.produced.size(); ++i)
    lsns.push_back(sink.produced[i].record.source.lsn.value());
  return lsns;
}
}  // namespace

TEST_CASE("exactly once: a source transaction open longer than transaction.boundary.split.ms is "
          "committed inside it; a replay skips exactly what Kafka holds, changes sharing an LSN "
          "included") {
  Harness h(std::string(kLongInterval) + R"(,"transaction.boundary.split.ms":"5")");
  h.txn->on_commit = [&h] { CHECK_FALSE(h.pipeline->holding()); };  // inside a source: allowed
  h.Start(L(100));
  REQUIRE(h.pipeline->Handle(BeginAt(7, L(150))).ok());
  REQUIRE(h.Row(L(200)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // Two rows of one WAL record (a multi-insert): the split comes after the first of them.
  REQUIRE(h.Row(L(201)).ok());
  REQUIRE(h.txn->commit_calls == 1);
  const SourceOffset split = h.txn->Offset(0);
  CHECK(split.lsn_commit == L(100));  // the last whole source transaction: the slot's start
  REQUIRE(split.inside.has_value());
  CHECK(*split.inside == InsideTransaction{7, L(150), L(201), 1});
  CHECK(h.txn->commit_operations[0].find("inside source transaction 7") != std::string::npos);
  REQUIRE(h.Row(L(201)).ok());
  REQUIRE(h.Row(L(202)).ok());
  REQUIRE(h.AckAll().ok());
  REQUIRE(h.eos->Tick(true).ok());  // the split commit ends
  CHECK(h.txn->commits == 1);
  CHECK(h.counters.kafka_transactions.split == 1);
  // Nothing of the source transaction is confirmable before its end is committed.
  CHECK(h.pipeline->Confirmable() == L(100));
  // This process answers with what it committed itself: the position inside transaction 7.
  auto own = h.eos->StoredPosition(kServer, false);
  REQUIRE(own.ok());
  REQUIRE(own->has_value());
  CHECK((*own)->lsn_commit == L(100));
  CHECK((*own)->inside == split.inside);

  // The stream breaks inside the source transaction: the open Kafka transaction (201 b, 202)
  // is aborted, and a new process streams transaction 7 again from the slot's position.
  REQUIRE(h.pipeline->EndStream().ok());
  REQUIRE(h.Attempt().ok());
  CHECK(h.txn->aborts == 1);
  Harness after(std::string(kLongInterval) + R"(,"transaction.boundary.split.ms":"5")");
  after.stored = split;
  REQUIRE(after.eos->StreamStarts(kServer, L(100), true).ok());
  after.pipeline->StreamStarted(StreamStart{kServer, L(100), L(100), false, split});
  after.inside_source = true;
  REQUIRE(after.pipeline->Handle(BeginAt(7, L(150))).ok());
  for (uint64_t lsn : {200, 201, 201, 202}) REQUIRE(after.Row(L(lsn)).ok());
  REQUIRE(after.Commit(7, L(300)).ok());
  // 200 and the first 201 are in Kafka: the second 201 and 202 go out, once.
  CHECK(ProducedLsns(after.sink) == std::vector<uint64_t>{201, 202});
  CHECK(after.counters.source_changes_held_in_kafka == 2);
  REQUIRE(after.AckAll().ok());
  REQUIRE(after.pipeline->EndStream().ok());
  REQUIRE(after.Attempt().ok());
  CHECK(after.txn->commits == 1);
  const SourceOffset whole = after.txn->Offset(0);
  CHECK(whole.lsn_commit == L(300));
  CHECK_FALSE(whole.inside.has_value());
  CHECK(after.pipeline->Confirmable() == L(300));
  // On another timeline (a promoted standby) the same stored position skips nothing: the
  // split transaction may never have committed there, and another may reuse its xid.
  Harness promoted(std::string(kLongInterval) + R"(,"transaction.boundary.split.ms":"5")");
  const SourceIdentity timeline2{kServer.system_id, 2};
  REQUIRE(promoted.eos->StreamStarts(timeline2, L(100), true).ok());
  promoted.pipeline->StreamStarted(StreamStart{timeline2, L(100), L(100), false, split});
  promoted.inside_source = true;
  REQUIRE(promoted.pipeline->Handle(BeginAt(7, L(150))).ok());
  for (uint64_t lsn : {200, 201}) REQUIRE(promoted.Row(L(lsn)).ok());
  CHECK(ProducedLsns(promoted.sink) == std::vector<uint64_t>{200, 201});
  // Another transaction with the same xid but another first LSN (another server's, or after
  // wraparound) is not skipped; nor, once transaction 7 committed, is anything else.
  after.inside_source = true;
  REQUIRE(after.pipeline->Handle(BeginAt(7, L(400))).ok());
  REQUIRE(after.Row(L(200)).ok());
  REQUIRE(after.Commit(7, L(500)).ok());
  CHECK(ProducedLsns(after.sink, 2) == std::vector<uint64_t>{200});
}

TEST_CASE("exactly once: a split is never inside a change, and waits while records wait for room "
          "in librdkafka's queue") {
  Harness h(std::string(kLongInterval) + R"(,"transaction.boundary.split.ms":"5")");
  h.txn->on_commit = [&h] { CHECK_FALSE(h.pipeline->holding()); };
  h.Start(L(100));
  REQUIRE(h.pipeline->Handle(BeginAt(8, L(150))).ok());
  REQUIRE(h.Row(L(200)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  h.sink.room = h.sink.outstanding;  // librdkafka's queue is full
  REQUIRE(h.Row(L(201)).ok());       // held: no split while it waits
  CHECK(h.pipeline->holding());
  CHECK(h.txn->commit_calls == 0);
  h.sink.room = 1000;
  REQUIRE(h.pipeline->SendHeld().ok());
  // A delete and its tombstone are one change: the split comes after both.
  REQUIRE(h.pipeline->Handle(testing::RowMessage(L(202), "outbox", ChangeOp::kDelete)).ok());
  REQUIRE(h.txn->commit_calls == 1);
  CHECK(h.txn->Offset(0).inside == InsideTransaction{8, L(150), L(202), 1});
}

TEST_CASE("transaction.boundary.split.ms: a third of kafka.transaction.timeout.ms by default, "
          "and below it") {
  CHECK(Settings("").exactly_once.boundary.split_after == std::chrono::milliseconds(20000));
  CHECK(Settings(R"(,"kafka.transaction.timeout.ms":"9000")").exactly_once.boundary.split_after ==
        std::chrono::milliseconds(3000));
  auto config = ParseConnectorConfig(
      R"({"name":"orders","config":{"database.hostname":"h","database.user":"u",)"
      R"("database.dbname":"shop","topic.prefix":"shop","slot.name":"orders_slot",)"
      R"("kafka.bootstrap.servers":"127.0.0.1:9","exactly.once.support":"required",)"
      R"("offsets.storage.topic":"offsets","kafka.transaction.timeout.ms":"9000",)"
      R"("transaction.boundary.split.ms":"9000"}})",
      "test");
  REQUIRE(config.ok());
  auto too_long = ParseRelaySettings(*config);
  REQUIRE_FALSE(too_long.ok());
  CHECK(too_long.status().message().find("transaction.boundary.split.ms") != std::string::npos);
}
