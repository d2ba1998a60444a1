// The consumer's claim rules; see claim_rules.h.
#include "consumer/claim_rules.h"

#include <algorithm>

namespace walrelay::consumer {

bool ClaimStillHeld(std::chrono::milliseconds claim_age, std::chrono::milliseconds lease) {
  // Half the lease, not all of it: what follows (a handler until its first renewal at a third
  // of the lease, a dead letter until Kafka acknowledges it) must also fit before the end.
  return claim_age.count() >= 0 && claim_age * 2 < lease;
}

HandlerGate GateBeforeHandler(std::chrono::milliseconds claim_age, std::chrono::milliseconds lease,
                              bool poll_due) {
  // Polling comes first: a member the group evicted loses its partitions whatever its claims.
  if (poll_due) return HandlerGate::kPollDue;
  if (!ClaimStillHeld(claim_age, lease)) return HandlerGate::kClaimAged;
  return HandlerGate::kRun;
}

std::chrono::milliseconds PollBudget(std::chrono::milliseconds max_poll_interval) {
  return std::max(max_poll_interval / 3, std::chrono::milliseconds(1));
}

const char* HandlerGateName(HandlerGate gate) {
  switch (gate) {
    case HandlerGate::kRun: return "run";
    case HandlerGate::kClaimAged: return "claim aged";
    case HandlerGate::kPollDue: return "poll due";
  }
  return "?";
}

}  // namespace walrelay::consumer
