// consumer/claim_rules.h: the gate before a claimed record's handler and the dead-letter check,
// over every combination of claim age (around half the lease) and a poll being due.
#include <doctest/doctest.h>

#include "consumer/claim_rules.h"

namespace walrelay::consumer {
namespace {

using std::chrono::milliseconds;

TEST_CASE(
    "GateBeforeHandler: every claim age against half the lease, with and without a poll due") {
  const milliseconds lease(3000);
  struct Row {
    milliseconds age;
    bool poll_due;
    HandlerGate want;
  };
  const Row rows[] = {
      // A young claim runs; the renewal takes over at a third of the lease into the handler.
      {milliseconds(0), false, HandlerGate::kRun},
      {milliseconds(750), false, HandlerGate::kRun},
      {milliseconds(1499), false, HandlerGate::kRun},
      // Half the lease or more: another member may take the key over while the handler runs.
      {milliseconds(1500), false, HandlerGate::kClaimAged},
      {milliseconds(2999), false, HandlerGate::kClaimAged},
      {milliseconds(3000), false, HandlerGate::kClaimAged},
      {milliseconds(60000), false, HandlerGate::kClaimAged},
      // A clock that went backwards is not trusted.
      {milliseconds(-1), false, HandlerGate::kClaimAged},
      // A poll due wins over everything: the group must hear from the member first.
      {milliseconds(0), true, HandlerGate::kPollDue},
      {milliseconds(750), true, HandlerGate::kPollDue},
      {milliseconds(1499), true, HandlerGate::kPollDue},
      {milliseconds(1500), true, HandlerGate::kPollDue},
      {milliseconds(3000), true, HandlerGate::kPollDue},
      {milliseconds(60000), true, HandlerGate::kPollDue},
      {milliseconds(-1), true, HandlerGate::kPollDue},
  };
  for (const Row& r : rows) {
    INFO("age " << r.age.count() << " ms, poll due " << r.poll_due);
    CHECK(HandlerGateName(GateBeforeHandler(r.age, lease, r.poll_due)) ==
          std::string(HandlerGateName(r.want)));
  }
}

TEST_CASE("ClaimStillHeld: under half the lease only") {
  const milliseconds lease(30000);
  CHECK(ClaimStillHeld(milliseconds(0), lease));
  CHECK(ClaimStillHeld(milliseconds(14999), lease));
  CHECK_FALSE(ClaimStillHeld(milliseconds(15000), lease));
  CHECK_FALSE(ClaimStillHeld(milliseconds(30001), lease));
  CHECK_FALSE(ClaimStillHeld(milliseconds(-5), lease));
  // An odd lease: 1 ms of it is held at age 0 only.
  CHECK(ClaimStillHeld(milliseconds(0), milliseconds(1)));
  CHECK_FALSE(ClaimStillHeld(milliseconds(1), milliseconds(1)));
}

TEST_CASE("PollBudget: a third of max.poll.interval.ms, never zero") {
  CHECK(PollBudget(milliseconds(300000)) == milliseconds(100000));
  CHECK(PollBudget(milliseconds(7000)) == milliseconds(2333));
  CHECK(PollBudget(milliseconds(2)) == milliseconds(1));
  CHECK(PollBudget(milliseconds(0)) == milliseconds(1));
}

}  // namespace
}  // namespace walrelay::consumer
