// The consumer's decisions about one record, as pure functions of what it knows: what to do
// once the store answered a claim, and what to do once the handler's run came back. The loops
// in consumer.cc (Process, ProcessBatch) only carry out these verdicts, and
// tests/unit/record_rules_test.cc checks every combination of their facts.
//
// What can repeat or lose an effect here: running a handler on a key another member holds or
// finished (never: a run needs a granted claim, the same payload and attempts left), retrying
// what retrying cannot fix (a rejection or a non-retriable error class goes to the dead
// letters at once), and retrying forever (at most max_attempts runs, counted in the store).
#pragma once

#include "walrelay/consumer/consumer.h"

namespace walrelay::consumer {

// What the store's answer to a claim tells the consumer to do with the record.
enum class ClaimVerdict {
  kSkipDuplicate,        // completed before: the record is a duplicate
  kSkipFailed,           // dead-lettered before: the record is a duplicate of that
  kSkipMismatch,         // first seen with another payload, and the policy skips it
  kDeadLetterMismatch,   // first seen with another payload: dead-lettered, the key left alone
  kWait,                 // another owner's live claim: wait (polling), then claim again
  kDeadLetterDecided,    // a dead letter decided under an earlier claim goes out under this one
  kDeadLetterExhausted,  // earlier runs (some may have crashed the process) used the attempts
  kRun,                  // this member's claim: run the handler
};

// What the consumer knows when a claim's answer comes back.
struct ClaimFacts {
  Claim::State state = Claim::State::kAcquired;
  int attempts = 0;      // the store's count, this claim's run included
  int max_attempts = 1;  // ConsumerOptions::max_attempts
  // The key's stored payload hash is set and is not this record's.
  bool payload_differs = false;
  PayloadMismatch on_mismatch = PayloadMismatch::kDeadLetter;
  // An earlier claim of this record decided a dead letter it could not publish in time.
  bool dead_letter_decided = false;
};

// The verdict on a claim's answer.
ClaimVerdict DecideOnClaim(const ClaimFacts& facts);

// Whether a batch may keep a record with this claim in its run (run it, or finish it as a
// duplicate): anything else ends the run there and the record goes alone (Process).
bool KeptInBatch(const ClaimFacts& facts);

// What the outcome of a handler's run tells the consumer to do.
enum class RunVerdict {
  kCompleted,             // done and marked: finished
  kClaimAgainLost,        // the claim was taken over before the mark: claim again to see who won
  kClaimAgainNotStarted,  // the gate did not start the handler: its claim is given back
  kRetry,                 // a retriable failure with attempts left: released, backed off, again
  kDeadLetter,            // rejected, non-retriable, or the last attempt failed
};

// What the consumer knows when a run comes back.
struct RunFacts {
  RunOutcome::Kind kind = RunOutcome::Kind::kCompleted;
  // The handler was not started by the consumer's gate (consumer/claim_rules.h).
  bool not_started = false;
  bool rejected = false;             // the handler returned Reject
  bool non_retriable_class = false;  // its error class matches non_retriable_errors
  int attempts = 0;                  // the claim's attempts, this run included
  int max_attempts = 1;
};

// The verdict on a run.
RunVerdict DecideAfterRun(const RunFacts& facts);

const char* ClaimVerdictName(ClaimVerdict verdict);
const char* RunVerdictName(RunVerdict verdict);

}  // namespace walrelay::consumer
