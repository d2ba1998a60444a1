// ExactlyOnce: exactly.once.support (delivery/delivery_guarantee.h; docs/exactly-once.md).
//
// The relay's producer is transactional (transactional.id). Each Kafka transaction holds the
// records of whole source (PostgreSQL) transactions, dead letters included, plus one record in
// offsets.storage.topic with the end LSN of the last source commit in it (with the server's
// system identifier, timeline and the slot's name). Only once Kafka committed it does that
// LSN become confirmable to the slot, so read_committed consumers see every record once. The
// transactional calls go through KafkaTransactions (delivery/kafka_transactions.h).
//
// - StoredPosition (before the slot is taken) reads nothing while the producers are not
//   initialised and the slot exists: a read then would wait out any transaction a dead process
//   of the connector left open on the topic. With the slot missing it reads the topic
//   (creating it if missing) read_committed to its real end (OffsetStore::ReadLast waits out
//   transactions other producers hold open, bounded), whatever server and slot the position
//   names: the start decision (relay/start_decision.h) tells. Back on the server it streamed
//   from, still initialised, the process answers with what it committed itself.
// - SlotTaken (the slot is this process's) initialises transactions, fencing every older
//   producer with the same ids and aborting what they left open, then reads the topic: now
//   final, as no other process can commit for the connector. The connector starts again when
//   that changes the verdict (another process committed, or Kafka is past the slot).
//   Producers that may have been fenced (SlotHeldElsewhere, a fenced call, an Init that failed
//   half-way) are replaced on the loop thread first (EndStream). Retriable Kafka errors are
//   kConnection (the attempt is retried).
// - StreamStarts records the decided start as what Kafka holds (confirmable from there), and
//   when this slot's position is not stored yet (a first start, a slot created again) commits
//   a transaction holding only the offset record at the start: so a later process knows that
//   this connector streamed, even if no record was ever relayed.
// The calls made on the connector's worker thread keep what librdkafka serves there for the
// loop (KafkaProducer::DeferCallbacks).
// - A Kafka transaction begins with its first record and is committed at a source commit when
//   transaction.boundary says so (delivery/transaction_boundary.h), or by Tick once its interval
//   has passed between source transactions; never while records wait for room in librdkafka's
//   queue. The loop never waits for Kafka there: the offset record goes out at once, and the
//   commit is due (Holding(): the pipeline reads as backpressured, so the stream pauses) until
//   Kafka acknowledged the transaction's records and the commit before it ended; Tick
//   (polled every kCommitCheck) then starts it (KafkaTransactions::StartCommit, which then
//   waits for nothing), and it runs in the background while the next transaction's records go
//   out on the other producer. Transactions still follow one another: the next is committed
//   only after this one committed, and if this one fails, the next is aborted with it. A record
//   or a source commit that arrives while a commit is due (only within one payload) waits for
//   it on the loop first, as the commit must hold exactly what its offset record names.
//   Its last source commit becomes confirmable once Tick (polled every kCommitCheck while the
//   commit runs) or the next boundary sees the commit succeed; so do keepalives and empty
//   source transactions that came after it. Each call is bounded by kTransactionCallTimeout.
// - A source transaction larger than one Kafka transaction: once the Kafka transaction has
//   been open for transaction.boundary.split.ms inside a source transaction (ChangeHandled;
//   delivery/transaction_boundary.h), it is committed there, with an offset record naming the
//   last change it holds (SourceOffset::inside; lsn_commit stays the end of the last whole
//   source transaction). Nothing past that whole transaction becomes confirmable until the
//   source transaction's end is committed; a replay streams it again from its start and the
//   pipeline skips the changes Kafka holds (the stored or own position's `inside`).
// - EndStream commits the open transaction when it holds only whole source transactions, and
//   aborts it otherwise (a stream that broke inside a source transaction). It does not wait
//   for that commit: it sends the offset record and leaves the commit due (or running), and
//   the next connect attempt's worker commits it first, before it connects to PostgreSQL
//   (FinishLastStream), or the stop does (FinishBeforeExit). Meanwhile the loop goes on
//   serving REST, delivery reports and timers; nothing of it is confirmable before Kafka
//   committed it. A commit that fails there is aborted, and the pipeline forgets its records
//   at the loop's next EndStream (an abort on the worker never touches the pipeline).
// - Errors: an abortable or timed-out call aborts the transaction and returns kConnection: the
//   relay reconnects and the source transactions are streamed again from the last commit. The
//   loop does not wait for an abort: it forgets the transaction's records, and the next connect
//   attempt's worker completes the abort (in cancellable slices, with a commit that was still
//   running before it) before anything is streamed again, retrying it while the coordinator
//   does not answer (FinishPendingAbort); a relay that stops completes it first
//   (FinishBeforeExit), so read_committed consumers are not held back. A
//   record Kafka refused after it was sent fails the transaction's commit the same way
//   (RecordRefused asks for that replay). Fenced (kKafkaFenced) and fatal (kKafka) errors
//   stop the relay without confirming anything more.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "delivery/delivery_guarantee.h"
#include "delivery/kafka_transactions.h"
#include "delivery/offset_store.h"
#include "delivery/transaction_boundary.h"
#include "delivery/transactional_producer.h"

