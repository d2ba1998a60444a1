// Consumer: the poll loop. A poll batch (up to max_batch records) at a time, in poll order, so
// in partition order:
//   keys -> claims for the batch (AcquireBatch) -> handlers and outcomes (RunBatch) ->
//   on_processed per record -> offsets stored, committed after the batch (commit_interval 0)
//   or every commit_interval, and before partitions are given up (consumer/offset_commits.h).
// An offset is committed only after the store recorded the outcome of its record and of every
// record before it, so a crash anywhere before it means a redelivery, which the store
// recognises. A record that cannot go through the batch path (its key is unusable, held by
// another owner, out of attempts, or its handler failed) is processed alone, as it always was,
// and the batch resumes after it: a record's outcome is never recorded before an earlier
// record's.
//
// Retries and waits for a key held elsewhere happen in place, with the record's partition held
// back; meanwhile the consumer keeps polling with its partitions paused (records that still
// arrive are kept for later), so max.poll.interval.ms never evicts it for waiting.ms.
#include "walrelay/consumer/consumer.h"

#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <set>

#include "consumer/claim_rules.h"
#include "consumer/internal.h"
#include "consumer/kafka_handles.h"
#include "consumer/offset_commits.h"
#include "consumer/record_rules.h"

namespace walrelay::consumer {
namespace {

using Clock = std::chrono::steady_clock;

// Headers the dead-letter record carries on top of the original ones.
constexpr const char* kDlqPrefix = "__walrelay.consumer.";

// The error class of a handler the consumer did not start (HandlerGate): the store sees a
// failed run, gives back the batch's later claims, and the consumer claims the record again.
constexpr const char* kNotStarted = "walrelay.not-started";

bool NotStarted(const HandlerResult& h) {
  return h.kind == HandlerResult::Kind::kRetry && h.error_class == kNotStarted;
}

std::chrono::milliseconds Since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

// Consumer properties that would break the offset rule are refused rather than overridden
// silently.
constexpr const char* kForcedFalse[] = {"enable.auto.commit", "enable.auto.offset.store"};

// Properties the dead-letter producer shares with the consumer: how to reach and log in to
// the cluster. Consumer-only ones would make librdkafka warn on a producer.
bool SharedWithProducer(const std::string& key) {
  for (const char* prefix : {"security.", "sasl.", "ssl.", "socket.", "client.", "broker.",
                             "reconnect.", "metadata.", "api.version", "topic.metadata."})
    if (key.rfind(prefix, 0) == 0) return true;
  return false;
}

std::string MakeOwnerToken() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown");
  std::random_device rd;
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%08x%08x", rd(), rd());
  return std::string(host) + ":" + std::to_string(::getpid()) + ":" + suffix;
}

bool MatchesClass(const std::vector<std::string>& patterns, const std::string& error_class) {
  for (const auto& p : patterns) {
    if (!p.empty() && p.back() == '*') {
      if (error_class.rfind(p.substr(0, p.size() - 1), 0) == 0) return true;
    } else if (p == error_class) {
      return true;
    }
  }
  return false;
}

std::string Where(const Message& m) {
  return m.topic + "[" + std::to_string(m.partition) + "]@" + std::to_string(m.offset);
}

void StderrLog(LogLevel level, const std::string& line) {
  if (level == LogLevel::kWarn || level == LogLevel::kError)
    std::fprintf(stderr, "walrelay-consumer %s: %s\n", level == LogLevel::kWarn ? "warn" : "error",
                 line.c_str());
}

// Why a record goes to the dead-letter topic.
struct DeadLetterReason {
  std::string error_class;
  std::string message;
  int attempts = 0;
  int64_t fencing_token = 0;  // of the claim it went out under
};

// A polled record: the librdkafka message (for its offset), its copy, and the revocation
// epoch it was polled in (OffsetCommits::Stale).
struct Polled {
  KafkaMessagePtr raw;
  Message message;
  uint64_t epoch = 0;
};

// What a batch run already knows about a record processed alone afterwards.
struct Seed {
  std::optional<Claim> claim;     // granted or answered by AcquireBatch
  std::optional<RunOutcome> run;  // its handler's failed run in RunBatch
};

}  // namespace

void OnRebalance(rd_kafka_t*, rd_kafka_resp_err_t event,
                 rd_kafka_topic_partition_list_t* partitions, void* opaque) {
  static_cast<OffsetCommits*>(opaque)->Rebalance(event, partitions);
}

void OnOffsetCommit(rd_kafka_t*, rd_kafka_resp_err_t error,
                    rd_kafka_topic_partition_list_t* offsets, void* opaque) {
  static_cast<OffsetCommits*>(opaque)->Committed(error, offsets);
}

struct Consumer::Impl {
  ConsumerOptions options;
  IdempotencyStore* store = nullptr;
  Handler handler;
  std::string owner;
  // Declared before `consumer`, whose rebalance callback uses it until the handle is gone.
  std::unique_ptr<OffsetCommits> offsets;
  KafkaHandlePtr consumer;
  KafkaHandlePtr producer;

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  // Records polled while waiting inside another record, handled before polling again.
  std::deque<Polled> backlog;
  Status fatal;  // a fatal Kafka error seen while polling inside a wait
  // Partitions that had a batch claimed since offsets->epoch() was `fast_epoch`: their next
  // batches may claim and run in one step (ProcessBatch).
  std::set<std::pair<std::string, int32_t>> fast_partitions;
  uint64_t fast_epoch = 0;

