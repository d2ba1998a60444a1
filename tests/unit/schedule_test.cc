// The delivery rules under seeded random schedules: the record pipeline
// (delivery/record_pipeline.h) with the at-least-once rule (the ledger alone, through
// AcknowledgedOnly: acknowledged = confirmable) over a fake sink, and with ExactlyOnce over fake
// Kafka transactions, driven through thousands of random interleavings of what a relay meets:
// source transactions streamed (several rows, empty ones, rows of tables not relayed),
// keepalives, Kafka acknowledging records in any order or refusing one, a full producer queue,
// boundary ticks, background commits that run long or fail, a fence, a broker loss, lost
// replication connections, stops and kill -9 restarts. A restart is a new pipeline and guarantee
// (a new process) started where relay/start_decision.h says, from the slot's confirmed position
// and what the fake Kafka holds in the offsets topic (exactly once: read again once the slot is
// taken, as SourceConnector does, and the attempt made again when that changes the verdict); a
// fenced process replaces its producers and connects again; PostgreSQL then replays every source
// transaction committed after that start, from the list of source transactions the schedule
// generated (its WAL).
//
// The test keeps its own Kafka log: at least once, every acknowledged record is visible; exactly
// once, a record is visible to read_committed once its Kafka transaction committed, never when it
// was aborted. Checked after every step:
// 1. No position confirmed past a record not delivered: the pipeline's Confirmable() and
//    FlushPosition(), the slot (what status updates confirmed) and every stream's start lie
//    before the commit of the first source transaction with a row Kafka does not hold (not
//    acknowledged at least once; not in a committed Kafka transaction exactly once), unless
//    errors.tolerance skipped the row.
//    FlushPosition() never moves backwards within a process.
// 2. Exactly once: no row visible twice to read_committed; a committed Kafka transaction holds
//    whole source transactions and an offset record covering them, never a record Kafka did
//    not acknowledge; the offsets topic's position never goes back; no record is produced
//    outside a Kafka transaction and no commit starts inside a source transaction or while
//    records wait for room. Half the processes split source transactions
//    (transaction.boundary.split.ms due after every change): their commits inside a source
//    transaction must name it and its last row held, hold none of its rows past that, and
//    cover only whole transactions before it; what Kafka holds of it is never sent again.
// At the end of each schedule (faults off, everything acknowledged, commits finished, the stream
// streamed to the end of its WAL and stopped):
// 3. Nothing lost: every row of every source transaction is visible (or was skipped).
// 4. The slot reached the end of the WAL.
// At least once, duplicates are counted, not refused.
//
// Time: ExactlyOnce reads the steady clock itself. A process either never reaches its interval
// (transaction.boundary.interval.ms of an hour) or has always passed it (an interval of 0, set
// in the parsed settings: below the key's minimum of 1 ms), so a schedule replays the same way
// on any machine; ticks stand for the boundary timer firing.
//
// WALRELAY_SCHEDULES=<n> sets the number of schedules per mode (5,000 by default),
// WALRELAY_SCHEDULE_SEED=<seed> runs that one schedule in each mode and prints its steps. A
// failure prints the seed, the step and the steps that led there.
#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "delivery/acknowledged_only.h"
#include "delivery/exactly_once.h"
#include "delivery/producer.h"
#include "delivery/record_pipeline.h"
#include "delivery/source_offsets.h"
#include "fake_transactions.h"
#include "pipeline_fakes.h"
#include "relay/start_decision.h"

using namespace walrelay;

namespace {

using testing::Error;
using testing::FakeSink;
using testing::FakeTransactions;

const SourceIdentity kServer{"7000000000000000001", 1};
constexpr uint64_t kSlotCreatedAt = 1000;
constexpr uint64_t kBaseSeed = 0x5eed0000;
constexpr int kDefaultSchedules = 5000;
const char* kDeadLetterTopic = "dead-letters";

enum class Mode { kAtLeastOnce, kExactlyOnce };
enum class Tolerance { kNone, kSkip, kDeadLetter };

// splitmix64: the same sequence from a seed with every compiler and library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
  uint64_t Between(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }
  bool Chance(int percent) { return Below(100) < static_cast<uint64_t>(percent); }

 private:
  uint64_t state_;
};

// --- The source: PostgreSQL's committed transactions, in commit order ----------------------

struct SourceRow {
  Lsn lsn;
  bool relayed;  // public.outbox (relayed) or public.other (not included)
};

struct SourceTxn {
  uint32_t xid;
  Lsn first;  // its first WAL record (the begin's LSN)
  std::vector<SourceRow> rows;
  Lsn end;              // the end of its commit record: what becomes confirmable
  int undelivered = 0;  // relayed rows Kafka does not hold yet
};

struct RowState {
  size_t txn;  // index in the WAL
  int visible = 0;
  bool skipped = false;
  bool delivered() const { return visible > 0 || skipped; }
};

// --- Kafka -----------------------------------------------------------------------------------

struct KafkaRecord {
  enum class State { kInFlight, kAcked, kRefused, kLost };
  int process;
  size_t produced;  // index in its process's FakeSink::produced
  uint64_t ticket;
  Lsn row;
  bool dead_letter;
  int txn;  // index in Schedule::txns_; -1 at least once
  State state = State::kInFlight;
};

struct KafkaTxn {
  enum class State { kOpen, kCommitting, kCommitted, kFailed, kAborted };
  int process = 0;
  State state = State::kOpen;
  std::vector<size_t> records;   // indices in Schedule::kafka_
  std::optional<Record> offset;  // the offset record sent into it
  bool poisoned = false;         // a record of it was refused: its commit fails
};

class Schedule;
struct Process;

// The process's producer: a FakeSink that refuses one record when told to, each record taken
// entered in the schedule's Kafka log (in the open Kafka transaction, exactly once).
class ModelSink final : public RecordSink {
 public:
  ModelSink(Schedule& schedule, Process& process) : schedule_(schedule), process_(process) {}
  Status Produce(const Record& record, uint64_t ticket, rd_kafka_resp_err_t* code) override;
  int OutstandingMessages() const override;
  size_t MaxValueBytes() const override { return 1 << 20; }

  std::optional<rd_kafka_resp_err_t> refuse_once;

 private:
  Schedule& schedule_;
  Process& process_;
};

// Kafka's transactional calls: testing::FakeTransactions (its call-order checks, `finished`,
// `commit_answers`), with what each call does to the schedule's Kafka log. StartCommit first
// settles every record of the transaction and serves the reports on the caller's thread, as
// the real one flushes; a transaction with a refused record fails its commit. `fail_next`
// makes the next call of a kind fail, doing nothing.
class ModelTransactions final : public KafkaTransactions {
 public:
  enum class Call { kBegin, kSendOffset, kStartCommit, kAbort };
  ModelTransactions(Schedule& schedule, Process& process)
      : schedule_(schedule), process_(process) {}
  TxnStatus Init(std::chrono::milliseconds timeout) override { return fake.Init(timeout); }
  TxnStatus Begin() override;
  TxnStatus SendOffset(const Record& record) override;
  TxnStatus StartCommit(std::chrono::milliseconds timeout, const std::string& operation) override;
  // Kafka settled every record of the process (a commit that is due waits for that, holding
  // the stream); StartCommit settles the rest itself when called before, as the real one's
  // flush waits for them.
  bool Flushed() override;
  bool CommitFinished() override { return fake.CommitFinished(); }
  TxnStatus FinishCommit() override;
  TxnStatus Abort(std::chrono::milliseconds timeout) override;
  TxnStatus Renew() override;
  bool NeedsRenewal() override { return fake.NeedsRenewal(); }

