// The consumer's rules about a claim it holds, as pure functions of what it knows (the loops
// in consumer.cc only carry out their verdicts; tests/unit/claim_rules_test.cc lists every
// combination).
//
// A claim is known to be this member's only by time: the store grants it for `lease`, and no
// other member can take it over before that has passed on the store's clock. The consumer
// measures a claim's age from the moment the call that made it left, which overstates the age
// and so errs on the safe side. While a handler runs its store renews the lease; before the
// handler starts nothing does, so a record claimed with the rest of its batch may have waited
// long enough behind slower records that another member, given the partition meanwhile, could
// take the key over while this handler runs.
#pragma once

#include <chrono>

namespace walrelay::consumer {

// What the consumer does with a claimed record whose handler is about to start.
enum class HandlerGate {
  kRun,        // the claim is young enough to be this member's until the renewal takes over
  kClaimAged,  // half the lease or more has gone: give the claim back and claim the key again
  kPollDue,    // the group must hear from this member first: give it back, poll, claim again
};

// The gate before a handler: `claim_age` since the claiming call left, the claims' `lease`,
// and whether the time this member may go without polling the group (well under
// max.poll.interval.ms) is spent.
HandlerGate GateBeforeHandler(std::chrono::milliseconds claim_age, std::chrono::milliseconds lease,
                              bool poll_due);

// Whether a claim of this age may still be assumed held, so that an irreversible step taken on
// its behalf (publishing a dead letter) cannot race a member that took the key over.
bool ClaimStillHeld(std::chrono::milliseconds claim_age, std::chrono::milliseconds lease);

// The poll budget for a max.poll.interval.ms of `max_poll_interval`: a third of it, so a batch
// that stops starting handlers once it is spent still polls, with its slowest handler, well
// before the group gives up on the member.
std::chrono::milliseconds PollBudget(std::chrono::milliseconds max_poll_interval);

const char* HandlerGateName(HandlerGate gate);

}  // namespace walrelay::consumer