  // When the call that made the latest claims left (Acquire, ClaimAndRunBatch): the age the
  // gate before each handler gives their claims (consumer/claim_rules.h).
  Clock::time_point claims_sent_at = Clock::now();
  // When this member last polled the group, and how long it may go without (PollBudget).
  Clock::time_point last_poll = Clock::now();
  std::chrono::milliseconds poll_budget{100000};
  // Why the latest handler the gate stopped was not started.
  HandlerGate last_gate = HandlerGate::kRun;
  // Handlers that returned Done whose COMPLETED mark is not known to be applied, by key: a
  // claim of the key granted again gets this result, and the mark is sent again, instead of a
  // second run. Only for stores whose handlers get no transaction (a PostgresStore run whose
  // mark did not commit was undone with it). Emptied after each poll batch.
  std::map<std::string, HandlerResult> done_unmarked;

  std::atomic<int64_t> completed{0}, duplicates{0}, dead_lettered{0}, retries{0}, conflicts{0},
      takeovers{0}, payload_mismatches{0}, claims{0}, not_started{0};
  // Handler durations: upper bounds in seconds, a count per bucket (not cumulative), the sum.
  static constexpr double kBuckets[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30};
  static constexpr size_t kBucketCount = sizeof(kBuckets) / sizeof(kBuckets[0]);
  std::atomic<int64_t> handler_buckets[kBucketCount + 1] = {};  // the last one: above all
  std::atomic<int64_t> handler_runs{0};
  std::atomic<int64_t> handler_micros{0};
  Clock::time_point next_metrics = Clock::now();

  void ObserveHandler(Clock::duration took) {
    const double seconds = std::chrono::duration<double>(took).count();
    size_t b = 0;
    while (b < kBucketCount && seconds > kBuckets[b]) ++b;
    ++handler_buckets[b];
    ++handler_runs;
    handler_micros += std::chrono::duration_cast<std::chrono::microseconds>(took).count();
  }

  void Log(LogLevel level, const std::string& line) const {
    if (options.log) options.log(level, line);
    else StderrLog(level, line);
  }

  // Waits `d` while polling the group with every partition paused, so the group does not
  // evict this member for not polling (max.poll.interval.ms); records that arrive anyway are
  // kept in `backlog`. False when Stop() was called or Kafka failed fatally.
  // It polls at least once, so Wait(0ms) tells the group this member is alive.
  bool Wait(std::chrono::milliseconds d) {
    const auto deadline = Clock::now() + d;
    offsets->Pause();
    while (!stop && fatal.ok()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      KafkaMessagePtr msg(rd_kafka_consumer_poll(
          consumer.get(), static_cast<int>(std::clamp<int64_t>(left.count(), 0, 50))));
      last_poll = Clock::now();
      if (msg) Take(std::move(msg), backlog);
      if (left.count() <= 0) break;
    }
    offsets->Resume();
    return !stop && fatal.ok();
  }

  // The gate before a claimed record's handler (consumer/claim_rules.h).
  HandlerGate Gate() const {
    return GateBeforeHandler(Since(claims_sent_at), options.lease, Since(last_poll) >= poll_budget);
  }

  // After a handler the gate did not start: its claim is given back uncounted, and the group
  // is polled when that was why. False when Stop() was called or Kafka failed fatally.
  bool AfterNotStarted(const std::string& key) {
    ++not_started;
    (void)store->Unclaim(options.name, key, owner);
    if (last_gate == HandlerGate::kPollDue) return Wait(std::chrono::milliseconds(0));
    return !stop && fatal.ok();
  }

  // Files a polled message into `into`; an error is logged, or kept in `fatal`.
  void Take(KafkaMessagePtr msg, std::deque<Polled>& into) {
    if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      char why[512];
      if (rd_kafka_fatal_error(consumer.get(), why, sizeof(why)) != 0) {
        fatal = Status::Kafka(std::string("fatal Kafka consumer error: ") + why);
        return;
      }
      // Unknown topics (not created yet), broker outages: librdkafka keeps trying.
      Log(LogLevel::kWarn, std::string("Kafka: ") + rd_kafka_message_errstr(msg.get()));
      return;
    }
    Polled p;
    p.message = MessageFromKafka(msg.get());
    p.epoch = offsets->epoch();
    p.raw = std::move(msg);
    into.push_back(std::move(p));
  }

  bool Stale(const Polled& p) const {
    return offsets->Stale(p.message.topic, p.message.partition, p.epoch);
  }

  std::chrono::milliseconds Backoff(int attempt) const {
    auto d = options.backoff_initial;
    for (int i = 1; i < attempt && d < options.backoff_max; ++i) d *= 2;
    return std::min(d, options.backoff_max);
  }

  Result<std::string> KeyOf(const Message& m) const {
    if (options.key_extractor) return options.key_extractor(m);
    const MessageHeader* h = m.FindHeader(options.key_header);
    if (h == nullptr) return Status::Precondition("no '" + options.key_header + "' header");
    if (!h->value || h->value->empty())
      return Status::Precondition("the '" + options.key_header + "' header is null or empty");
    return *h->value;
  }

  // Publishes the dead letter and waits for Kafka's acknowledgement.
  Status PublishDeadLetter(const Message& m, const std::string& key, const DeadLetterReason& why);

  // Handles one record to a final outcome, starting from what `seed` knows; nullopt when
  // Stop() interrupted it or its partition was revoked meanwhile.
  Result<std::optional<RecordOutcome>> Process(const Polled& p, Seed seed = {});

  // Handles a poll batch in order; stops early on Stop().
  Status ProcessBatch(std::deque<Polled>& batch);
  // The record is finished: observers, then its offset.
  void Finish(const Polled& p, const RecordOutcome& outcome) {
    done_unmarked.erase(outcome.idempotency_key);
    if (options.on_processed) options.on_processed(p.message, outcome);
    offsets->Finished(p.raw.get());
  }
  // The outcome of a claim that needs no run (kDuplicate, kFailed), counted.
  RecordOutcome Skipped(const std::string& key, const Claim& claim) {
    RecordOutcome o;
    o.idempotency_key = key;
    o.attempts = claim.attempts;
    if (claim.state == Claim::State::kDuplicate) {
      o.kind = RecordOutcome::Kind::kDuplicate;
      o.result = claim.result;
    } else {
      o.kind = RecordOutcome::Kind::kAlreadyFailed;
      o.error = claim.last_error;
    }
    ++duplicates;
    return o;
  }
  bool UsableKey(const Result<std::string>& key) const {
    return key.ok() && !key->empty() && key->size() <= 1024 && key->find('\0') == std::string::npos;
  }
};