  FakeTransactions fake;
  std::map<Call, TxnStatus> fail_next;

 private:
  std::optional<TxnStatus> Injected(Call call) {
    auto found = fail_next.find(call);
    if (found == fail_next.end()) return std::nullopt;
    TxnStatus failure = found->second;
    fail_next.erase(found);
    return failure;
  }

  Schedule& schedule_;
  Process& process_;
};

// One relay process: its settings, producer, guarantee and pipeline.
struct Process {
  enum class State { kConnecting, kStreaming };
  int id = 0;
  std::string config;  // what was chosen, for the trace
  RelaySettings settings;
  RelayCounters counters;
  FakeSink fake_sink;
  std::unique_ptr<ModelSink> sink;
  ModelTransactions* transactions = nullptr;  // exactly once; owned by the guarantee
  std::unique_ptr<RecordPipeline> pipeline;
  State state = State::kConnecting;
  bool ever_streamed = false;
  int open_txn = -1;
  int committing_txn = -1;
  std::vector<size_t> in_flight;   // its records Kafka has not settled, indices in kafka_
  std::optional<Status> deferred;  // the first failure of a report served inside a call
  Lsn last_flush;                  // FlushPosition() at the last check
  bool splits = false;             // transaction.boundary.split.ms always due inside a source
};

bool ModelTransactions::Flushed() { return process_.in_flight.empty(); }

// Parsing settings is the slow part of a new process: once per distinct configuration.
RelaySettings CachedSettings(const std::string& members) {
  static std::map<std::string, RelaySettings> cache;
  auto found = cache.find(members);
  if (found == cache.end())
    found = cache.emplace(members, testing::PipelineSettings(members)).first;
  return found->second;
}

class Schedule {
 public:
  Schedule(Mode mode, uint64_t seed) : mode_(mode), seed_(seed), rng_(seed) {
    tolerance_ = static_cast<Tolerance>(rng_.Below(3));
    queue_ = std::vector<int>{3, 8, 100}[rng_.Below(3)];
    steps_ = static_cast<int>(rng_.Between(40, 400));
    faults_ = static_cast<int>(rng_.Between(0, 3));  // 0: none, 3: many
  }

  void Run();

  const std::string& violation() const { return violation_; }
  // The step the violation came at (0: the first start, steps_ + 1: the drain).
  int step() const { return violation_step_; }
  std::string Trace() const {
    std::string out;
    for (const auto& line : trace_) out += line + "\n";
    return out;
  }
  std::string Describe() const {
    std::ostringstream out;
    out << (mode_ == Mode::kExactlyOnce ? "exactly once" : "at least once") << ", seed " << seed_
        << ", errors.tolerance "
        << (tolerance_ == Tolerance::kNone   ? "none"
            : tolerance_ == Tolerance::kSkip ? "all (skip)"
                                             : "all (dead letters)")
        << ", max.queue.size " << queue_ << ", fault level " << faults_;
    return out.str();
  }

  // Totals, for the summary.
  int steps_run = 0, processes = 0, reconnects = 0, commits = 0, aborts = 0, rows = 0;
  int duplicates = 0, skipped = 0, records = 0, starts_past_slot = 0, splits = 0;

  // --- Called by the fakes ---
  Status OnProduce(Process& p, const Record& record, uint64_t ticket, rd_kafka_resp_err_t* code);
  void OnBegin(Process& p);
  void OnOffset(Process& p, const Record& record);
  void BeforeCommit(Process& p);
  void OnCommitStarted(Process& p);
  TxnStatus OnCommitFinished(Process& p, TxnStatus answer);
  void OnAbort(Process& p);
  void CheckCommitStarts(Process& p);
  void Violation(const std::string& what) {
    if (!violation_.empty()) return;
    violation_ = what;
    violation_step_ = step_;
    Note("VIOLATION: " + what);
  }

 private:
  bool exactly_once() const { return mode_ == Mode::kExactlyOnce; }
  void Note(const std::string& line) { trace_.push_back("  " + line); }
  static std::string L(Lsn lsn) { return lsn.ToString(); }

  // Steps.
  void Step();
  void SourceStep();
  void Keepalive();
  void Ack(size_t count);
  void Refuse();
  void BrokerLoss();
  void StatusUpdate();
  void TryConnect();
  void Stop(const std::string& why);
  void Crash();
  void Drain();

  // Processes and streams.
  void StartProcess();
  void ProcessGone(Process& p);
  void StreamFrom(Lsn from);
  void GenerateTxn();
  // What the relay does with a call's outcome and the failures of reports served inside it:
  // kConnection replays (reconnects), anything else stops the process, and a new one starts.
  void React(Status status);
  std::optional<Status> TakeDeferred() { return std::exchange(proc_->deferred, std::nullopt); }
  Status Serve(Process& p, size_t record, rd_kafka_resp_err_t error);
  void Settle(Process& p, size_t record);

  // The Kafka log.
  void Visible(Lsn row);
  void Skipped(Lsn row);
  void ApplyCommit(size_t txn);
  Lsn FirstUndelivered();
  std::string Undelivered();
  void CheckPositions();

  const Mode mode_;
  const uint64_t seed_;
  Rng rng_;
  Tolerance tolerance_;
  int queue_;
  int steps_;
  int faults_;
  bool draining_ = false;
  int step_ = 0;
  int violation_step_ = 0;
  std::string violation_;
  std::vector<std::string> trace_;

  // The source.
  std::vector<SourceTxn> wal_;
  std::set<size_t> split_sources_;  // source transactions a Kafka commit split (indices in wal_)
  std::unordered_map<uint64_t, RowState> rows_;
  uint64_t lsn_ = kSlotCreatedAt;
  uint32_t next_xid_ = 700;
  size_t first_undelivered_ = 0;
  Lsn slot_{kSlotCreatedAt};  // the slot's confirmed_flush_lsn
  // The stream: the next source transaction to send, whether its begin went out and how many
  // of its rows.
  size_t cursor_ = 0;
  bool inside_ = false;
  size_t next_row_ = 0;
  Lsn last_end_;  // the stream's start or the last commit it sent

  // Kafka.
  std::vector<KafkaRecord> kafka_;
  std::vector<KafkaTxn> txns_;
  std::optional<SourceOffset> stored_;  // the offsets topic's newest committed record

  std::unique_ptr<Process> proc_;
  int next_process_ = 1;
};

// --- The fakes -------------------------------------------------------------------------------

Status ModelSink::Produce(const Record& record, uint64_t ticket, rd_kafka_resp_err_t* code) {
  return schedule_.OnProduce(process_, record, ticket, code);
}

