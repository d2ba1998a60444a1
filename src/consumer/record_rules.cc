#include "consumer/record_rules.h"

namespace walrelay::consumer {

ClaimVerdict DecideOnClaim(const ClaimFacts& f) {
  // Another payload under the same key is never this record's work to skip silently or to
  // run: the key's first record decided what the key means.
  if (f.payload_differs)
    return f.on_mismatch == PayloadMismatch::kSkip ? ClaimVerdict::kSkipMismatch
                                                   : ClaimVerdict::kDeadLetterMismatch;
  switch (f.state) {
    case Claim::State::kDuplicate: return ClaimVerdict::kSkipDuplicate;
    case Claim::State::kFailed: return ClaimVerdict::kSkipFailed;
    case Claim::State::kConflict: return ClaimVerdict::kWait;
    case Claim::State::kAcquired:
    case Claim::State::kTakenOver: break;
  }
  if (f.dead_letter_decided) return ClaimVerdict::kDeadLetterDecided;
  if (f.attempts > f.max_attempts) return ClaimVerdict::kDeadLetterExhausted;
  return ClaimVerdict::kRun;
}

bool KeptInBatch(const ClaimFacts& f) {
  const ClaimVerdict v = DecideOnClaim(f);
  return v == ClaimVerdict::kRun || v == ClaimVerdict::kSkipDuplicate ||
         v == ClaimVerdict::kSkipFailed;
}

RunVerdict DecideAfterRun(const RunFacts& f) {
  switch (f.kind) {
    case RunOutcome::Kind::kCompleted: return RunVerdict::kCompleted;
    case RunOutcome::Kind::kLost: return RunVerdict::kClaimAgainLost;
    case RunOutcome::Kind::kFailed: break;
  }
  if (f.not_started) return RunVerdict::kClaimAgainNotStarted;
  if (f.rejected || f.non_retriable_class) return RunVerdict::kDeadLetter;
  return f.attempts < f.max_attempts ? RunVerdict::kRetry : RunVerdict::kDeadLetter;
}

const char* ClaimVerdictName(ClaimVerdict v) {
  switch (v) {
    case ClaimVerdict::kSkipDuplicate: return "skip-duplicate";
    case ClaimVerdict::kSkipFailed: return "skip-failed";
    case ClaimVerdict::kSkipMismatch: return "skip-mismatch";
    case ClaimVerdict::kDeadLetterMismatch: return "dead-letter-mismatch";
    case ClaimVerdict::kWait: return "wait";
    case ClaimVerdict::kDeadLetterDecided: return "dead-letter-decided";
    case ClaimVerdict::kDeadLetterExhausted: return "dead-letter-exhausted";
    case ClaimVerdict::kRun: return "run";
  }
  return "?";
}

const char* RunVerdictName(RunVerdict v) {
  switch (v) {
    case RunVerdict::kCompleted: return "completed";
    case RunVerdict::kClaimAgainLost: return "claim-again-lost";
    case RunVerdict::kClaimAgainNotStarted: return "claim-again-not-started";
    case RunVerdict::kRetry: return "retry";
    case RunVerdict::kDeadLetter: return "dead-letter";
  }
  return "?";
}

}  // namespace walrelay::consumer