Status Consumer::Impl::PublishDeadLetter(const Message& m, const std::string& key,
                                         const DeadLetterReason& why) {
  KafkaHeadersPtr headers(rd_kafka_headers_new(m.headers.size() + 11));
  for (const auto& h : m.headers)
    rd_kafka_header_add(headers.get(), h.key.data(), static_cast<ssize_t>(h.key.size()),
                        h.value ? h.value->data() : nullptr,
                        h.value ? static_cast<ssize_t>(h.value->size()) : 0);
  auto add = [&](const char* name, const std::string& value) {
    const std::string full = std::string(kDlqPrefix) + name;
    rd_kafka_header_add(headers.get(), full.data(), static_cast<ssize_t>(full.size()), value.data(),
                        static_cast<ssize_t>(value.size()));
  };
  add("name", options.name);
  add("key", key);
  add("error.class", why.error_class);
  add("error.message", why.message);
  add("attempts", std::to_string(why.attempts));
  add("original.topic", m.topic);
  add("original.partition", std::to_string(m.partition));
  add("original.offset", std::to_string(m.offset));
  add("owner", owner);
  add("fencing.token", std::to_string(why.fencing_token));

  DeliverySlot slot;
  // The macros cast their arguments without parentheses: pass plain variables.
  const void* key_data = m.key ? m.key->data() : nullptr;
  const size_t key_len = m.key ? m.key->size() : 0;
  void* value_data = m.value ? const_cast<char*>(m.value->data()) : nullptr;
  const size_t value_len = m.value ? m.value->size() : 0;
  // producev takes the headers only on success.
  const rd_kafka_resp_err_t err =
      rd_kafka_producev(producer.get(), RD_KAFKA_V_TOPIC(options.dead_letter_topic.c_str()),
                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key_data, key_len),
                        RD_KAFKA_V_VALUE(value_data, value_len), RD_KAFKA_V_HEADERS(headers.get()),
                        RD_KAFKA_V_OPAQUE(&slot), RD_KAFKA_V_END);
  const std::string what =
      "dead letter for " + Where(m) + " (key '" + key + "') to topic " + options.dead_letter_topic;
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
    return Status::Kafka("cannot produce the " + what + ": " + rd_kafka_err2str(err));
  headers.release();
  // message.timeout.ms bounds this; the slot is filled by the delivery report.
  while (!slot.done) rd_kafka_poll(producer.get(), 100);
  if (slot.error != RD_KAFKA_RESP_ERR_NO_ERROR)
    return Status::Kafka("Kafka refused the " + what + ": " + rd_kafka_err2str(slot.error));
  return Status::Ok();
}