int ModelSink::OutstandingMessages() const { return process_.fake_sink.OutstandingMessages(); }

TxnStatus ModelTransactions::Begin() {
  if (auto failure = Injected(Call::kBegin)) return *failure;
  if (fake.open) schedule_.Violation("a Kafka transaction begins while one is open");
  TxnStatus begun = fake.Begin();
  if (begun.ok()) schedule_.OnBegin(process_);
  return begun;
}

TxnStatus ModelTransactions::SendOffset(const Record& record) {
  if (auto failure = Injected(Call::kSendOffset)) return *failure;
  if (!fake.open) schedule_.Violation("an offset record is sent outside a Kafka transaction");
  TxnStatus sent = fake.SendOffset(record);
  if (sent.ok()) schedule_.OnOffset(process_, record);
  return sent;
}

TxnStatus ModelTransactions::StartCommit(std::chrono::milliseconds timeout,
                                         const std::string& operation) {
  // Its records not all acknowledged in time: nothing is committed.
  if (auto failure = Injected(Call::kStartCommit)) return *failure;
  if (!fake.open) schedule_.Violation("a commit starts without an open Kafka transaction");
  if (fake.committing) schedule_.Violation("a commit starts before the one before it ended");
  schedule_.CheckCommitStarts(process_);
  schedule_.BeforeCommit(process_);
  TxnStatus started = fake.StartCommit(timeout, operation);
  if (started.ok()) schedule_.OnCommitStarted(process_);
  return started;
}

TxnStatus ModelTransactions::FinishCommit() {
  if (!fake.committing) return fake.FinishCommit();
  return schedule_.OnCommitFinished(process_, fake.FinishCommit());
}

TxnStatus ModelTransactions::Abort(std::chrono::milliseconds timeout) {
  if (auto failure = Injected(Call::kAbort)) return *failure;
  if (fake.committing) schedule_.Violation("an abort while a commit runs");
  TxnStatus aborted = fake.Abort(timeout);
  schedule_.OnAbort(process_);
  return aborted;
}

TxnStatus ModelTransactions::Renew() {
  if (fake.committing) schedule_.Violation("the producers are renewed while a commit runs");
  TxnStatus renewed = fake.Renew();
  schedule_.OnAbort(process_);
  return renewed;
}

// --- Kafka's side ----------------------------------------------------------------------------

Status Schedule::OnProduce(Process& p, const Record& record, uint64_t ticket,
                           rd_kafka_resp_err_t* code) {
  const bool dead_letter = record.topic == kDeadLetterTopic;
  if (p.sink->refuse_once) {
    // librdkafka refuses it before sending (larger than kafka.message.max.bytes, say).
    const rd_kafka_resp_err_t refusal = *std::exchange(p.sink->refuse_once, std::nullopt);
    Note("producer refuses the record of row " + L(record.source.lsn) + " at once (" +
         rd_kafka_err2name(refusal) + ")");
    if (tolerance_ == Tolerance::kSkip && IsRecordSpecificError(refusal) && !dead_letter)
      Skipped(record.source.lsn);
    if (code) *code = refusal;
    return Status::Kafka(std::string("refused: ") + rd_kafka_err2name(refusal));
  }
  const size_t before = p.fake_sink.produced.size();
  Status taken = p.fake_sink.Produce(record, ticket, code);
  if (!taken.ok()) return taken;  // no room: the pipeline holds it
  REQUIRE(p.fake_sink.produced.size() == before + 1);
  if (exactly_once() && p.open_txn < 0) {
    Violation("the record of row " + L(record.source.lsn) +
              " is produced outside any Kafka transaction");
  }
  KafkaRecord entry{
      p.id, before, ticket, record.source.lsn, dead_letter, exactly_once() ? p.open_txn : -1};
  kafka_.push_back(entry);
  p.in_flight.push_back(kafka_.size() - 1);
  if (entry.txn >= 0) txns_[entry.txn].records.push_back(kafka_.size() - 1);
  ++records;
  return taken;
}

void Schedule::OnBegin(Process& p) {
  KafkaTxn txn;
  txn.process = p.id;
  txns_.push_back(std::move(txn));
  p.open_txn = static_cast<int>(txns_.size()) - 1;
}

void Schedule::OnOffset(Process& p, const Record& record) {
  if (p.open_txn >= 0) txns_[p.open_txn].offset = record;
}

void Schedule::CheckCommitStarts(Process& p) {
  // Only a process that splits source transactions commits inside one (ApplyCommit checks
  // that such a commit names its position inside it).
  if (inside_ && !p.splits) Violation("a Kafka transaction commits inside a source transaction");
  if (p.pipeline && p.pipeline->holding())
    Violation("a Kafka transaction commits while records wait for room in the producer's queue");
}

void Schedule::BeforeCommit(Process& p) {
  if (p.open_txn < 0) return;
  // Kafka settles every record of the transaction; their reports are served here.
  std::vector<size_t> own;
  for (size_t record : p.in_flight)
    if (kafka_[record].txn == p.open_txn) own.push_back(record);
  if (own.empty()) return;
  int refused = 0;
  for (size_t i = 0; i < own.size(); ++i) {
    std::swap(own[i], own[i + rng_.Below(own.size() - i)]);
    const bool refuse = !draining_ && faults_ > 0 && rng_.Chance(2 * faults_);
    refused += refuse ? 1 : 0;
    Status served = Serve(
        p, own[i], refuse ? RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE : RD_KAFKA_RESP_ERR_NO_ERROR);
    if (!served.ok() && !p.deferred) p.deferred = served;
  }
  Note("commit flushes " + std::to_string(own.size()) + " record(s), " + std::to_string(refused) +
       " refused");
}

void Schedule::OnCommitStarted(Process& p) {
  if (p.open_txn < 0) return;
  txns_[p.open_txn].state = KafkaTxn::State::kCommitting;
  p.committing_txn = std::exchange(p.open_txn, -1);
}

TxnStatus Schedule::OnCommitFinished(Process& p, TxnStatus answer) {
  const int txn = std::exchange(p.committing_txn, -1);
  if (txn < 0) return answer;
  if (answer.ok() && txns_[txn].poisoned) {
    // Kafka refused one of its records: the commit fails, the transaction must be aborted.
    --p.transactions->fake.commits;
    p.transactions->fake.failed_open = true;
    answer = Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR__INCONSISTENT);
  }
  if (!answer.ok()) {
    txns_[txn].state = KafkaTxn::State::kFailed;
    Note("Kafka transaction " + std::to_string(txn) + ": commit fails (" +
         TxnErrorKindName(answer.kind) + ")");
    return answer;
  }
  ApplyCommit(static_cast<size_t>(txn));
  return answer;
}

void Schedule::OnAbort(Process& p) {
  int aborted = 0;
  for (auto& txn : txns_) {
    if (txn.process != p.id) continue;
    if (txn.state == KafkaTxn::State::kOpen || txn.state == KafkaTxn::State::kFailed) {
      txn.state = KafkaTxn::State::kAborted;
      ++aborted;
    }
  }
  aborts += aborted;
  p.open_txn = -1;
  Note("Kafka aborts " + std::to_string(aborted) + " transaction(s)");
}