namespace walrelay {

class ExactlyOnce final : public DeliveryGuarantee {
 public:
  // How long one call that waits for Kafka (initialising, committing, aborting, reading the
  // offsets topic) may take before it counts as failed.
  static constexpr std::chrono::milliseconds kTransactionCallTimeout{30000};
  // How often Tick looks whether a background commit has ended.
  static constexpr std::chrono::milliseconds kCommitCheck{2};
  // More fencings than this within kFencingWindow, each after this process committed in the
  // stream it held the slot for, mean another connector uses the same transactional.id: the
  // relay stops (exit 20).
  static constexpr size_t kFencingsAllowed = 10;
  static constexpr std::chrono::minutes kFencingWindow{10};

  // `transactions`: Kafka's transactional calls (MakeKafkaTransactions over the relay's
  // producer; a fake in unit tests).
  // What the offsets topic holds under the connector's key (OffsetStore::ReadLast); a fake in
  // unit tests.
  using StoredReader = std::function<Result<std::optional<SourceOffset>>()>;

  ExactlyOnce(const RelaySettings& settings, std::unique_ptr<KafkaTransactions> transactions,
              RelayCounters& counters, StoredReader read_stored = {});

  Status FinishLastStream() override;
  Result<std::optional<SourceOffset>> StoredPosition(const SourceIdentity& server,
                                                     bool slot_missing) override;
  Result<StoredReread> SlotTaken(const SourceIdentity& server) override;
  Status StreamStarts(const SourceIdentity& server, Lsn start, bool own_position_stored) override;
  void SlotHeldElsewhere() override;
  Status BeforeRecord(size_t bytes) override;
  void SourceBegan() override;
  Status SourceCommitted(const TxnCommit& commit, bool all_sent) override;
  // Commits the open Kafka transaction at `position` when it is due to be split.
  Status ChangeHandled(const InsideTransaction& position, bool all_sent) override;
  Status Tick(bool all_sent) override;
  std::optional<Clock::time_point> TickDeadline() const override;
  // A commit is due and waits for Kafka (see above).
  bool Holding() const override { return due_.has_value(); }
  Status EndStream(bool all_sent) override;
  Lsn Confirmable(Lsn acknowledged) const override;
  void ServerPosition(Lsn wal_end) override;
  // The position is committed with each Kafka transaction, and a tombstone would race it.
  void Confirmed(Lsn) override {}
  void ForgetPosition() override;
  // Completes an abort the stream left pending (bounded by kTransactionCallTimeout).
  Status FinishBeforeExit() override;
  // The record's transaction cannot commit: it is aborted and replayed, the record with it.
  Status RecordRefused(const std::string& reason) override;

 private:
  // Creates the offsets topic if missing and reads the position stored under the key.
  Result<std::optional<SourceOffset>> ReadStored();
  // What was read from the offsets topic: a position inside a transaction of this server and
  // slot is what Kafka holds of it.
  void AdoptStored(const std::optional<SourceOffset>& stored, const SourceIdentity& server);
  // Ends what is open (EndStream without the producers' renewal), without waiting for Kafka:
  // whole source transactions are left committing (FinishStreamEnd), the rest is aborted.
  Status EndKafkaTransaction(bool all_sent);
  // Commits what the last stream left due and waits for the commit running; on a connect
  // attempt's worker (FinishLastStream) or at the stop (FinishBeforeExit). Failed, the
  // transaction is aborted (FinishPendingAbort completes that).
  Status FinishStreamEnd();
  // New producers, not initialised (KafkaTransactions::Renew).
  Status RenewProducers();
  // Another process initialised the transactional ids: what was open is dropped, and the
  // producers are replaced before the next stream; kConnection, or kKafkaFenced when it
  // happens too often.
  Status Fenced(const TxnStatus& failure, const std::string& operation);
  // Commits a transaction holding only the offset record at `start`: this connector streams
  // from the slot, and a later process that finds it missing must not create it unasked.
  Status RecordStart(Lsn start);
  // Writes the offset record and makes the commit due: at the last source commit included, or
  // inside the current source transaction at `inside`. It starts at once when Kafka has
  // nothing left to do first (CommitWhenReady).
  Status Commit(std::optional<InsideTransaction> inside = std::nullopt);
  // Starts the due commit once the commit before it succeeded and Kafka acknowledged every
  // record of its transaction; without `wait` it returns, leaving it due, when either is still
  // running; with `wait` it waits for them on the calling thread (the end of a stream, and the
  // rare record arriving while a commit is due).
  Status CommitWhenReady(bool wait);
  // Ends a background commit (waiting for it, or only when it has ended): on success its last
  // source commit, and what became confirmable behind it, become confirmable.
  Status SettleCommit(bool wait);
  // Waits for the running commit (pending_ is set) and ends it; on success what it holds, and
  // what waited behind it, become confirmable.
  TxnStatus FinishPendingCommit();
  // `position` needs nothing more from Kafka: confirmable now, or once the running commit
  // succeeded.
  void NothingPendingUpTo(Lsn position);
  Status Abort(const std::string& why);
  // The pipeline forgets the records handed to Kafka (DiscardRecords): at once on the loop, at
  // the loop's next EndStream when on the worker (discard_on_loop_).
  void ForgetSentRecords();
  // Completes an abort that the loop left to the next connect attempt (or that timed out):
  // the commit still running before it is ended first; kConnection while the coordinator does
  // not answer or the attempt is cancelled, and when the producers turn out fenced (they are
  // replaced at the next EndStream).
  Status FinishPendingAbort();
  // A failed transactional call: abort and kConnection for abortable and retriable errors,
  // the error itself (fenced, fatal) otherwise.
  Status Failed(const TxnStatus& failure, const std::string& operation);
  void Committed(Lsn position);