Result<std::optional<RecordOutcome>> Consumer::Impl::Process(const Polled& p, Seed seed) {
  const Message& m = p.message;
  RecordOutcome outcome;
  auto key = KeyOf(m);
  if (!UsableKey(key)) {
    // Without a usable key there is nothing to deduplicate on: straight to the dead letters.
    const std::string why = !key.ok()      ? key.status().message()
                            : key->empty() ? "the key extractor returned an empty key"
                                           : "the key is longer than 1024 bytes or holds a NUL";
    DeadLetterReason reason{"InvalidIdempotencyKey", why, 0};
    WALRELAY_RETURN_IF_ERROR(PublishDeadLetter(m, key.ok() ? *key : "", reason));
    Log(LogLevel::kWarn, Where(m) + " dead-lettered: " + why);
    outcome.kind = RecordOutcome::Kind::kDeadLettered;
    outcome.error = reason.error_class + ": " + why;
    ++dead_lettered;
    return std::optional<RecordOutcome>(outcome);
  }
  outcome.idempotency_key = *key;
  const std::string ctx = Where(m) + " key '" + *key + "'";

  // Store calls that fail for lack of a connection are repeated until they get through.
  auto store_down = [&](const Status& st) {
    Log(LogLevel::kWarn, ctx + ": " + st.ToString() + "; retrying");
    return Wait(options.store_retry_backoff);
  };

  // A dead letter decided under a claim that aged before it could be published: it goes out
  // under the next claim this member is granted (without running the handler again), or is
  // dropped when the key turns out to be another member's to finish.
  std::optional<DeadLetterReason> decided;
  while (!stop) {
    // A partition revoked while this record waited: its new owner handles the record.
    if (Stale(p)) return std::optional<RecordOutcome>();
    const bool seeded = seed.claim.has_value();
    if (!seeded) claims_sent_at = Clock::now();
    auto claim = seeded ? Result<Claim>(*seed.claim)
                        : store->Acquire(options.name, *key, owner, options.lease, m);
    seed.claim.reset();
    if (!claim.ok()) {
      if (claim.status().code() != ErrorCode::kConnection) return claim.status().WithContext(ctx);
      if (!store_down(claim.status())) break;
      continue;
    }
    outcome.attempts = claim->attempts;
    if (!seeded &&
        (claim->state == Claim::State::kAcquired || claim->state == Claim::State::kTakenOver))
      ++claims;
    const ClaimVerdict verdict =
        DecideOnClaim({claim->state, claim->attempts, options.max_attempts,
                       !claim->payload_hash.empty() && claim->payload_hash != PayloadHash(m),
                       options.payload_mismatch, decided.has_value()});
    if (verdict == ClaimVerdict::kSkipMismatch || verdict == ClaimVerdict::kDeadLetterMismatch) {
      // The key was first claimed with another payload: not this record's work to skip.
      ++payload_mismatches;
      const bool granted =
          claim->state == Claim::State::kAcquired || claim->state == Claim::State::kTakenOver;
      if (granted) (void)store->Unclaim(options.name, *key, owner);
      const std::string why = "the key was first seen with another payload (sha256 " +
                              claim->payload_hash + ", this record's " + PayloadHash(m) + ")";
      if (verdict == ClaimVerdict::kSkipMismatch) {
        Log(LogLevel::kError, ctx + ": " + why + "; skipped as a duplicate");
        outcome.kind = claim->state == Claim::State::kFailed ? RecordOutcome::Kind::kAlreadyFailed
                                                             : RecordOutcome::Kind::kDuplicate;
        outcome.result = claim->result;
        ++duplicates;
        return std::optional<RecordOutcome>(outcome);
      }
      DeadLetterReason reason{"payload-mismatch", why, claim->attempts};
      WALRELAY_RETURN_IF_ERROR(PublishDeadLetter(m, *key, reason));
      Log(LogLevel::kError, ctx + ": " + why + "; dead-lettered to " + options.dead_letter_topic);
      outcome.kind = RecordOutcome::Kind::kDeadLettered;
      outcome.error = reason.error_class + ": " + why;
      ++dead_lettered;
      return std::optional<RecordOutcome>(outcome);
    }
    if (verdict == ClaimVerdict::kSkipDuplicate) {
      outcome.kind = RecordOutcome::Kind::kDuplicate;
      outcome.result = claim->result;
      ++duplicates;
      Log(LogLevel::kDebug, ctx + ": duplicate, already completed");
      return std::optional<RecordOutcome>(outcome);
    }
    if (verdict == ClaimVerdict::kSkipFailed) {
      outcome.kind = RecordOutcome::Kind::kAlreadyFailed;
      outcome.error = claim->last_error;
      ++duplicates;
      Log(LogLevel::kDebug, ctx + ": duplicate of a dead-lettered record");
      return std::optional<RecordOutcome>(outcome);
    }
    if (verdict == ClaimVerdict::kWait) {
      ++conflicts;
      const auto wait =
          std::clamp(claim->retry_after, options.backoff_initial, options.backoff_max);
      Log(LogLevel::kDebug, ctx + ": held by " + claim->previous_owner + ", asking again in " +
                                std::to_string(wait.count()) + " ms");
      if (!Wait(wait)) return std::optional<RecordOutcome>();
      continue;
    }
    // A claim granted to this member from here on.
    if (claim->state == Claim::State::kTakenOver && !seeded) {  // a batch's: counted there
      ++takeovers;
      Log(LogLevel::kWarn, ctx + ": took over from " + claim->previous_owner +
                               ", whose lease had ended (attempt " +
                               std::to_string(claim->attempts) + ")");
    }

    DeadLetterReason reason;
    if (verdict == ClaimVerdict::kDeadLetterDecided) {
      reason = *decided;
      decided.reset();
    } else if (verdict == ClaimVerdict::kDeadLetterExhausted) {
      reason = {"AttemptsExhausted",
                "no run succeeded in " + std::to_string(options.max_attempts) +
                    " attempts; last error: " +
                    (claim->last_error.empty() ? "(none recorded)" : claim->last_error),
                claim->attempts - 1};
    } else {  // ClaimVerdict::kRun
      auto run = seed.run ? Result<RunOutcome>(*seed.run)
                          : store->Run(options.name, *key, owner, options.completed_ttl, m,
                                       claim->attempts, handler);
      seed.run.reset();
      if (!run.ok()) {
        if (run.status().code() != ErrorCode::kConnection) return run.status().WithContext(ctx);
        if (!store_down(run.status())) break;
        continue;  // the claim is still ours; the next Acquire counts a new attempt
      }
      const HandlerResult& h = run->handler;
      const bool rejected = h.kind == HandlerResult::Kind::kReject;
      const bool non_retriable = MatchesClass(options.non_retriable_errors, h.error_class);
      const RunVerdict after = DecideAfterRun({run->kind, NotStarted(h), rejected, non_retriable,
                                               claim->attempts, options.max_attempts});
      if (after == RunVerdict::kCompleted) {
        outcome.kind = RecordOutcome::Kind::kCompleted;
        outcome.result = h.result;
        ++completed;
        return std::optional<RecordOutcome>(outcome);
      }
      if (after == RunVerdict::kClaimAgainLost) {
        Log(LogLevel::kWarn, ctx + ": the claim was taken over before the run completed; the "
                                   "lease is shorter than the handler's run");
        continue;
      }
      if (after == RunVerdict::kClaimAgainNotStarted) {
        // Claimed too slowly to be sure of the claim (a store answering in more than half
        // the lease), or the group is due a poll: claimed again.
        if (last_gate == HandlerGate::kClaimAged) Log(LogLevel::kWarn, ctx + ": " + h.message);
        if (!AfterNotStarted(*key)) break;
        if (last_gate == HandlerGate::kClaimAged && !Wait(options.store_retry_backoff)) break;
        continue;
      }
      const std::string error = h.error_class + ": " + h.message;
      if (after == RunVerdict::kRetry) {
        ++retries;
        const auto wait = Backoff(claim->attempts);
        Log(LogLevel::kWarn, ctx + ": attempt " + std::to_string(claim->attempts) + " of " +
                                 std::to_string(options.max_attempts) + " failed (" + error +
                                 "); retrying in " + std::to_string(wait.count()) + " ms");
        Status released = store->Release(options.name, *key, owner, error);
        if (!released.ok()) Log(LogLevel::kWarn, ctx + ": " + released.ToString());
        if (!Wait(wait)) return std::optional<RecordOutcome>();
        continue;
      }
      // RunVerdict::kDeadLetter
      const bool permanent = rejected || non_retriable;
      reason = {
          h.error_class,
          h.message + (permanent ? " (not retriable)"
                                 : " (after " + std::to_string(claim->attempts) + " attempts)"),
          claim->attempts};
    }

    const std::string error = reason.error_class + ": " + reason.message;
    // The dead letter and the FAILED mark only under a claim still this member's: a run that
    // outlived half its lease may have lost the key to another member, whose effect a replayed
    // dead letter would then repeat.
    if (!ClaimStillHeld(Since(claims_sent_at), options.lease)) {
      Log(LogLevel::kWarn, ctx + ": the claim aged before its dead letter went out (" + error +
                               "); claiming the key again first");
      (void)store->Release(options.name, *key, owner, error);
      decided = reason;
      continue;
    }
    reason.fencing_token = claim->fencing_token;
    WALRELAY_RETURN_IF_ERROR(PublishDeadLetter(m, *key, reason));
    while (true) {
      auto marked = store->MarkFailed(options.name, *key, owner, claim->fencing_token, error,
                                      options.failed_ttl);
      if (marked.ok()) {
        if (!*marked)
          Log(LogLevel::kError,
              ctx + ": the key passed to another claim while its dead letter (owner " + owner +
                  ", fencing token " + std::to_string(claim->fencing_token) +
                  ") was published; the key is left to that claim. Replay this dead letter "
                  "only if the key is FAILED in the store");
        break;
      }
      if (marked.status().code() != ErrorCode::kConnection) return marked.status().WithContext(ctx);
      // Not marked: a redelivery would dead-letter the record once more, nothing worse.
      if (!store_down(marked.status())) return std::optional<RecordOutcome>();
    }
    Log(LogLevel::kError, ctx + ": dead-lettered to " + options.dead_letter_topic + ": " + error);
    outcome.kind = RecordOutcome::Kind::kDeadLettered;
    outcome.error = error;
    ++dead_lettered;
    return std::optional<RecordOutcome>(outcome);
  }
  return std::optional<RecordOutcome>();
}