void Schedule::ApplyCommit(size_t index) {
  KafkaTxn& txn = txns_[index];
  txn.state = KafkaTxn::State::kCommitted;
  ++commits;
  std::set<uint64_t> held;
  std::set<size_t> sources;
  for (size_t r : txn.records) {
    const KafkaRecord& record = kafka_[r];
    if (record.state != KafkaRecord::State::kAcked) {
      Violation("Kafka transaction " + std::to_string(index) + " commits the record of row " +
                L(record.row) + ", which Kafka did not acknowledge");
    }
    held.insert(record.row.value());
    sources.insert(rows_.at(record.row.value()).txn);
  }
  std::optional<SourceOffset> offset;
  if (!txn.offset) {
    Violation("Kafka transaction " + std::to_string(index) + " commits without an offset record");
  } else if (txn.offset->value) {
    auto parsed = ParseSourceOffset(*txn.offset->value);
    if (!parsed.ok()) {
      Violation("an offset record does not parse: " + parsed.status().message());
    } else {
      offset = *parsed;
    }
  }
  std::string lsns;
  // Committed inside a source transaction (a split): the offset names the last change held.
  const InsideTransaction* inside = offset && offset->inside ? &*offset->inside : nullptr;
  std::optional<size_t> split_here;
  for (size_t s : sources) {
    const SourceTxn& source = wal_[s];
    lsns += " " + std::to_string(source.xid);
    const bool is_split = inside && inside->xid == source.xid && inside->first_lsn == source.first;
    if (is_split) split_here = s;
    for (const SourceRow& row : source.rows) {
      if (!row.relayed || held.count(row.lsn.value()) || rows_.at(row.lsn.value()).skipped)
        continue;
      // Its rows after the split point follow in later Kafka transactions; those before it
      // came in earlier ones, when an earlier commit split it.
      if (is_split && row.lsn > inside->lsn) continue;
      if (split_sources_.count(s) && rows_.at(row.lsn.value()).visible > 0) continue;
      Violation("Kafka transaction " + std::to_string(index) +
                " holds part of source transaction " + std::to_string(source.xid) +
                ": not its row " + L(row.lsn));
    }
    if (is_split) {
      for (size_t r : txn.records) {
        if (rows_.at(kafka_[r].row.value()).txn == s && kafka_[r].row > inside->lsn)
          Violation("Kafka transaction " + std::to_string(index) + " holds row " +
                    L(kafka_[r].row) + " of the source transaction it splits, past its offset's " +
                    L(inside->lsn));
      }
      if (offset->lsn_commit >= source.end)
        Violation("Kafka transaction " + std::to_string(index) + " splits source transaction " +
                  std::to_string(source.xid) + " but its offset's commit LSN " +
                  L(offset->lsn_commit) + " is past its end");
      continue;
    }
    if (offset && source.end > offset->lsn_commit) {
      Violation("Kafka transaction " + std::to_string(index) + " holds source transaction " +
                std::to_string(source.xid) + " (commit " + L(source.end) +
                ") but its offset record says " + L(offset->lsn_commit));
    }
  }
  if (inside && !split_here) {
    // A split that holds no row of the transaction it splits (rows of other tables only, or
    // rows skipped): it must still be the transaction being streamed.
    bool known = false;
    for (size_t s = 0; s < wal_.size() && !known; ++s)
      known = wal_[s].xid == inside->xid && wal_[s].first == inside->first_lsn;
    if (!known)
      Violation("an offset record names an unknown source transaction " +
                std::to_string(inside->xid));
  }
  if (inside) ++splits;
  if (split_here) split_sources_.insert(*split_here);
  for (size_t r : txn.records) Visible(kafka_[r].row);
  if (offset && stored_ && offset->lsn_commit < stored_->lsn_commit) {
    Violation("the offsets topic's position goes back from " + L(stored_->lsn_commit) + " to " +
              L(offset->lsn_commit));
  }
  if (txn.offset) stored_ = offset;
  Note("Kafka transaction " + std::to_string(index) +
       " commits: " + std::to_string(txn.records.size()) + " record(s) of source transaction(s)" +
       lsns + ", offset " + (offset ? L(offset->lsn_commit) : std::string("none")));
  if (stored_ && stored_->lsn_commit >= FirstUndelivered()) {
    Violation("the offsets topic holds LSN " + L(stored_->lsn_commit) + " past " + Undelivered());
  }
}

Status Schedule::Serve(Process& p, size_t index, rd_kafka_resp_err_t error) {
  KafkaRecord& record = kafka_[index];
  Settle(p, index);
  DeliveryReport report{record.ticket, error, "", Record{}};
  if (error == RD_KAFKA_RESP_ERR_NO_ERROR) {
    record.state = KafkaRecord::State::kAcked;
    if (!exactly_once()) Visible(record.row);
  } else {
    record.state = KafkaRecord::State::kRefused;
    if (record.txn >= 0) txns_[record.txn].poisoned = true;
    if (!exactly_once() && tolerance_ == Tolerance::kSkip && IsRecordSpecificError(error) &&
        !record.dead_letter) {
      Skipped(record.row);
    }
    report.description = "record of row " + L(record.row);
    report.failed = p.fake_sink.produced[record.produced].record;
  }
  return p.pipeline->OnDelivery(report);
}

void Schedule::Settle(Process& p, size_t index) {
  auto it = std::find(p.in_flight.begin(), p.in_flight.end(), index);
  REQUIRE(it != p.in_flight.end());
  p.in_flight.erase(it);
  --p.fake_sink.outstanding;
}

void Schedule::Visible(Lsn row) {
  RowState& state = rows_.at(row.value());
  const bool was = state.delivered();
  ++state.visible;
  if (!was) --wal_[state.txn].undelivered;
  if (state.visible > 1) {
    ++duplicates;
    if (exactly_once())
      Violation("row " + L(row) + " of source transaction " + std::to_string(wal_[state.txn].xid) +
                " is visible twice to read_committed");
  }
}

void Schedule::Skipped(Lsn row) {
  RowState& state = rows_.at(row.value());
  if (!state.skipped) ++skipped;
  const bool was = state.delivered();
  state.skipped = true;
  if (!was) --wal_[state.txn].undelivered;
}

Lsn Schedule::FirstUndelivered() {
  while (first_undelivered_ < wal_.size() && wal_[first_undelivered_].undelivered == 0)
    ++first_undelivered_;
  return first_undelivered_ < wal_.size() ? wal_[first_undelivered_].end : Lsn(UINT64_MAX);
}

std::string Schedule::Undelivered() {
  FirstUndelivered();
  if (first_undelivered_ == wal_.size()) return "nothing";
  const SourceTxn& txn = wal_[first_undelivered_];
  std::string missing;
  for (const SourceRow& row : txn.rows)
    if (row.relayed && !rows_.at(row.lsn.value()).delivered()) missing += " " + L(row.lsn);
  return "source transaction " + std::to_string(txn.xid) + " (commit " + L(txn.end) +
         ") whose row(s)" + missing +
         (exactly_once() ? " are in no committed Kafka transaction"
                         : " Kafka has not acknowledged");
}

