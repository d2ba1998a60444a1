#include "delivery/exactly_once.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "delivery/at_least_once.h"
#include "delivery/producer.h"
#include "delivery/source_offsets.h"

namespace walrelay {
namespace {

// The offsets topic is read by a consumer: the producer-only transactional.id stays out.
std::map<std::string, std::string> ConsumerProperties(std::map<std::string, std::string> kafka) {
  kafka.erase("transactional.id");
  return kafka;
}

}  // namespace

Result<std::unique_ptr<DeliveryGuarantee>> MakeDeliveryGuarantee(const RelaySettings& settings,
                                                                 KafkaOutput& output,
                                                                 RelayCounters& counters) {
  if (!settings.exactly_once.enabled()) {
    auto at_least_once = AtLeastOnce::Create(settings, counters);
    if (!at_least_once.ok()) return at_least_once.status();
    return std::unique_ptr<DeliveryGuarantee>(std::move(at_least_once).value());
  }
  return std::unique_ptr<DeliveryGuarantee>(
      std::make_unique<ExactlyOnce>(settings, MakeKafkaTransactions(output), counters));
}

ExactlyOnce::ExactlyOnce(const RelaySettings& settings,
                         std::unique_ptr<KafkaTransactions> transactions, RelayCounters& counters,
                         StoredReader read_stored)
    : txn_(std::move(transactions)),
      counters_(counters),
      transactional_id_(settings.exactly_once.transactional_id),
      slot_(settings.slot_name),
      options_(settings.exactly_once),
      storage_(settings.offsets),
      offsets_(ConsumerProperties(settings.kafka), settings.offsets.topic,
               SourceOffsetKey(settings.name, settings.topic_prefix)),
      read_stored_(std::move(read_stored)),
      boundary_(settings.exactly_once.boundary) {}

Result<std::optional<SourceOffset>> ExactlyOnce::StoredPosition(const SourceIdentity& server,
                                                                bool slot_missing) {
  // Runs while the relay is not streaming: nothing is open (EndStream came first). What
  // librdkafka serves on this worker thread waits for the loop.
  KafkaProducer::DeferCallbacks on_loop_thread;
  // Back on the server this process streamed from, still initialised: what it committed
  // itself is the newest position (no other process can have committed since without
  // initialising the same transactional ids, which fences this one's producers and is found
  // at their next call), and is known even while a foreign transaction holds the topic's
  // readers.
  if (own_current_ && server_ == server) {
    SourceOffset own;
    own.lsn = own.lsn_commit = Lsn(committed_.load());
    if (committed_inside_) {
      own.inside = committed_inside_;
      own.lsn = committed_inside_->lsn;
      own.tx_id = committed_inside_->xid;
    }
    own.system_identifier = server.system_id;
    own.timeline = static_cast<uint32_t>(server.timeline);
    own.slot = slot_;
    return std::optional<SourceOffset>(own);
  }
  // Not initialised (a new process, a standby, new producers): a read now would wait out any
  // transaction a dead process of this connector left open on the topic, which initialising
  // aborts. With the slot present the read after it is taken decides (SlotTaken); whether a
  // missing slot may be created cannot wait for that.
  if (!initialised_ && !slot_missing) return std::optional<SourceOffset>();
  auto stored = ReadStored();
  if (stored.ok()) AdoptStored(*stored, server);
  return stored;
}

void ExactlyOnce::AdoptStored(const std::optional<SourceOffset>& stored,
                              const SourceIdentity& server) {
  committed_inside_.reset();
  split_end_.reset();
  // On another timeline (a promoted standby) the split transaction may never have committed,
  // and another may reuse its xid: its part in Kafka is then streamed again, not skipped.
  if (stored && stored->inside && stored->system_identifier == server.system_id &&
      stored->timeline == static_cast<uint32_t>(server.timeline) && stored->slot == slot_) {
    committed_inside_ = stored->inside;
  }
}

Result<std::optional<SourceOffset>> ExactlyOnce::ReadStored() {
  if (read_stored_) return read_stored_();
  auto partitions = offsets_.EnsureTopic(storage_.partitions, storage_.replication_factor,
                                         kTransactionCallTimeout);
  if (!partitions.ok()) {
    if (partitions.status().code() != ErrorCode::kKafka) return partitions.status();
    return Status::Connection("offsets topic '" + storage_.topic +
                              "': " + partitions.status().message());
  }
  offsets_partitions_ = *partitions;
  // Whatever server and slot it names: the start decision (relay/start_decision.h) tells.
  auto stored = offsets_.ReadLast(kTransactionCallTimeout);
  if (!stored.ok()) {
    if (stored.status().code() != ErrorCode::kKafka) return stored.status();
    return Status::Connection(stored.status().message());
  }
  return stored;
}

Result<StoredReread> ExactlyOnce::SlotTaken(const SourceIdentity& server) {
  KafkaProducer::DeferCallbacks on_loop_thread;
  if (initialised_) {
    if (!txn_->NeedsRenewal()) return StoredReread{};
    renew_needed_ = true;
    return Status::Connection("exactly-once: the Kafka producers of transactional.id '" +
                              transactional_id_ +
                              "' were fenced by another process of this connector; they are "
                              "replaced and initialised again before streaming");
  }
  TxnStatus init = txn_->Init(kTransactionCallTimeout);
  if (!init.ok()) {
    // One producer may be initialised and the other not: librdkafka initialises a producer
    // once, so the next attempt starts from new ones.
    renew_needed_ = true;
    if (init.kind == TxnErrorKind::kRetriable || init.kind == TxnErrorKind::kAbortable)
      return Status::Connection(init.status.message());
    return init.status;
  }
  initialised_ = true;
  spdlog::info("exactly-once: holding slot '{}', initialised transactions for transactional.id "
               "'{}' and '{}', its two producers taking turns (any older producer with these "
               "ids is fenced)",
               slot_, transactional_id_, SecondTransactionalId(transactional_id_));
  // Now that no other process can commit for this connector, what Kafka holds is final.
  auto stored = ReadStored();
  if (!stored.ok()) return stored.status();
  AdoptStored(*stored, server);
  return StoredReread{true, std::move(stored).value()};
}

Status ExactlyOnce::StreamStarts(const SourceIdentity& server, Lsn start,
                                 bool own_position_stored) {
  KafkaProducer::DeferCallbacks on_loop_thread;
  // EndStream committed or dropped what the last stream left open.
  if (due_ || kafka_open_) {
    return Status::Internal("exactly-once: a stream starts while the last one's Kafka "
                            "transaction is still open");
  }
  // On the same server and timeline what this process committed (or knew to need nothing from
  // Kafka) stays true, even after a fence. On another server or timeline the position may have
  // been capped (delivery/timeline.h): what this process committed before is no floor there.
  if (server_ == server) committed_.store(std::max(committed_.load(), start.value()));
  else committed_.store(start.value());
  server_ = server;
  last_source_commit_ = start;
  if (!own_position_stored) WALRELAY_RETURN_IF_ERROR(RecordStart(start));
  own_current_ = true;
  committed_in_stream_ = false;
  return Status::Ok();
}

Status ExactlyOnce::RecordStart(Lsn start) {
  SourceOffset offset;
  offset.lsn = offset.lsn_commit = start;
  offset.system_identifier = server_.system_id;
  offset.timeline = static_cast<uint32_t>(server_.timeline);
  offset.slot = slot_;
  const std::string operation = "recording the stream's start (LSN " + start.ToString() +
                                ") in offsets topic '" + storage_.topic + "'";
  TxnStatus done = txn_->Begin();
  if (done.ok()) done = txn_->SendOffset(offsets_.MakeRecord(offset, offsets_partitions_));
  if (done.ok()) done = txn_->StartCommit(kTransactionCallTimeout, operation);
  if (done.ok()) done = txn_->FinishCommit();
  if (done.ok()) return Status::Ok();
  if (done.kind == TxnErrorKind::kFenced) {
    // The producers were initialised before this process last held the slot, and another
    // process initialised the ids since: nothing of this stream was sent, so nothing is lost.
    // As after a fence in SlotTaken, the producers are replaced before the next attempt, which
    // finds the slot held (a standby) or takes it and initialises the new ones. Not counted
    // as a fencing: this process committed nothing in the stream.
    renew_needed_ = true;
    own_current_ = false;
    spdlog::warn("exactly-once: {} ({}): another process of this connector initialised its "
                 "transactions; this relay replaces its producers and connects again",
                 done.status.message(), operation);
    return Status::Connection("exactly-once: fenced while " + operation + "; connecting again");
  }
  if (done.kind != TxnErrorKind::kAbortable && done.kind != TxnErrorKind::kRetriable)
    return done.status.WithContext(operation);
  // Nothing else is in the transaction: dropping it loses nothing, and the next attempt
  // records the start again. An abort that does not finish now is finished by that attempt.
  TxnStatus aborted = txn_->Abort(kTransactionCallTimeout);
  if (!aborted.ok() && aborted.kind != TxnErrorKind::kRetriable)
    return aborted.status.WithContext(operation);
  abort_pending_ = !aborted.ok();
  return Status::Connection(operation + " failed: " + done.status.message());
}

Status ExactlyOnce::BeforeRecord(size_t bytes) {
  // The due commit holds exactly what its offset record names: it starts before this record.
  if (due_) WALRELAY_RETURN_IF_ERROR(CommitWhenReady(/*wait=*/true));
  if (!kafka_open_) {
    TxnStatus begun = txn_->Begin();
    if (!begun.ok()) return Failed(begun, "beginning a transaction");
    kafka_open_ = true;
  }
  boundary_.OnRecord(static_cast<int64_t>(bytes), Clock::now());
  return Status::Ok();
}

void ExactlyOnce::SourceBegan() {
  source_open_ = true;
  boundary_.OnSourceBegin();
}

Status ExactlyOnce::SourceCommitted(const TxnCommit& commit, bool all_sent) {
  if (due_) WALRELAY_RETURN_IF_ERROR(CommitWhenReady(/*wait=*/true));
  source_open_ = false;
  last_source_commit_ = commit.end_lsn;
  if (committed_inside_ && committed_inside_->xid == commit.xid) split_end_ = commit.end_lsn;
  if (!kafka_open_) {
    // Nothing of this source transaction waits in Kafka, nor of any before it but a commit
    // in progress (which may hold this one's first part, when it was split).
    NothingPendingUpTo(commit.end_lsn);
    boundary_.OnSourceCommit(Clock::now());
    boundary_.Reset();
    return Status::Ok();
  }
  last_included_ = commit;
  if (!boundary_.OnSourceCommit(Clock::now()) || !all_sent) return Status::Ok();
  return Commit();
}

Status ExactlyOnce::ChangeHandled(const InsideTransaction& position, bool all_sent) {
  // A change without records after a split that is due: the split stands where it was made.
  if (due_) return Status::Ok();
  if (!kafka_open_ || !source_open_ || !all_sent || !boundary_.ShouldSplit(Clock::now()))
    return Status::Ok();
  return Commit(position);
}

Status ExactlyOnce::Tick(bool all_sent) {
  if (abort_pending_) return Status::Ok();  // the stream ended; the next attempt finishes it
  WALRELAY_RETURN_IF_ERROR(SettleCommit(/*wait=*/false));
  if (due_) return CommitWhenReady(/*wait=*/false);
  if (!kafka_open_ || source_open_ || !last_included_ || !all_sent) return Status::Ok();
  if (!boundary_.ShouldCloseIdle(Clock::now())) return Status::Ok();
  return Commit();
}

std::optional<DeliveryGuarantee::Clock::time_point> ExactlyOnce::TickDeadline() const {
  if (abort_pending_) return std::nullopt;
  if (due_) return Clock::now() + kCommitCheck;
  if (pending_) {
    const auto check = Clock::now() + kCommitCheck;
    const auto idle = kafka_open_ ? boundary_.IdleDeadline() : std::nullopt;
    return idle ? std::min(*idle, check) : check;
  }
  if (!kafka_open_) return std::nullopt;
  return boundary_.IdleDeadline();
}

Status ExactlyOnce::EndStream(bool all_sent) {
  Status ended = EndKafkaTransaction(all_sent);
  if (renew_needed_ || (initialised_ && txn_->NeedsRenewal())) {
    WALRELAY_RETURN_IF_ERROR(RenewProducers());
  }
  return ended;
}

Status ExactlyOnce::EndKafkaTransaction(bool all_sent) {
  const bool inside_source = std::exchange(source_open_, false);
  // A commit the last connect attempt's worker ended failed: the records it aborted are
  // forgotten here, on the loop, which owns them.
  if (std::exchange(discard_on_loop_, false)) DiscardRecords();
  // An abort is under way: the next connect attempt's worker completes it (and the commit
  // still running before it), not the loop.
  if (abort_pending_) return Status::Ok();
  // The next stream replays from what committed, so what this one holds must be committed (or
  // have failed) before the next starts; the loop does not wait for that. A due commit (its
  // offset record sent) and the one running end on the next connect attempt's worker
  // (FinishStreamEnd), before it reads any position, or when the relay stops
  // (FinishBeforeExit).
  if (due_ || !kafka_open_) return Status::Ok();
  if (!inside_source && last_included_ && all_sent) return Commit();
  return Abort("the replication stream ended inside a source transaction");
}

Status ExactlyOnce::FinishLastStream() {
  // Runs while the relay is not streaming (EndStream came first); what librdkafka serves on
  // this worker thread waits for the loop.
  KafkaProducer::DeferCallbacks on_loop_thread;
  OnWorker ending(on_worker_);
  // What the last stream left committing is committed, and what it left to abort is aborted,
  // before anything is read or streamed again. A commit that fails here is aborted: by this
  // attempt, or by the next while the coordinator does not answer.
  Status ended = FinishStreamEnd();
  WALRELAY_RETURN_IF_ERROR(FinishPendingAbort());
  return ended;
}

Status ExactlyOnce::FinishStreamEnd() {
  if (due_) WALRELAY_RETURN_IF_ERROR(CommitWhenReady(/*wait=*/true));
  return SettleCommit(/*wait=*/true);
}

void ExactlyOnce::SlotHeldElsewhere() {
  // The process holding the slot initialised this connector's transactional ids when it took
  // it, fencing these producers: new ones are initialised when this process takes it back.
  if (initialised_ && !kafka_open_ && !pending_) {
    Status renewed = RenewProducers();
    if (!renewed.ok()) spdlog::warn("exactly-once: {}", renewed.message());
  }
}

Status ExactlyOnce::RenewProducers() {
  if (pending_) FinishPendingCommit();
  // What the old producers hold open is aborted by initialising the ids again: nothing of it
  // becomes visible, and the pipeline forgets its records (loop thread: EndStream).
  if (kafka_open_ || due_) DiscardRecords();
  TxnStatus renewed = txn_->Renew();
  initialised_ = false;
  renew_needed_ = false;
  own_current_ = false;
  abort_pending_ = false;  // initialising the ids again aborts what the old producers left open
  kafka_open_ = false;
  due_.reset();
  if (!renewed.ok()) return renewed.status.WithContext("replacing the Kafka producers");
  spdlog::info("exactly-once: new Kafka producers for transactional.id '{}' and '{}'; they are "
               "initialised once this relay holds slot '{}'",
               transactional_id_, SecondTransactionalId(transactional_id_), slot_);
  return Status::Ok();
}

Lsn ExactlyOnce::Confirmable(Lsn acknowledged) const {
  return std::min(acknowledged, Lsn(committed_.load()));
}

void ExactlyOnce::ServerPosition(Lsn wal_end) {
  // Everything streamed before it is committed in Kafka (or committing) or had no records.
  if (!kafka_open_ && !source_open_) NothingPendingUpTo(wal_end);
}

void ExactlyOnce::ForgetPosition() {
  if (!initialised_ || kafka_open_) return;
  Status done = SettleCommit(/*wait=*/true);
  if (done.ok()) {
    Record tombstone = offsets_.MakeRecord(SourceOffset{}, offsets_partitions_);
    tombstone.value.reset();
    TxnStatus removed = txn_->Begin();
    if (removed.ok()) removed = txn_->SendOffset(tombstone);
    if (removed.ok())
      removed = txn_->StartCommit(kTransactionCallTimeout,
                                  "committing the removal of this connector's position");
    if (removed.ok()) removed = txn_->FinishCommit();
    done = removed.status;
  }
  if (!done.ok())
    spdlog::warn("offsets topic '{}': cannot remove this connector's position after dropping the "
                 "slot: {}",
                 storage_.topic, done.message());
}

Status ExactlyOnce::RecordRefused(const std::string& reason) {
  ++counters_.failed["produce"];
  return Status::Connection(reason);
}

void ExactlyOnce::Committed(Lsn position) {
  if (position.value() > committed_.load()) committed_.store(position.value());
  // The split transaction's end is committed: no stream replays it any more.
  if (split_end_ && position >= *split_end_) {
    committed_inside_.reset();
    split_end_.reset();
  }
}

Status ExactlyOnce::Commit(std::optional<InsideTransaction> inside) {
  SourceOffset offset;
  if (inside) {
    // Every source transaction before this one is in Kafka or needed nothing from it: the
    // stream starts again at the last one's end, and skips what this commit holds.
    offset.lsn_commit = last_source_commit_;
    offset.lsn = inside->lsn;
    offset.tx_id = inside->xid;
    offset.inside = inside;
  } else {
    offset.lsn = last_included_->end_lsn;
    offset.lsn_commit = last_included_->end_lsn;
    offset.tx_id = last_included_->xid;
    offset.ts_usec = last_included_->commit_time_ms * 1000;
  }
  offset.system_identifier = server_.system_id;
  offset.timeline = static_cast<uint32_t>(server_.timeline);
  offset.slot = slot_;
  const std::string upto = inside
                               ? "LSN " + inside->lsn.ToString() + " inside source transaction " +
                                     std::to_string(inside->xid) + " (split: open for " +
                                     std::to_string(options_.boundary.split_after.count()) + " ms)"
                               : "LSN " + offset.lsn_commit.ToString();
  if (TxnStatus sent = txn_->SendOffset(offsets_.MakeRecord(offset, offsets_partitions_));
      !sent.ok()) {
    return Failed(sent, "writing the offset record up to " + upto + " to '" + storage_.topic + "'");
  }
  due_ = DueCommit{PendingCommit{offset.lsn_commit, upto, inside}, Clock::now()};
  return CommitWhenReady(/*wait=*/false);
}

Status ExactlyOnce::CommitWhenReady(bool wait) {
  if (!due_) return Status::Ok();
  if (!wait && ((pending_ && !txn_->CommitFinished()) || !txn_->Flushed())) return Status::Ok();
  // The transaction before it must be committed first: failed, it takes this one with it.
  WALRELAY_RETURN_IF_ERROR(SettleCommit(/*wait=*/true));
  const DueCommit due = *std::exchange(due_, std::nullopt);
  const std::optional<InsideTransaction>& inside = due.commit.inside;
  const std::string& upto = due.commit.upto;
  TxnStatus handed_over =
      txn_->StartCommit(kTransactionCallTimeout, "committing the transaction up to " + upto);
  if (!handed_over.ok()) return Failed(handed_over, "committing the transaction up to " + upto);
  kafka_open_ = false;
  pending_ = due.commit;
  if (inside) {
    ++counters_.kafka_transactions.split;
    spdlog::info("exactly-once: source transaction {} outgrew its Kafka transaction (open for "
                 "{} ms, transaction.boundary.split.ms): committed what it holds, up to {}; the "
                 "rest follows in the next",
                 inside->xid, options_.boundary.split_after.count(), upto);
  }
  // What the stream was held at this boundary, for the commit before and for the records.
  boundary_.Stretch(Clock::now() - due.since, boundary_.records());
  boundary_.Reset();
  last_included_.reset();
  return Status::Ok();
}

Status ExactlyOnce::SettleCommit(bool wait) {
  if (!pending_ || (!wait && !txn_->CommitFinished())) return Status::Ok();
  const std::string upto = pending_->upto;
  TxnStatus committed = FinishPendingCommit();
  if (!committed.ok()) return Failed(committed, "committing the transaction up to " + upto);
  return Status::Ok();
}

TxnStatus ExactlyOnce::FinishPendingCommit() {
  const PendingCommit pending = *std::exchange(pending_, std::nullopt);
  const std::optional<Lsn> behind = std::exchange(after_pending_, std::nullopt);
  TxnStatus committed = txn_->FinishCommit();
  if (!committed.ok()) return committed;
  Committed(pending.position);
  if (pending.inside) {
    committed_inside_ = pending.inside;
    split_end_.reset();
  }
  if (behind) Committed(*behind);
  committed_in_stream_ = true;
  ++counters_.kafka_transactions.committed;
  return committed;
}

void ExactlyOnce::NothingPendingUpTo(Lsn position) {
  if (!pending_) return Committed(position);
  if (!after_pending_ || *after_pending_ < position) after_pending_ = position;
}

Status ExactlyOnce::Abort(const std::string& why) {
  // No read_committed consumer sees the records handed to Kafka so far: the pipeline forgets
  // them before their delivery reports are served; on the worker (a commit the last stream
  // left failed there) at the next EndStream, on the loop, before anything is streamed again.
  ForgetSentRecords();
  ++counters_.kafka_transactions.aborted;
  kafka_open_ = false;
  due_.reset();
  last_included_.reset();
  boundary_.Reset();
  // The loop does not wait for the coordinator: the abort (and a commit still running before
  // it, which may succeed: then what it holds stays in Kafka and is not replayed) completes on
  // the next connect attempt's worker, before anything is streamed again (FinishPendingAbort),
  // or when the relay stops (FinishBeforeExit). Nothing of the transaction is visible or
  // confirmed meanwhile.
  abort_pending_ = true;
  spdlog::warn("exactly-once: aborting the Kafka transaction ({}); its source transactions are "
               "streamed again from LSN {} once the abort completed",
               why, Lsn(committed_.load()).ToString());
  return Status::Ok();
}

void ExactlyOnce::ForgetSentRecords() {
  if (on_worker_) discard_on_loop_ = true;
  else DiscardRecords();
}

Status ExactlyOnce::FinishPendingAbort() {
  if (!abort_pending_) return Status::Ok();
  if (pending_) {
    const std::string upto = pending_->upto;
    if (TxnStatus committed = FinishPendingCommit(); !committed.ok()) {
      // Its transaction is dropped with the abort below.
      spdlog::warn("exactly-once: committing the transaction up to {} failed before the abort: {}",
                   upto, committed.status.message());
    }
  }
  TxnStatus aborted = txn_->Abort(kTransactionCallTimeout);
  if (aborted.ok()) {
    abort_pending_ = false;
    spdlog::info("exactly-once: the Kafka transaction is aborted; its source transactions are "
                 "streamed again from LSN {}",
                 Lsn(committed_.load()).ToString());
    return Status::Ok();
  }
  if (aborted.kind == TxnErrorKind::kRetriable) {
    return Status::Connection(aborted.status.message() +
                              "; the abort is retried before streaming "
                              "again from LSN " +
                              Lsn(committed_.load()).ToString());
  }
  if (aborted.kind == TxnErrorKind::kFenced) {
    // The process that fenced these producers aborted what they held open. They are replaced
    // on the loop before the next attempt (EndStream), whose Init aborts anything left.
    abort_pending_ = false;
    renew_needed_ = true;
    own_current_ = false;
    spdlog::warn("exactly-once: {} (aborting the transaction): another process of this connector "
                 "initialised its transactions; this relay replaces its producers and connects "
                 "again",
                 aborted.status.message());
    return Status::Connection("exactly-once: fenced while aborting the transaction; connecting "
                              "again");
  }
  return Status(aborted.status.code(), aborted.status.message() +
                                           " (aborting the transaction); nothing after LSN " +
                                           Lsn(committed_.load()).ToString() + " is confirmed");
}

Status ExactlyOnce::FinishBeforeExit() {
  // Left open, the transaction would hold read_committed consumers of its partitions back
  // until the coordinator's timeout (kafka.transaction.timeout.ms).
  KafkaProducer::DeferCallbacks after_exit;
  if (std::exchange(discard_on_loop_, false)) DiscardRecords();
  if (!initialised_) return Status::Ok();
  // What the last stream left committing commits first, so the slot is confirmed up to it
  // before the relay exits; failed, it is aborted with the rest.
  Status ended = FinishStreamEnd();
  Status aborted = FinishPendingAbort();
  return ended.ok() ? aborted : ended;
}

Status ExactlyOnce::Failed(const TxnStatus& failure, const std::string& operation) {
  if (failure.kind == TxnErrorKind::kFenced) return Fenced(failure, operation);
  if (failure.kind == TxnErrorKind::kAbortable || failure.kind == TxnErrorKind::kRetriable) {
    WALRELAY_RETURN_IF_ERROR(Abort(operation + " failed: " + failure.status.message()));
    return Status::Connection("Kafka transaction aborted after " + operation +
                              " failed; replaying from LSN " + Lsn(committed_.load()).ToString());
  }
  kafka_open_ = false;
  due_.reset();
  return Status(failure.status.code(), failure.status.message() + "; nothing after LSN " +
                                           Lsn(committed_.load()).ToString() +
                                           " is confirmed by this process");
}

Status ExactlyOnce::Fenced(const TxnStatus& failure, const std::string& operation) {
  // The process that fenced this one aborted what these producers held open: nothing of it
  // becomes visible, and nothing after the last commit is confirmed.
  if (pending_) FinishPendingCommit();
  ForgetSentRecords();
  kafka_open_ = false;
  due_.reset();
  last_included_.reset();
  boundary_.Reset();
  renew_needed_ = true;
  own_current_ = false;
  // Fenced before its first commit of the stream, the process took the slot back with
  // producers another process fenced while this one did not hold it (it never saw the slot
  // held): expected, and not counted. Fenced after committing in this stream, another process
  // initialised the ids while this one held the slot.
  const auto now = Clock::now();
  if (std::exchange(committed_in_stream_, false)) fencings_.push_back(now);
  while (!fencings_.empty() && fencings_.front() < now - kFencingWindow) fencings_.pop_front();
  const std::string committed = Lsn(committed_.load()).ToString();
  if (fencings_.size() > kFencingsAllowed) {
    return Status(ErrorCode::kKafkaFenced,
                  failure.status.message() + " (" + operation + "); fenced " +
                      std::to_string(fencings_.size()) + " times in " +
                      std::to_string(kFencingWindow.count()) + " minutes while holding slot '" +
                      slot_ + "': another connector may use the same transactional.id '" +
                      transactional_id_ + "'. Nothing after LSN " + committed + " is confirmed");
  }
  spdlog::warn("exactly-once: {} ({}): another process of this connector initialised its "
               "transactions after taking slot '{}' over. Nothing after LSN {} is confirmed; "
               "this relay replaces its producers and connects again (as a standby while the "
               "other holds the slot)",
               failure.status.message(), operation, slot_, committed);
  return Status::Connection("exactly-once: fenced while " + operation + "; connecting again");
}

}  // namespace walrelay