Status Consumer::Impl::ProcessBatch(std::deque<Polled>& batch) {
  // One record alone, as before batching; false when the batch must end here (Stop()).
  auto alone = [&](const Polled& p, Seed seed = {}) -> Result<bool> {
    auto outcome = Process(p, std::move(seed));
    if (!outcome.ok()) return outcome.status();
    if (*outcome) Finish(p, **outcome);
    return !stop && fatal.ok();
  };
  size_t i = 0;
  while (i < batch.size() && !stop && fatal.ok()) {
    if (Stale(batch[i])) {
      ++i;
      continue;
    }
    // The run: consecutive records with usable, distinct keys. A key seen twice ends it, so
    // its second record is claimed only after the first one's outcome is recorded.
    std::vector<BatchRecord> run;
    std::set<std::string> seen;
    for (size_t j = i; j < batch.size() && run.size() < options.max_batch; ++j) {
      if (Stale(batch[j])) break;
      auto key = KeyOf(batch[j].message);
      if (!UsableKey(key) || !seen.insert(*key).second) break;
      run.push_back(BatchRecord{&batch[j].message, *key, {}});
    }
    if (run.empty()) {  // an unusable key: dead-lettered alone
      auto go_on = alone(batch[i]);
      if (!go_on.ok()) return go_on.status();
      if (!*go_on) return Status::Ok();
      ++i;
      continue;
    }
    const std::string where =
        "batch of " + std::to_string(run.size()) + " from " + Where(batch[i].message);
    // The claims the batch path can run end at the first key held by another owner, out of
    // attempts, or first seen with another payload: that record goes alone, and the claims
    // after it are given back.
    auto accept = [this](const BatchRecord& r, const Claim& c) {
      return KeptInBatch({c.state, c.attempts, options.max_attempts,
                          !c.payload_hash.empty() && c.payload_hash != PayloadHash(*r.message),
                          options.payload_mismatch, false});
    };
    // A partition's first batch since it was assigned takes claims that are committed before
    // any handler runs (the store's two-step default), so a record whose handler crashed the
    // process has that attempt counted when it comes back; later batches claim and run in one
    // step where the store can.
    if (fast_epoch != offsets->epoch()) {
      fast_partitions.clear();
      fast_epoch = offsets->epoch();
    }
    bool warm = true;
    for (size_t j = 0; j < run.size() && warm; ++j)
      warm = fast_partitions.count({run[j].message->topic, run[j].message->partition}) > 0;
    claims_sent_at = Clock::now();
    auto done =
        warm ? store->ClaimAndRunBatch(options.name, run, owner, options.lease,
                                       options.completed_ttl, accept, handler)
             : store->IdempotencyStore::ClaimAndRunBatch(options.name, run, owner, options.lease,
                                                         options.completed_ttl, accept, handler);
    if (!done.ok()) {
      if (done.status().code() != ErrorCode::kConnection) return done.status().WithContext(where);
      // Every outcome unknown: claimed again, the store then tells what was recorded.
      Log(LogLevel::kWarn, where + ": " + done.status().ToString() + "; retrying");
      if (!Wait(options.store_retry_backoff)) return Status::Ok();
      continue;
    }
    for (const BatchRecord& r : run)
      fast_partitions.insert({r.message->topic, r.message->partition});
    const std::vector<Claim>& claims_of = done->claims;
    const size_t cut = claims_of.size() == run.size() && accept(run.back(), claims_of.back())
                           ? run.size()
                           : claims_of.size() - 1;
    for (size_t j = 0; j < claims_of.size(); ++j) {
      const Claim& c = claims_of[j];
      if (c.state == Claim::State::kAcquired || c.state == Claim::State::kTakenOver)
        ++this->claims;  // counted once: the record at the cut goes alone with this claim
      if (j >= cut) continue;
      run[j].claim = c;
      if (c.state == Claim::State::kTakenOver) {
        ++takeovers;
        Log(LogLevel::kWarn, Where(*run[j].message) + " key '" + run[j].key + "': took over from " +
                                 c.previous_owner + ", whose lease had ended (attempt " +
                                 std::to_string(c.attempts) + ")");
      }
    }
    const std::vector<RunOutcome>& outcomes = done->outcomes;
    if (done->one_by_one) {
      // The store asks for the records one by one (a transaction it could not keep).
      for (size_t j = 0; j < cut; ++j) {
        auto go_on = alone(batch[i + j]);
        if (!go_on.ok()) return go_on.status();
        if (!*go_on) return Status::Ok();
      }
      i += cut;
      continue;
    }
    // Outcomes in poll order; the batch resumes after a record that had to go alone.
    size_t next_run = 0;
    size_t j = 0;
    bool resume = false;
    bool reclaim = false;  // record j's handler was not started: it is claimed again
    for (; j < cut; ++j) {
      const Polled& p = batch[i + j];
      const Claim& c = run[j].claim;
      if (c.state == Claim::State::kDuplicate || c.state == Claim::State::kFailed) {
        Finish(p, Skipped(run[j].key, c));
        continue;
      }
      if (next_run >= outcomes.size()) break;  // not run: claimed again with the next batch
      const RunOutcome& o = outcomes[next_run++];
      if (o.kind == RunOutcome::Kind::kCompleted) {
        RecordOutcome done;
        done.kind = RecordOutcome::Kind::kCompleted;
        done.idempotency_key = run[j].key;
        done.attempts = c.attempts;
        done.result = o.handler.result;
        ++completed;
        Finish(p, done);
        continue;
      }
      if (o.kind == RunOutcome::Kind::kLost) {
        Log(LogLevel::kWarn, Where(p.message) + " key '" + run[j].key +
                                 "': the claim was taken over before the run completed; the "
                                 "lease is shorter than the handler's run");
        auto go_on = alone(p);  // claims again to see who won
        if (!go_on.ok()) return go_on.status();
        if (!*go_on) return Status::Ok();
        continue;
      }
      if (NotStarted(o.handler)) {
        // Its claim had aged behind the records before it, or the group is due a poll. The
        // first record of a batch goes alone (a claim of its own), so a store slower than
        // half the lease still gets through; the others are claimed with the next batch.
        if (!AfterNotStarted(run[j].key)) return Status::Ok();
        if (next_run == 1 && last_gate == HandlerGate::kClaimAged) {
          auto go_on = alone(p);
          if (!go_on.ok()) return go_on.status();
          if (!*go_on) return Status::Ok();
          ++j;
          resume = true;
        }
        reclaim = true;
        break;
      }
      // Failed: retried (or dead-lettered) alone, from this run's claim and failure.
      auto go_on = alone(p, Seed{c, o});
      if (!go_on.ok()) return go_on.status();
      if (!*go_on) return Status::Ok();
      ++j;
      resume = true;
      break;
    }
    i += j;
    if (resume || reclaim || j < cut) continue;
    if (cut < run.size()) {  // held elsewhere, or out of attempts: alone, from its claim
      auto go_on = alone(batch[i], Seed{claims_of[cut], std::nullopt});
      if (!go_on.ok()) return go_on.status();
      if (!*go_on) return Status::Ok();
      ++i;
    }
  }
  return Status::Ok();
}