void Schedule::CheckPositions() {
  const Lsn limit = FirstUndelivered();
  if (slot_ >= limit) Violation("the slot is confirmed at " + L(slot_) + ", past " + Undelivered());
  if (!proc_ || !proc_->pipeline->started()) return;
  const Lsn confirmable = proc_->pipeline->Confirmable();
  const Lsn flush = proc_->pipeline->FlushPosition();
  if (confirmable >= limit)
    Violation("Confirmable() is " + L(confirmable) + ", past " + Undelivered());
  if (flush >= limit) Violation("FlushPosition() is " + L(flush) + ", past " + Undelivered());
  if (flush < proc_->last_flush) {
    Violation("FlushPosition() moves backwards, from " + L(proc_->last_flush) + " to " + L(flush));
  }
  proc_->last_flush = flush;
}

// --- The source ------------------------------------------------------------------------------

void Schedule::GenerateTxn() {
  SourceTxn txn;
  txn.xid = next_xid_++;
  txn.first = Lsn(++lsn_);
  const int rows = rng_.Chance(15) ? 0 : static_cast<int>(rng_.Between(1, rng_.Chance(20) ? 8 : 3));
  for (int i = 0; i < rows; ++i) {
    lsn_ += rng_.Between(1, 3);
    txn.rows.push_back(SourceRow{Lsn(lsn_), !rng_.Chance(10)});
  }
  lsn_ += rng_.Between(1, 16);
  txn.end = Lsn(lsn_);
  for (const SourceRow& row : txn.rows) {
    if (!row.relayed) continue;
    rows_.emplace(row.lsn.value(), RowState{wal_.size()});
    ++txn.undelivered;
    ++this->rows;
  }
  wal_.push_back(std::move(txn));
}

void Schedule::StreamFrom(Lsn from) {
  cursor_ = 0;
  while (cursor_ < wal_.size() && wal_[cursor_].end <= from) ++cursor_;
  inside_ = false;
  next_row_ = 0;
  last_end_ = from;
  if (from >= FirstUndelivered())
    Violation("a stream starts at " + L(from) + ", past " + Undelivered());
}

// --- Processes -------------------------------------------------------------------------------

void Schedule::StartProcess() {
  auto p = std::make_unique<Process>();
  p->id = next_process_++;
  ++processes;
  std::string members = R"(,"max.queue.size":")" + std::to_string(queue_) + "\"";
  if (tolerance_ != Tolerance::kNone) members += R"(,"errors.tolerance":"all")";
  if (tolerance_ == Tolerance::kDeadLetter)
    members += R"(,"errors.deadletterqueue.topic.name":")" + std::string(kDeadLetterTopic) + "\"";
  bool always_due = false;
  if (exactly_once()) {
    members += R"(,"exactly.once.support":"required","offsets.storage.topic":"offsets")";
    switch (rng_.Below(4)) {
      case 0:
        members += R"(,"transaction.boundary":"source.commit")";
        p->config = "source.commit";
        break;
      case 1: {
        const auto max = std::to_string(rng_.Between(1, 6));
        members += R"(,"transaction.boundary.interval.ms":"3600000",)"
                   R"("transaction.boundary.max.records":")" +
                   max + "\"";
        p->config = "max.records " + max;
        break;
      }
      case 2:
        members += R"(,"transaction.boundary.interval.ms":"3600000")";
        p->config = "interval never due";
        break;
      default:
        always_due = true;
        p->config = "interval always due";
        break;
    }
  }
  p->settings = CachedSettings(members);
  if (always_due) p->settings.exactly_once.boundary.interval = std::chrono::milliseconds(0);
  // Half the processes split every source transaction after each change (split.ms of 0, below
  // the key's minimum of 1 ms); the others never do (the default, 20 s, is never reached).
  if (exactly_once() && rng_.Chance(50)) {
    p->splits = true;
    p->settings.exactly_once.boundary.split_after = std::chrono::milliseconds(0);
    p->config += ", splits source transactions";
  }
  p->fake_sink.room = 1 << 20;
  p->sink = std::make_unique<ModelSink>(*this, *p);
  std::unique_ptr<DeliveryGuarantee> guarantee;
  if (exactly_once()) {
    auto transactions = std::make_unique<ModelTransactions>(*this, *p);
    p->transactions = transactions.get();
    // What the offsets topic holds, read committed, whenever the guarantee reads it.
    guarantee = std::make_unique<ExactlyOnce>(
        p->settings, std::move(transactions), p->counters,
        [this] { return Result<std::optional<SourceOffset>>(stored_); });
  } else {
    guarantee = std::make_unique<AcknowledgedOnly>();
  }
  Process* raw = p.get();
  auto made = RecordPipeline::Create(p->settings, *p->sink, std::move(guarantee), p->counters,
                                     [raw](Status failure) {
                                       if (!raw->deferred) raw->deferred = failure;
                                     });
  REQUIRE_MESSAGE(made.ok(), made.status().ToString());
  p->pipeline = std::move(made).value();
  proc_ = std::move(p);
  Note("process " + std::to_string(proc_->id) + " starts" +
       (proc_->config.empty() ? "" : " (" + proc_->config + ")"));
  TryConnect();
}

