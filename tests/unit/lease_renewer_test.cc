// The lease renewer of RedisStore and DynamoStore, with a scripted renewal call: when the first
// renewal goes out (a third of the lease after the claim, not after the handler's start), what
// an accepted renewal does to the lease the handler sees, and that a refused one ends it.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "consumer/lease_renewer.h"

namespace walrelay::consumer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A renewal call that answers `answer` and records when each call was made.
struct ScriptedRenewal {
  std::mutex mu;
  std::vector<Clock::time_point> calls;
  std::string answer = "OK";

  Result<std::string> operator()(const Renewer::Job&) {
    std::lock_guard<std::mutex> lock(mu);
    calls.push_back(Clock::now());
    return answer;
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return calls.size();
  }
  std::vector<Clock::time_point> snapshot() {
    std::lock_guard<std::mutex> lock(mu);
    return calls;
  }
};

template <typename Cond>
bool WaitFor(Cond cond, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!cond()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

TEST_CASE("Renewer: the first renewal is due a third of the lease after the claim was sent") {
  ScriptedRenewal script;
  Renewer renewer([&](const Renewer::Job& j) { return script(j); }, nullptr);
  const auto lease = 3000ms;
  // A claim sent 1.4 s ago (it waited behind the batch's earlier handlers): already more than
  // a third of its lease old when its handler starts.
  const auto claimed_at = Clock::now() - 1400ms;
  auto claim = std::make_shared<ClaimLease>(claimed_at + lease);
  const auto watched_at = Clock::now();
  renewer.Watch({"k", "me", "1", lease, claim});
  // Due at once: the renewal goes out as soon as the renewer looks, not a third of the lease
  // (1 s) after the handler started.
  REQUIRE(WaitFor([&] { return script.count() >= 1; }, 2s));
  const auto first = script.snapshot().front();
  CHECK(first - watched_at < 700ms);
  // Accepted: the lease the handler sees now runs from the renewal's sending (taken just
  // before the call went out).
  REQUIRE(WaitFor([&] { return claim->until() > claimed_at + lease; }, 1s));
  CHECK(claim->held());
  CHECK(claim->until() >= watched_at + lease);
  CHECK(claim->until() <= first + lease);
  renewer.Unwatch();
}

TEST_CASE("Renewer: a fresh claim is not renewed before a third of its lease") {
  ScriptedRenewal script;
  Renewer renewer([&](const Renewer::Job& j) { return script(j); }, nullptr);
  const auto lease = 900ms;
  const auto claimed_at = Clock::now();
  auto claim = std::make_shared<ClaimLease>(claimed_at + lease);
  renewer.Watch({"k", "me", "1", lease, claim});
  REQUIRE(WaitFor([&] { return script.count() >= 2; }, 3s));
  const auto calls = script.snapshot();
  CHECK(calls[0] - claimed_at >= lease / 3);
  // Each renewal counts from the previous one's sending.
  CHECK(calls[1] - calls[0] >= lease / 3);
  renewer.Unwatch();
}

TEST_CASE("Renewer: a refused renewal marks the claim lost and renews it no more") {
  ScriptedRenewal script;
  script.answer = "LOST";
  std::vector<std::string> logged;
  std::mutex mu;
  Renewer renewer([&](const Renewer::Job& j) { return script(j); },
                  [&](const std::string& line) {
                    std::lock_guard<std::mutex> lock(mu);
                    logged.push_back(line);
                  });
  const auto lease = 300ms;
  auto claim = std::make_shared<ClaimLease>(Clock::now() + lease);
  renewer.Watch({"k", "me", "7", lease, claim});
  REQUIRE(WaitFor([&] { return !claim->held(); }, 2s));
  CHECK(claim->until() == Clock::time_point{});
  REQUIRE(WaitFor([&] { return script.count() >= 1; }, 1s));
  std::this_thread::sleep_for(lease);
  CHECK(script.count() == 1);
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(logged.size() == 1);
  CHECK(logged[0].find("fencing token 7") != std::string::npos);
  CHECK(logged[0].find("refused: LOST") != std::string::npos);
}

TEST_CASE("ClaimLease: held until its end, unless lost") {
  ClaimLease lease(Clock::now() + 1h);
  CHECK(lease.held());
  lease.HeldFrom(Clock::now() - 2s, 1s);
  CHECK(!lease.held());
  lease.HeldFrom(Clock::now(), 1h);
  CHECK(lease.held());
  lease.Lost();
  CHECK(!lease.held());
  lease.HeldFrom(Clock::now(), 1h);  // a late renewal answer does not bring it back
  CHECK(!lease.held());
}

}  // namespace
}  // namespace walrelay::consumer