Consumer::Consumer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Consumer::~Consumer() = default;

Result<std::unique_ptr<Consumer>> Consumer::Create(ConsumerOptions options, IdempotencyStore& store,
                                                   Handler handler) {
  if (options.name.empty()) return Status::Config("ConsumerOptions.name is empty");
  if (options.name.find(':') != std::string::npos)
    return Status::Config("ConsumerOptions.name '" + options.name + "' must not contain ':'");
  if (options.bootstrap_servers.empty())
    return Status::Config("ConsumerOptions.bootstrap_servers is empty");
  if (options.topics.empty()) return Status::Config("ConsumerOptions.topics is empty");
  if (!handler) return Status::Config("the handler is empty");
  if (options.key_header.empty() && !options.key_extractor)
    return Status::Config("ConsumerOptions.key_header is empty and no key_extractor is set");
  if (options.max_attempts < 1)
    return Status::Config("ConsumerOptions.max_attempts must be at least 1, got " +
                          std::to_string(options.max_attempts));
  if (options.backoff_initial.count() < 1 || options.backoff_max < options.backoff_initial)
    return Status::Config("ConsumerOptions.backoff_initial must be >= 1 ms and <= backoff_max");
  if (options.commit_interval.count() < 0)
    return Status::Config("ConsumerOptions.commit_interval must not be negative");
  if (options.metrics_hook && options.metrics_interval.count() < 1)
    return Status::Config("ConsumerOptions.metrics_interval must be positive");
  if (options.max_batch < 1 || options.max_batch > 10000)
    return Status::Config("ConsumerOptions.max_batch must be between 1 and 10000, got " +
                          std::to_string(options.max_batch));
  for (auto [name, value] :
       {std::pair{"lease", options.lease}, std::pair{"completed_ttl", options.completed_ttl},
        std::pair{"failed_ttl", options.failed_ttl},
        std::pair{"store_retry_backoff", options.store_retry_backoff}})
    if (value.count() < 1)
      return Status::Config(std::string("ConsumerOptions.") + name + " must be positive");
  if (options.group_id.empty()) options.group_id = options.name;
  if (options.dead_letter_topic.empty()) options.dead_letter_topic = options.name + ".dlq";
  for (const char* key : kForcedFalse) {
    auto it = options.kafka_properties.find(key);
    if (it != options.kafka_properties.end() && it->second != "false")
      return Status::Config(std::string("ConsumerOptions.kafka_properties.") + key +
                            " must be false: offsets are committed only after the store");
  }

  // Retries wait inside one poll; the whole series must end well before the group gives up
  // on this member.
  int64_t poll_interval_ms = 300000;
  if (auto it = options.kafka_properties.find("max.poll.interval.ms");
      it != options.kafka_properties.end())
    poll_interval_ms = std::atoll(it->second.c_str());
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::chrono::milliseconds worst{0};
  for (int n = 1; n < options.max_attempts; ++n) worst += impl->Backoff(n);
  if (worst.count() * 2 > poll_interval_ms)
    return Status::Config("ConsumerOptions: max_attempts " + std::to_string(options.max_attempts) +
                          " with backoff up to " + std::to_string(options.backoff_max.count()) +
                          " ms waits " + std::to_string(worst.count()) +
                          " ms per record, more than half of max.poll.interval.ms (" +
                          std::to_string(poll_interval_ms) + ")");

  std::map<std::string, std::string> consumer_conf = {
      {"bootstrap.servers", options.bootstrap_servers},
      {"group.id", options.group_id},
      {"client.id", "walrelay-consumer-" + options.name},
      {"auto.offset.reset", "earliest"},
      {"enable.partition.eof", "false"},
      // A rebalance moves only the partitions that change owner; the rest keep flowing.
      {"partition.assignment.strategy", "cooperative-sticky"},
  };
  for (const auto& [k, v] : options.kafka_properties) consumer_conf[k] = v;
  for (const char* key : kForcedFalse) consumer_conf[key] = "false";
  Impl* raw = impl.get();
  impl->offsets = std::make_unique<OffsetCommits>(
      options.commit_interval,
      [raw](LogLevel level, const std::string& line) { raw->Log(level, line); });
  auto consumer =
      MakeKafkaHandle(RD_KAFKA_CONSUMER, consumer_conf, "ConsumerOptions.kafka_properties.",
                      GroupCallbacks{OnRebalance, OnOffsetCommit, impl->offsets.get()});
  if (!consumer.ok()) return consumer.status();
  impl->offsets->Attach(consumer->get());
  rd_kafka_poll_set_consumer(consumer->get());

  std::map<std::string, std::string> producer_conf = {
      {"bootstrap.servers", options.bootstrap_servers},
      {"client.id", "walrelay-consumer-" + options.name + "-dlq"},
      {"enable.idempotence", "true"},
      {"acks", "all"},
      {"linger.ms", "0"},
      {"message.timeout.ms", "30000"},
  };
  for (const auto& [k, v] : options.kafka_properties)
    if (SharedWithProducer(k)) producer_conf[k] = v;
  auto producer =
      MakeKafkaHandle(RD_KAFKA_PRODUCER, producer_conf, "ConsumerOptions.kafka_properties.");
  if (!producer.ok()) return producer.status();

  impl->store = &store;
  // Every handler call is timed for the metrics, whichever store calls it.
  impl->poll_budget = PollBudget(std::chrono::milliseconds(poll_interval_ms));
  // Every store calls the handler through this, on Run()'s thread: an effect already done is
  // never repeated, a claim that may be gone never runs, and every call is timed.
  impl->handler = [raw, handler = std::move(handler)](HandlerContext& ctx) {
    const std::string& key = ctx.idempotency_key();
    if (auto done = raw->done_unmarked.find(key); done != raw->done_unmarked.end())
      return done->second;  // the effect happened: the store sends the mark again
    // What the handler sees of its claim starts at the claiming call's sending.
    if (ClaimLease* lease = ctx.claim_lease(); lease != nullptr)
      lease->HeldFrom(raw->claims_sent_at, raw->options.lease);
    if (const HandlerGate gate = raw->Gate(); gate != HandlerGate::kRun) {
      raw->last_gate = gate;
      return HandlerResult::Retry(
          kNotStarted, std::string("handler not started (") + HandlerGateName(gate) +
                           "): the claim left " +
                           std::to_string(Since(raw->claims_sent_at).count()) + " ms ago, lease " +
                           std::to_string(raw->options.lease.count()) + " ms; last poll " +
                           std::to_string(Since(raw->last_poll).count()) + " ms ago, budget " +
                           std::to_string(raw->poll_budget.count()) + " ms");
    }
    struct Timer {
      Impl* impl;
      Clock::time_point start = Clock::now();
      ~Timer() { impl->ObserveHandler(Clock::now() - start); }
    } timer{raw};
    HandlerResult h = handler(ctx);
    if (h.kind == HandlerResult::Kind::kDone && !ctx.has_connection()) raw->done_unmarked[key] = h;
    return h;
  };
  impl->owner = MakeOwnerToken();
  impl->consumer = std::move(consumer).value();
  impl->producer = std::move(producer).value();
  return std::unique_ptr<Consumer>(new Consumer(std::move(impl)));
}

