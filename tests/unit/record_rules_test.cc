// consumer/record_rules.h: every combination of what the consumer knows about a claim's answer
// and a run's outcome, checked against a decision table (the first row that matches a
// combination gives its verdict; every row must match some combination).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "consumer/record_rules.h"

namespace walrelay::consumer {
namespace {

using State = Claim::State;
// A table cell: a value, or any value (nullopt).
template <typename T>
using Cell = std::optional<T>;
constexpr std::nullopt_t kAny = std::nullopt;

// Attempts relative to max_attempts: one below, equal, one above.
enum class Attempts { kBelow, kAtMax, kAbove };

TEST_CASE("DecideOnClaim: every state, payload, policy, decided dead letter and attempt count") {
  struct Row {
    Cell<State> state;
    Cell<bool> payload_differs;
    Cell<PayloadMismatch> policy;
    Cell<bool> decided;
    Cell<Attempts> attempts;
    ClaimVerdict want;
  };
  const auto skip = PayloadMismatch::kSkip;
  const auto dead = PayloadMismatch::kDeadLetter;
  const std::vector<Row> table = {
      // Another payload decides first, whatever the key's state: never run, never a silent skip.
      {kAny, true, skip, kAny, kAny, ClaimVerdict::kSkipMismatch},
      {kAny, true, dead, kAny, kAny, ClaimVerdict::kDeadLetterMismatch},
      // Finished keys are duplicates, even out of attempts or with a decided dead letter.
      {State::kDuplicate, false, kAny, kAny, kAny, ClaimVerdict::kSkipDuplicate},
      {State::kFailed, false, kAny, kAny, kAny, ClaimVerdict::kSkipFailed},
      // Another owner's live claim: wait, never run.
      {State::kConflict, false, kAny, kAny, kAny, ClaimVerdict::kWait},
      // Granted claims (acquired or taken over alike).
      {kAny, false, kAny, true, kAny, ClaimVerdict::kDeadLetterDecided},
      {kAny, false, kAny, false, Attempts::kAbove, ClaimVerdict::kDeadLetterExhausted},
      {kAny, false, kAny, false, Attempts::kAtMax, ClaimVerdict::kRun},
      {kAny, false, kAny, false, Attempts::kBelow, ClaimVerdict::kRun},
  };
  std::vector<int> matched(table.size(), 0);
  const int max_attempts = 5;
  for (State state :
       {State::kAcquired, State::kTakenOver, State::kDuplicate, State::kFailed, State::kConflict})
    for (bool differs : {false, true})
      for (PayloadMismatch policy : {skip, dead})
        for (bool decided : {false, true})
          for (Attempts a : {Attempts::kBelow, Attempts::kAtMax, Attempts::kAbove}) {
            const int attempts = max_attempts + (a == Attempts::kBelow   ? -1
                                                 : a == Attempts::kAtMax ? 0
                                                                         : 1);
            const ClaimFacts facts{state, attempts, max_attempts, differs, policy, decided};
            size_t row = 0;
            while (row < table.size()) {
              const Row& r = table[row];
              if ((!r.state || *r.state == state) &&
                  (!r.payload_differs || *r.payload_differs == differs) &&
                  (!r.policy || *r.policy == policy) && (!r.decided || *r.decided == decided) &&
                  (!r.attempts || *r.attempts == a))
                break;
              ++row;
            }
            INFO("state " << ClaimStateName(state) << ", payload differs " << differs
                          << ", skip on mismatch " << (policy == skip) << ", decided " << decided
                          << ", attempts " << attempts << " of " << max_attempts);
            REQUIRE(row < table.size());
            ++matched[row];
            const ClaimVerdict got = DecideOnClaim(facts);
            CHECK(std::string(ClaimVerdictName(got)) == ClaimVerdictName(table[row].want));
            // A batch keeps exactly the records it can run or finish as duplicates.
            const bool kept = got == ClaimVerdict::kRun || got == ClaimVerdict::kSkipDuplicate ||
                              got == ClaimVerdict::kSkipFailed;
            CHECK(KeptInBatch(facts) == kept);
            // What must never happen, whatever the table says.
            if (got == ClaimVerdict::kRun) {
              CHECK((state == State::kAcquired || state == State::kTakenOver));
              CHECK(!differs);
              CHECK(attempts <= max_attempts);
            }
          }
  for (size_t row = 0; row < table.size(); ++row) {
    INFO("table row " << row);
    CHECK(matched[row] > 0);
  }
}

TEST_CASE("DecideAfterRun: every outcome, gate, rejection, error class and attempt count") {
  using Kind = RunOutcome::Kind;
  struct Row {
    Cell<Kind> kind;
    Cell<bool> not_started;
    Cell<bool> rejected;
    Cell<bool> non_retriable;
    Cell<bool> last_attempt;
    RunVerdict want;
  };
  const std::vector<Row> table = {
      {Kind::kCompleted, kAny, kAny, kAny, kAny, RunVerdict::kCompleted},
      {Kind::kLost, kAny, kAny, kAny, kAny, RunVerdict::kClaimAgainLost},
      // A handler the gate did not start failed at nothing: its attempt is not spent.
      {Kind::kFailed, true, kAny, kAny, kAny, RunVerdict::kClaimAgainNotStarted},
      // What retrying cannot fix goes to the dead letters at once.
      {Kind::kFailed, false, true, kAny, kAny, RunVerdict::kDeadLetter},
      {Kind::kFailed, false, false, true, kAny, RunVerdict::kDeadLetter},
      {Kind::kFailed, false, false, false, true, RunVerdict::kDeadLetter},
      {Kind::kFailed, false, false, false, false, RunVerdict::kRetry},
  };
  std::vector<int> matched(table.size(), 0);
  const int max_attempts = 3;
  for (Kind kind : {Kind::kCompleted, Kind::kFailed, Kind::kLost})
    for (bool not_started : {false, true})
      for (bool rejected : {false, true})
        for (bool non_retriable : {false, true})
          for (bool last : {false, true}) {
            const RunFacts facts{kind,
                                 not_started,
                                 rejected,
                                 non_retriable,
                                 last ? max_attempts : max_attempts - 1,
                                 max_attempts};
            size_t row = 0;
            while (row < table.size()) {
              const Row& r = table[row];
              if ((!r.kind || *r.kind == kind) &&
                  (!r.not_started || *r.not_started == not_started) &&
                  (!r.rejected || *r.rejected == rejected) &&
                  (!r.non_retriable || *r.non_retriable == non_retriable) &&
                  (!r.last_attempt || *r.last_attempt == last))
                break;
              ++row;
            }
            INFO("kind " << static_cast<int>(kind) << ", not started " << not_started
                         << ", rejected " << rejected << ", non-retriable " << non_retriable
                         << ", last attempt " << last);
            REQUIRE(row < table.size());
            ++matched[row];
            const RunVerdict got = DecideAfterRun(facts);
            CHECK(std::string(RunVerdictName(got)) == RunVerdictName(table[row].want));
            // Never retried beyond max_attempts runs.
            if (got == RunVerdict::kRetry) CHECK(facts.attempts < max_attempts);
          }
  for (size_t row = 0; row < table.size(); ++row) {
    INFO("table row " << row);
    CHECK(matched[row] > 0);
  }
}

}  // namespace
}  // namespace walrelay::consumer