// Relay::TryConnect and SourceConnector::Attempt: end what the last stream left open, decide
// the start, tell the guarantee, start the pipeline's stream.
void Schedule::TryConnect() {
  Process& p = *proc_;
  if (p.ever_streamed) ++reconnects;
  Status ended = p.pipeline->EndStream();
  inside_ = false;
  if (auto deferred = TakeDeferred();
      deferred && !deferred->ok() && deferred->code() != ErrorCode::kConnection) {
    ended = *deferred;
  }
  if (!ended.ok() && ended.code() != ErrorCode::kConnection) {
    return Stop("ending the stream failed: " + ended.message());
  }
  StartFacts facts;
  facts.mode = exactly_once() ? DeliveryMode::kExactlyOnce : DeliveryMode::kAtLeastOnce;
  facts.slot_name = p.settings.slot_name;
  facts.offsets_topic = p.settings.offsets.topic;
  facts.server = kServer;
  facts.slot_exists = true;
  facts.slot_position = slot_;
  facts.streamed_here = p.ever_streamed;
  facts.last_confirmed = p.pipeline->last_confirmed();
  // A connect attempt that fails with kConnection is tried again by a later step.
  auto attempt_fails = [&](const Status& why) {
    Note("connect attempt fails: " + why.message());
    if (why.code() != ErrorCode::kConnection) Stop("connecting failed: " + why.message());
  };
  if (exactly_once()) {
    // First, before PostgreSQL is connected: what the last stream left committing or aborting
    // in Kafka ends.
    Status finished = p.pipeline->guarantee().FinishLastStream();
    TakeDeferred();
    if (!finished.ok()) return attempt_fails(finished);
    // Before the slot is taken: a process still holding its initialised producers answers
    // with what it committed; one that does not reads nothing (the slot is present).
    auto stored = p.pipeline->guarantee().StoredPosition(kServer, false);
    TakeDeferred();
    if (!stored.ok()) return attempt_fails(stored.status());
    facts.stored = *stored;
  }
  StartVerdict verdict = DecideStart(facts);
  if (verdict.action != StartVerdict::Action::kStream) {
    return Violation("the start decision does not stream: " + verdict.stop.message());
  }
  if (exactly_once()) {
    // The slot is taken: transactions are initialised and the topic read again; a verdict
    // that changes with it makes the attempt start again (SourceConnector::VerdictStands).
    auto taken = p.pipeline->guarantee().SlotTaken(kServer);
    TakeDeferred();
    if (!taken.ok()) return attempt_fails(taken.status());
    if (taken->read && taken->stored != facts.stored) {
      facts.stored = taken->stored;
      const StartVerdict now = DecideStart(facts);
      if (now.action != StartVerdict::Action::kStream || now.start != verdict.start)
        return attempt_fails(Status::Connection("the offsets topic changes the start"));
      verdict = now;
    }
  }
  const bool own = facts.stored && IsOwnPosition(*facts.stored, kServer, p.settings.slot_name);
  Status starts =
      p.pipeline->guarantee().StreamStarts(kServer, verdict.start, verdict.own_position_stored);
  TakeDeferred();
  if (!starts.ok()) {
    Note("connect attempt fails: " + starts.message());
    if (starts.code() != ErrorCode::kConnection)
      return Stop("starting failed: " + starts.message());
    return;
  }
  p.pipeline->StreamStarted(
      StreamStart{kServer, slot_, verdict.start, false, own ? facts.stored : std::nullopt});
  p.state = Process::State::kStreaming;
  p.ever_streamed = true;
  const Lsn from = std::max(slot_, verdict.start);
  if (verdict.start > slot_) ++starts_past_slot;
  Note("stream starts at " + L(from) + " (slot " + L(slot_) + ", stored " +
       (facts.stored ? L(facts.stored->lsn_commit) : std::string("none")) + ")");
  StreamFrom(from);
}

// Relay::Fail and a stop: BeginShutdown (EndStream, wait for some reports), FinishShutdown (a
// last status update), exit; then the next process starts.
void Schedule::Stop(const std::string& why) {
  Process& p = *proc_;
  Note("process " + std::to_string(p.id) + " stops: " + why);
  // Its failure is recorded and the stop goes on.
  if (Status ended = p.pipeline->EndStream(); !ended.ok()) Note("ending: " + ended.message());
  TakeDeferred();
  const size_t acks = rng_.Below(p.in_flight.size() + 1);
  for (size_t i = 0; i < acks && !p.in_flight.empty(); ++i) {
    // Served while stopping: a failure changes nothing any more.
    if (Status served =
            Serve(p, p.in_flight[rng_.Below(p.in_flight.size())], RD_KAFKA_RESP_ERR_NO_ERROR);
        !served.ok()) {
      Note("while stopping: " + served.message());
    }
  }
  TakeDeferred();
  // Relay::FinishShutdown: what the last stream left waiting for Kafka ends before the last
  // status update.
  if (Status done = p.pipeline->guarantee().FinishBeforeExit(); !done.ok())
    Note("stopping: " + done.message());
  TakeDeferred();
  if (p.state == Process::State::kStreaming) StatusUpdate();
  ProcessGone(p);
  StartProcess();
}

void Schedule::Crash() {
  Note("process " + std::to_string(proc_->id) + " is killed (kill -9)");
  ProcessGone(*proc_);
  StartProcess();
}

// What a process leaves behind: records in flight reach Kafka or not; a commit that was
// running commits or not; the next process initialises the transactional ids, which aborts
// every other transaction it left open.
void Schedule::ProcessGone(Process& p) {
  for (size_t index : p.in_flight) {
    KafkaRecord& record = kafka_[index];
    if (!exactly_once() && rng_.Chance(50)) {
      record.state = KafkaRecord::State::kAcked;
      Visible(record.row);
    } else {
      record.state = KafkaRecord::State::kLost;
    }
  }
  p.in_flight.clear();
  for (size_t i = 0; i < txns_.size(); ++i) {
    KafkaTxn& txn = txns_[i];
    if (txn.process != p.id) continue;
    if (txn.state == KafkaTxn::State::kCommitting) {
      if (!txn.poisoned && rng_.Chance(50)) {
        Note("the commit it started completes in Kafka");
        ApplyCommit(i);
      } else {
        txn.state = KafkaTxn::State::kAborted;
        ++aborts;
      }
    } else if (txn.state == KafkaTxn::State::kOpen || txn.state == KafkaTxn::State::kFailed) {
      txn.state = KafkaTxn::State::kAborted;
      ++aborts;
    }
  }
  proc_.reset();
}

void Schedule::React(Status status) {
  std::optional<Status> deferred = TakeDeferred();
  // Reports served inside the call failed first.
  if (deferred && !deferred->ok() && (status.ok() || status.code() == ErrorCode::kConnection))
    status = *deferred;
  if (status.ok()) return;
  if (status.code() == ErrorCode::kConnection) {
    if (proc_->state == Process::State::kStreaming) {
      Note("replay (reconnect): " + status.message());
      proc_->state = Process::State::kConnecting;
    }
    return;
  }
  Stop(status.message());
}

// --- Steps -----------------------------------------------------------------------------------

void Schedule::SourceStep() {
  Process& p = *proc_;
  Status handled;
  if (!inside_) {
    if (cursor_ == wal_.size()) GenerateTxn();
    const SourceTxn& txn = wal_[cursor_];
    inside_ = true;
    next_row_ = 0;
    trace_.back() += ": begin " + std::to_string(txn.xid);
    DecodedMessage begin = testing::BeginMessage(txn.xid);
    begin.begin.first_lsn = txn.first;
    handled = p.pipeline->Handle(begin);
  } else if (next_row_ < wal_[cursor_].rows.size()) {
    const SourceRow row = wal_[cursor_].rows[next_row_++];
    trace_.back() += ": row " + L(row.lsn) + (row.relayed ? "" : " (public.other)");
    handled = p.pipeline->Handle(testing::RowMessage(row.lsn, row.relayed ? "outbox" : "other"));
  } else {
    const SourceTxn& txn = wal_[cursor_];
    inside_ = false;
    last_end_ = txn.end;
    ++cursor_;
    trace_.back() += ": commit " + std::to_string(txn.xid) + " at " + L(txn.end);
    handled = p.pipeline->Handle(testing::CommitMessage(txn.xid, txn.end));
  }
  React(handled);
}

void Schedule::Keepalive() {
  Lsn wal_end;
  if (inside_) {
    wal_end = wal_[cursor_].end;  // the walsender decoded the commit it is sending
  } else if (cursor_ < wal_.size()) {
    wal_end = Lsn(last_end_.value() + rng_.Below(wal_[cursor_].end.value() - last_end_.value()));
  } else {
    lsn_ += rng_.Between(1, 8);
    wal_end = Lsn(lsn_);
  }
  trace_.back() += ": keepalive " + L(wal_end);
  proc_->pipeline->ServerPosition(wal_end);
}