Status Consumer::Run() {
  Impl& d = *impl_;
  KafkaPartitionListPtr topics(
      rd_kafka_topic_partition_list_new(static_cast<int>(d.options.topics.size())));
  for (const auto& t : d.options.topics)
    rd_kafka_topic_partition_list_add(topics.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
  if (rd_kafka_resp_err_t err = rd_kafka_subscribe(d.consumer.get(), topics.get()); err != 0)
    return Status::Kafka(std::string("cannot subscribe to the topics: ") + rd_kafka_err2str(err));
  d.Log(LogLevel::kInfo, "consumer " + d.options.name + " (group " + d.options.group_id +
                             ", owner " + d.owner + ") subscribed");

  Status result;
  while (!d.stop) {
    d.offsets->CommitIfDue();
    // The batch: what arrived while waiting inside earlier records, then what the consumer
    // queue holds now, up to max_batch; a blocking poll only when there is nothing.
    std::deque<Polled> batch;
    while (!d.backlog.empty() && batch.size() < d.options.max_batch) {
      batch.push_back(std::move(d.backlog.front()));
      d.backlog.pop_front();
    }
    if (batch.empty()) {
      KafkaMessagePtr msg(rd_kafka_consumer_poll(d.consumer.get(), 100));
      d.last_poll = Clock::now();
      if (msg) d.Take(std::move(msg), batch);
    }
    while (!batch.empty() && batch.size() < d.options.max_batch && d.fatal.ok()) {
      KafkaMessagePtr msg(rd_kafka_consumer_poll(d.consumer.get(), 0));
      d.last_poll = Clock::now();
      if (!msg) break;
      d.Take(std::move(msg), batch);
    }
    if (!d.fatal.ok()) {
      result = d.fatal;
      break;
    }
    if (batch.empty()) continue;
    // A record interrupted by Stop() is not committed, and is redelivered later.
    Status processed = d.ProcessBatch(batch);
    d.done_unmarked.clear();
    if (Status st = processed; !st.ok()) {
      result = st;
      break;
    }
    if (!d.fatal.ok()) {
      result = d.fatal;
      break;
    }
    d.offsets->BatchDone();
    if (d.options.metrics_hook && Clock::now() >= d.next_metrics) {
      d.next_metrics = Clock::now() + d.options.metrics_interval;
      d.options.metrics_hook(MetricsText());
    }
  }
  d.offsets->CommitNow("closing");
  rd_kafka_consumer_close(d.consumer.get());
  d.Log(LogLevel::kInfo, "consumer " + d.options.name + " stopped");
  return result;
}

void Consumer::Stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
}

