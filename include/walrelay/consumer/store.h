// walrelay's idempotent consumer: the store interface. An IdempotencyStore claims a record's
// key for a consumer, runs its handler under that claim and records the outcome; PostgresStore,
// RedisStore and DynamoStore implement it (one header each), and so may an application.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "walrelay/consumer/handler.h"

namespace walrelay::consumer {

// The answer to a claim on a key.
struct Claim {
  enum class State {
    kAcquired,   // free or new: this owner may run the handler
    kTakenOver,  // another owner's lease had expired: this owner took it
    kDuplicate,  // COMPLETED before: skip; `result` holds the stored result
    kFailed,     // dead-lettered before: skip
    kConflict,   // another owner holds a live lease: try again after `retry_after`
  };
  State state = State::kAcquired;
  int attempts = 0;                          // runs started so far, this one included
  std::string result;                        // kDuplicate
  std::string last_error;                    // the latest recorded failure, if any
  std::string previous_owner;                // kTakenOver, kConflict
  std::chrono::milliseconds retry_after{0};  // kConflict: until the holder's lease ends
  int64_t fencing_token = 0;  // kAcquired, kTakenOver: this claim's token (Redis, DynamoDB)
  // The hash of the payload the key was first claimed with (PayloadHash); "" when the key is
  // new or was stored before hashes were kept.
  std::string payload_hash;
};

// SHA-256 of the record's value, in hex, with a null value distinct from an empty one: what the
// stores keep with a key to recognise the same key coming back with another payload.
std::string PayloadHash(const Message& message);

const char* ClaimStateName(Claim::State state);

// How a claimed run ended.
struct RunOutcome {
  enum class Kind {
    kCompleted,  // handler done and key COMPLETED (with the handler's writes, for Postgres)
    kFailed,     // handler failed; nothing of it was kept (Postgres) / key still claimed
    kLost,       // the claim was no longer ours when completing: re-claim to see who won
  };
  Kind kind = Kind::kCompleted;
  HandlerResult handler;  // what the handler returned
};

// One record of a batch handed to AcquireBatch / RunBatch, in poll order.
struct BatchRecord {
  const Message* message = nullptr;
  std::string key;
  Claim claim;  // RunBatch: the record's granted claim (attempts, fencing token)
};

// What ClaimAndRunBatch did with a batch.
struct BatchRun {
  // One claim per record, up to and including the first one `accept` refused (every record's
  // when none was refused).
  std::vector<Claim> claims;
  // The outcomes of the accepted, granted records before the refused one, in order, as
  // RunBatch returns them (a prefix; the last may be kFailed).
  std::vector<RunOutcome> outcomes;
  // Nothing was kept: the caller processes the accepted records one by one (Acquire, Run).
  bool one_by_one = false;
};

// Whether a batch may go on with this record's claim (false: the record goes alone).
using BatchAccept = std::function<bool(const BatchRecord&, const Claim&)>;

// Keeps, per (consumer name, key), whether a handler ran to completion. Implementations must
// make Acquire atomic against concurrent Acquire calls for the same key from any process.
//
// The consumer works a poll batch at a time through AcquireBatch and RunBatch; their default
// implementations call the per-record methods one after the other, so a store only has to
// override them to save round trips. Both keep the per-record guarantees exactly.
class IdempotencyStore {
 public:
  virtual ~IdempotencyStore() = default;
  // Claims `key` for `owner` for `lease`, counting an attempt when it is granted.
  virtual Result<Claim> Acquire(const std::string& consumer, const std::string& key,
                                const std::string& owner, std::chrono::milliseconds lease,
                                const Message& message) = 0;
  // Runs `handler` under the claim and, if it succeeds, marks the key COMPLETED with a
  // retention of `completed_ttl`.
  virtual Result<RunOutcome> Run(const std::string& consumer, const std::string& key,
                                 const std::string& owner, std::chrono::milliseconds completed_ttl,
                                 const Message& message, int attempt, const Handler& handler) = 0;
  // Gives up the claim after a failed run (the key stays PENDING, attempts kept).
  virtual Status Release(const std::string& consumer, const std::string& key,
                         const std::string& owner, const std::string& error) = 0;
  // Marks the key FAILED (dead-lettered) with a retention of `failed_ttl`, if it is still
  // `owner`'s claim with `fencing_token` (0: the owner alone is checked) or no longer exists.
  // False when the key was left alone: another claim holds it, or it is COMPLETED; the failure
  // of a claim that was taken over is dropped like the claim.
  virtual Result<bool> MarkFailed(const std::string& consumer, const std::string& key,
                                  const std::string& owner, int64_t fencing_token,
                                  const std::string& error,
                                  std::chrono::milliseconds failed_ttl) = 0;
  // Deletes up to `batch_size` expired keys; returns how many. Stores whose keys expire on
  // their own return 0.
  virtual Result<int64_t> CleanupBatch(int batch_size) = 0;

  // Claims every record's key (distinct keys, in order): one Claim per record, each the answer
  // Acquire would have given. An error means no claim is known; the caller claims again.
  virtual Result<std::vector<Claim>> AcquireBatch(const std::string& consumer,
                                                  const std::vector<BatchRecord>& records,
                                                  const std::string& owner,
                                                  std::chrono::milliseconds lease);
  // Runs the handler for the records (all claimed by `owner`) in order and records each
  // outcome. Returns the outcomes of a prefix: every entry but the last is kCompleted or kLost,
  // the last may be kFailed, and the run stops there. Records past the prefix were not run
  // (or were undone): their claims are given back with the attempt uncounted. An empty result
  // asks the caller to process the records one by one (Acquire and Run), which it must do.
  // An error means the outcome of every record is unknown; the caller claims them again.
  virtual Result<std::vector<RunOutcome>> RunBatch(const std::string& consumer,
                                                   const std::vector<BatchRecord>& records,
                                                   const std::string& owner,
                                                   std::chrono::milliseconds completed_ttl,
                                                   const Handler& handler);
  // Gives back a claim that no handler used, uncounting its attempt. The default keeps the
  // claim: this owner's next Acquire takes it again, counting one attempt more.
  virtual Status Unclaim(const std::string& consumer, const std::string& key,
                         const std::string& owner);

  // Claims and runs a batch in one step: the records' keys are claimed, `accept` is asked
  // about each claim in order, and the handlers of the accepted, granted records before the
  // first refused one are run and their outcomes recorded, with RunBatch's guarantees. The
  // claims of records after the refused one are given back uncounted. The default is
  // AcquireBatch then RunBatch, whose claims are durable before any handler runs (a crash
  // inside a handler leaves its attempt counted); a store may override it to claim and run
  // in one transaction.
  virtual Result<BatchRun> ClaimAndRunBatch(const std::string& consumer,
                                            const std::vector<BatchRecord>& records,
                                            const std::string& owner,
                                            std::chrono::milliseconds lease,
                                            std::chrono::milliseconds completed_ttl,
                                            const BatchAccept& accept, const Handler& handler);
};

// Deletes expired keys in batches of `batch_size` until none is left; returns the total.
Result<int64_t> Cleanup(IdempotencyStore& store, int batch_size);

}  // namespace walrelay::consumer