void Schedule::Ack(size_t count) {
  Process& p = *proc_;
  trace_.back() += ": Kafka acknowledges " + std::to_string(std::min(count, p.in_flight.size())) +
                   " of " + std::to_string(p.in_flight.size());
  Status first;
  for (size_t i = 0; i < count && !p.in_flight.empty(); ++i) {
    const size_t index = p.in_flight[rng_.Below(p.in_flight.size())];
    Status served = Serve(p, index, RD_KAFKA_RESP_ERR_NO_ERROR);
    // A report that stops the relay stops it at once; a replay waits for the reconnect.
    if (!served.ok() && served.code() != ErrorCode::kConnection) return React(served);
    if (first.ok()) first = served;
  }
  if (first.ok() && p.pipeline->holding()) first = p.pipeline->SendHeld();
  React(first);
}

void Schedule::Refuse() {
  Process& p = *proc_;
  if (p.in_flight.empty()) {
    trace_.back() += ": Kafka refuses nothing (nothing in flight)";
    return;
  }
  const size_t index = p.in_flight[rng_.Below(p.in_flight.size())];
  const rd_kafka_resp_err_t code = rng_.Chance(80) ? RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE
                                                   : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
  trace_.back() += ": Kafka refuses the record of row " + L(kafka_[index].row) + " (" +
                   rd_kafka_err2name(code) + ")";
  React(Serve(p, index, code));
}

void Schedule::BrokerLoss() {
  Process& p = *proc_;
  trace_.back() += ": the broker is lost for longer than message.timeout.ms (" +
                   std::to_string(p.in_flight.size()) + " record(s) in flight)";
  if (p.committing_txn >= 0) txns_[p.committing_txn].poisoned = true;
  Status first;
  while (!p.in_flight.empty()) {
    Status served = Serve(p, p.in_flight.front(), RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
    if (!served.ok() && served.code() != ErrorCode::kConnection) return React(served);
    if (first.ok()) first = served;
  }
  React(first);
}

void Schedule::StatusUpdate() {
  const Lsn flush = proc_->pipeline->FlushPosition();
  slot_ = std::max(slot_, flush);
  proc_->pipeline->Confirmed(flush);
  Note("status update: flush " + L(flush) + ", slot at " + L(slot_));
  CheckPositions();
}

void Schedule::Step() {
  Process& p = *proc_;
  trace_.push_back("#" + std::to_string(step_));
  if (p.state == Process::State::kConnecting) {
    // Until the connect timer fires, reports and boundary ticks go on.
    switch (rng_.Below(6)) {
      case 0:
      case 1: trace_.back() += ": connect"; return TryConnect();
      case 2: return Ack(rng_.Between(1, 4));
      case 3: trace_.back() += ": tick"; return React(p.pipeline->Tick());
      case 4:
        if (exactly_once()) {
          trace_.back() += ": the running commit ends";
          p.transactions->fake.finished = true;
          return;
        }
        return Ack(1);
      default:
        if (rng_.Chance(10 * faults_)) return Crash();
        return Ack(1);
    }
  }
  const bool reading = !p.pipeline->Backpressured();
  const bool in_flight = !p.in_flight.empty();
  const int f = faults_;
  // Weights: what a relay meets most, faults as often as the schedule's fault level says.
  struct Choice {
    int weight;
    int kind;
  };
  const Choice choices[] = {
      {reading ? 40 : 0, 0},                  // source message
      {reading ? 4 : 0, 1},                   // keepalive
      {in_flight ? 20 : 0, 2},                // acknowledgements
      {8, 3},                                 // tick
      {8, 4},                                 // status update
      {in_flight ? 2 * f : 0, 5},             // Kafka refuses a record
      {f, 6},                                 // the producer refuses the next record at once
      {3, 7},                                 // the producer's queue is full
      {4, 8},                                 // room again
      {exactly_once() ? 4 : 0, 9},            // commits run long
      {exactly_once() ? 5 : 0, 10},           // the running commit ends
      {exactly_once() ? 2 * f : 0, 11},       // the next commit fails
      {exactly_once() && f > 1 ? 1 : 0, 12},  // the next commit is fenced
      {f, 13},                                // broker lost
      {2 * f, 14},                            // replication connection lost
      {1, 15},                                // stop
      {f, 16},                                // kill -9
      {exactly_once() ? f : 0, 17},           // another transactional call fails
  };
  int total = 0;
  for (const Choice& c : choices) total += c.weight;
  int pick = static_cast<int>(rng_.Below(static_cast<uint64_t>(total)));
  int kind = 0;
  for (const Choice& c : choices) {
    if (pick < c.weight) {
      kind = c.kind;
      break;
    }
    pick -= c.weight;
  }
  switch (kind) {
    case 0: return SourceStep();
    case 1: return Keepalive();
    case 2: return Ack(rng_.Chance(20) ? p.in_flight.size() : rng_.Between(1, 4));
    case 3: trace_.back() += ": tick"; return React(p.pipeline->Tick());
    case 4: trace_.back() += ": status update"; return StatusUpdate();
    case 5: return Refuse();
    case 6: {
      const rd_kafka_resp_err_t code = rng_.Chance(80) ? RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE
                                                       : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
      trace_.back() += std::string(": the producer will refuse the next record (") +
                       rd_kafka_err2name(code) + ")";
      p.sink->refuse_once = code;
      return;
    }
    case 7:
      p.fake_sink.room = std::max(p.fake_sink.outstanding, 1);
      trace_.back() += ": the producer's queue is full at " + std::to_string(p.fake_sink.room);
      return;
    case 8:
      p.fake_sink.room = 1 << 20;
      trace_.back() += ": the producer's queue has room";
      return React(p.pipeline->SendHeld());
    case 9:
      trace_.back() += ": commits run long";
      p.transactions->fake.finished = false;
      return;
    case 10:
      trace_.back() += ": the running commit ends";
      p.transactions->fake.finished = true;
      return;
    case 11: {
      const bool abortable = rng_.Chance(70);
      trace_.back() += std::string(": the next commit fails (") +
                       (abortable ? "abortable" : "retriable, timed out") + ")";
      p.transactions->fake.commit_answers.push_back(
          abortable ? Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR_INVALID_TXN_STATE)
                    : Error(TxnErrorKind::kRetriable, RD_KAFKA_RESP_ERR__TIMED_OUT));
      return;
    }
    case 12:
      trace_.back() += ": the next commit is fenced";
      p.transactions->fake.commit_answers.push_back(
          Error(TxnErrorKind::kFenced, RD_KAFKA_RESP_ERR__FENCED));
      return;
    case 13: return BrokerLoss();
    case 14:
      trace_.back() += ": the replication connection is lost";
      p.state = Process::State::kConnecting;
      return;
    case 15: trace_.back() += ": stop"; return Stop("asked to stop");
    case 17: {
      using Call = ModelTransactions::Call;
      const Call call = static_cast<Call>(rng_.Below(4));
      const char* names[] = {"begin", "offset record", "commit's flush", "abort"};
      TxnStatus failure = Error(TxnErrorKind::kAbortable, RD_KAFKA_RESP_ERR__STATE);
      if (call == Call::kStartCommit)
        failure = Error(TxnErrorKind::kRetriable, RD_KAFKA_RESP_ERR__TIMED_OUT);
      if (call == Call::kAbort) {
        failure = rng_.Chance(80) ? Error(TxnErrorKind::kRetriable, RD_KAFKA_RESP_ERR__TIMED_OUT)
                                  : Error(TxnErrorKind::kFatal, RD_KAFKA_RESP_ERR__FATAL);
      }
      trace_.back() += std::string(": the next ") + names[static_cast<int>(call)] + " fails (" +
                       TxnErrorKindName(failure.kind) + ")";
      p.transactions->fail_next[call] = failure;
      return;
    }
    default: trace_.back() += ": kill -9"; return Crash();
  }
}