ConsumerStats Consumer::stats() const {
  const Impl& d = *impl_;
  ConsumerStats s{d.completed, d.duplicates, d.dead_lettered,      d.retries,
                  d.conflicts, d.takeovers,  d.payload_mismatches, d.claims};
  s.handlers_not_started = d.not_started;
  s.handler_runs = d.handler_runs;
  s.handler_seconds = static_cast<double>(d.handler_micros.load()) / 1e6;
  return s;
}

std::string Consumer::MetricsText() const {
  const Impl& d = *impl_;
  std::string label = "consumer=\"";
  for (char c : d.options.name) {
    if (c == '\\' || c == '"') label += '\\';
    if (c == '\n') {
      label += "\\n";
      continue;
    }
    label += c;
  }
  label += "\"";
  std::string out;
  auto counter = [&](const char* name, const char* help, int64_t value) {
    out += std::string("# HELP walrelay_consumer_") + name + " " + help + "\n";
    out += std::string("# TYPE walrelay_consumer_") + name + " counter\n";
    out += std::string("walrelay_consumer_") + name + "{" + label + "} " + std::to_string(value) +
           "\n";
  };
  counter("claims_total", "Claims granted on idempotency keys.", d.claims);
  counter("completed_total", "Records whose handler ran to completion.", d.completed);
  counter("duplicates_total", "Records skipped because their key was done before.", d.duplicates);
  counter("conflicts_total", "Claims refused because another owner held the key.", d.conflicts);
  counter("takeovers_total", "Expired claims taken over.", d.takeovers);
  counter("payload_mismatches_total", "Keys that came back with another payload.",
          d.payload_mismatches);
  counter("retries_total", "Failed handler runs that were tried again.", d.retries);
  counter("handlers_not_started_total",
          "Claimed records whose handler was not started (the claim had aged, or a poll was "
          "due): claimed again.",
          d.not_started);
  counter("dead_letters_total", "Records sent to the dead-letter topic.", d.dead_lettered);
  out += "# HELP walrelay_consumer_handler_seconds Handler run durations.\n";
  out += "# TYPE walrelay_consumer_handler_seconds histogram\n";
  int64_t cumulative = 0;
  for (size_t b = 0; b <= Impl::kBucketCount; ++b) {
    cumulative += d.handler_buckets[b];
    char le[32];
    if (b < Impl::kBucketCount) std::snprintf(le, sizeof le, "%g", Impl::kBuckets[b]);
    else std::snprintf(le, sizeof le, "+Inf");
    out += "walrelay_consumer_handler_seconds_bucket{" + label + ",le=\"" + le + "\"} " +
           std::to_string(cumulative) + "\n";
  }
  char sum[64];
  std::snprintf(sum, sizeof sum, "%.6f", static_cast<double>(d.handler_micros.load()) / 1e6);
  out += "walrelay_consumer_handler_seconds_sum{" + label + "} " + sum + "\n";
  out += "walrelay_consumer_handler_seconds_count{" + label + "} " +
         std::to_string(d.handler_runs.load()) + "\n";
  return out;
}

const std::string& Consumer::owner() const { return impl_->owner; }

}  // namespace walrelay::consumer