  std::unique_ptr<KafkaTransactions> txn_;
  RelayCounters& counters_;
  const std::string transactional_id_;
  const std::string slot_;
  const ExactlyOnceSettings options_;
  const OffsetStorageSettings storage_;
  OffsetStore offsets_;
  StoredReader read_stored_;  // empty: offsets_
  TransactionBoundary boundary_;
  bool initialised_ = false;
  // The producers must be replaced before they are initialised again (fenced, or an Init that
  // failed half-way). Set on either thread between streams, read on the loop.
  bool renew_needed_ = false;
  // committed_ is the newest position Kafka holds for this slot on server_: this process
  // initialised the transactional ids and started a stream since.
  bool own_current_ = false;
  std::deque<Clock::time_point> fencings_;  // within kFencingWindow, counted ones only
  bool committed_in_stream_ = false;        // a Kafka transaction committed since StreamStarts
  int32_t offsets_partitions_ = 1;
  SourceIdentity server_;
  bool kafka_open_ = false;
  bool source_open_ = false;
  std::optional<TxnCommit> last_included_;  // the newest source commit in the open transaction
  struct PendingCommit {
    Lsn position;                             // its offset record's commit LSN
    std::string upto;                         // "LSN ...", for messages
    std::optional<InsideTransaction> inside;  // committed inside a source transaction there
  };
  // The end of the newest source transaction streamed (or the stream's start): where a split
  // source transaction's stream starts again.
  Lsn last_source_commit_;
  // Kafka holds the split source transaction up to here (this process committed it, or read
  // it from the offsets topic), until a position at or past the transaction's end is
  // committed: every stream until then replays it, and skips this much of it.
  std::optional<InsideTransaction> committed_inside_;
  std::optional<Lsn> split_end_;          // that transaction's end, once it was streamed
  std::optional<PendingCommit> pending_;  // the transaction committing in the background
  // A commit whose offset record is sent and which waits for Kafka before it starts
  // (Holding). The transaction it ends is still open (kafka_open_). Loop thread only: the end
  // of a stream (EndStream) starts it before a connect attempt runs.
  struct DueCommit {
    PendingCommit commit;
    Clock::time_point since;  // when it became due, for the boundary's Stretch
  };
  std::optional<DueCommit> due_;
  std::optional<Lsn> after_pending_;  // confirmable once pending_ committed
  // An abort is left to the next connect attempt: set on the loop (or the worker, when one
  // timed out there), cleared on the worker or at the relay's stop.
  bool abort_pending_ = false;
  // True while a connect attempt's worker ends what the last stream left (FinishLastStream): an
  // abort there leaves forgetting the records to the loop (discard_on_loop_), their owner.
  bool on_worker_ = false;
  struct OnWorker {
    explicit OnWorker(bool& flag) : flag_(flag) { flag_ = true; }
    ~OnWorker() { flag_ = false; }
    OnWorker(const OnWorker&) = delete;
    OnWorker& operator=(const OnWorker&) = delete;
    bool& flag_;
  };
  // An abort on the worker threw records away: the loop's next EndStream (or the stop)
  // forgets them in the pipeline. Set on the worker, read on the loop once the attempt ended.
  bool discard_on_loop_ = false;
  // Read by the loop thread while the connector's worker may set it in StreamStarts.
  std::atomic<uint64_t> committed_{0};
};

}  // namespace walrelay