// Faults off: Kafka acknowledges everything, commits end, the stream reaches the end of the
// WAL, and the relay stops.
void Schedule::Drain() {
  draining_ = true;
  trace_.push_back("drain");
  for (int guard = 0; guard < 20000 && violation_.empty(); ++guard) {
    Process& p = *proc_;
    p.sink->refuse_once.reset();
    p.fake_sink.room = 1 << 20;
    if (exactly_once()) {
      p.transactions->fake.finished = true;
      p.transactions->fake.commit_answers.clear();
      p.transactions->fail_next.clear();
    }
    if (p.state == Process::State::kConnecting) {
      TryConnect();
    } else if (p.pipeline->holding()) {
      React(p.pipeline->SendHeld());
    } else if (!p.in_flight.empty()) {
      trace_.push_back("drain");
      Ack(p.in_flight.size());
    } else if (p.pipeline->Backpressured()) {
      // The guarantee holds the stream (a due commit): the relay reads no further and ticks.
      trace_.push_back("drain: tick");
      React(p.pipeline->Tick());
    } else if (inside_ || cursor_ < wal_.size()) {
      trace_.push_back("drain");
      SourceStep();
    } else {
      Note("the stream reached the end of the WAL: stop");
      Status ended = p.pipeline->EndStream();
      if (auto deferred = TakeDeferred(); deferred && ended.ok()) ended = *deferred;
      if (!ended.ok()) {
        React(ended);
        continue;
      }
      if (!p.in_flight.empty()) continue;
      // Relay::FinishShutdown: the commit the end of the stream left ends before the last
      // status update (failed, it is aborted; here the relay streams on, to reach the end).
      Status finished = p.pipeline->guarantee().FinishBeforeExit();
      if (auto deferred = TakeDeferred(); deferred && finished.ok()) finished = *deferred;
      if (!finished.ok()) {
        React(finished);
        continue;
      }
      StatusUpdate();
      CheckPositions();
      ProcessGone(p);
      return;
    }
    CheckPositions();
  }
  Violation("the drain did not end");
}

void Schedule::Run() {
  trace_.push_back("start: " + Describe());
  StartProcess();
  for (step_ = 1; step_ <= steps_ && violation_.empty(); ++step_) {
    Step();
    ++steps_run;
    CheckPositions();
  }
  if (!violation_.empty()) return;
  Drain();
  if (!violation_.empty()) return;
  // Nothing lost: every row of every source transaction is visible (or was skipped).
  for (const SourceTxn& txn : wal_) {
    for (const SourceRow& row : txn.rows) {
      if (row.relayed && !rows_.at(row.lsn.value()).delivered()) {
        return Violation("row " + L(row.lsn) + " of source transaction " + std::to_string(txn.xid) +
                         " is lost" + (exactly_once() ? " to read_committed" : ""));
      }
    }
  }
  if (!wal_.empty() && slot_ < wal_.back().end) {
    Violation("after the drain the slot is at " + L(slot_) + ", before the end of the WAL (" +
              L(wal_.back().end) + ")");
  }
}

std::optional<uint64_t> EnvNumber(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  return std::strtoull(text, nullptr, 0);
}

// Logging off while schedules run: aborts, dead letters and skips are warnings.
struct QuietLog {
  QuietLog() : level(spdlog::get_level()) { spdlog::set_level(spdlog::level::off); }
  ~QuietLog() { spdlog::set_level(level); }
  spdlog::level::level_enum level;
};

void RunSchedules(Mode mode) {
  const std::optional<uint64_t> one = EnvNumber("WALRELAY_SCHEDULE_SEED");
  const uint64_t count = one ? 1 : EnvNumber("WALRELAY_SCHEDULES").value_or(kDefaultSchedules);
  const auto began = std::chrono::steady_clock::now();
  int steps = 0, processes = 0, commits = 0, aborts = 0, rows = 0, duplicates = 0, skipped = 0;
  int records = 0, starts_past_slot = 0, reconnects = 0, splits = 0;
  uint64_t failed = 0, run = 0;
  for (uint64_t i = 0; i < count; ++i) {
    ++run;
    const uint64_t seed = one ? *one : kBaseSeed + i;
    Schedule schedule(mode, seed);
    {
      // For a check failing inside the fakes as well as for the schedule's own.
      INFO("schedule " << schedule.Describe() << ", failed at step " << schedule.step()
                       << "; replay with WALRELAY_SCHEDULE_SEED=" << seed << "\n"
                       << schedule.Trace());
      {
        QuietLog quiet;
        schedule.Run();
      }
      if (!schedule.violation().empty()) FAIL_CHECK(schedule.violation());
    }
    steps += schedule.steps_run;
    processes += schedule.processes;
    commits += schedule.commits;
    aborts += schedule.aborts;
    rows += schedule.rows;
    duplicates += schedule.duplicates;
    skipped += schedule.skipped;
    records += schedule.records;
    starts_past_slot += schedule.starts_past_slot;
    reconnects += schedule.reconnects;
    splits += schedule.splits;
    if (one && schedule.violation().empty()) MESSAGE(schedule.Trace());
    if (!schedule.violation().empty()) {
      ++failed;
      break;  // one schedule's steps are enough to read
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const std::string name = mode == Mode::kExactlyOnce ? "exactly once" : "at least once";
  MESSAGE(name << ": " << run << " schedules, " << steps << " steps, " << processes
               << " processes, " << reconnects << " reconnects, " << starts_past_slot
               << " streams started past the slot, " << rows << " rows, " << records
               << " records produced, " << commits << " Kafka commits (" << splits
               << " inside a source transaction), " << aborts << " Kafka transactions aborted, "
               << duplicates << " duplicates, " << skipped << " rows skipped; " << seconds << " s");
  CHECK(failed == 0);
}

}  // namespace

TEST_CASE("schedules: at least once, random interleavings never confirm past an unacknowledged "
          "record and lose nothing across restarts") {
  RunSchedules(Mode::kAtLeastOnce);
}

TEST_CASE("schedules: exactly once, random interleavings never confirm past an uncommitted "
          "record, show read_committed every row once and lose nothing across restarts") {
  RunSchedules(Mode::kExactlyOnce);
}
