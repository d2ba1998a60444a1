// MemoryStore: an IdempotencyStore held in this process's memory, a test double for the rules
// of the consumer and the reference the store conformance suite (store_conformance_test.cc)
// holds the real stores to.
//
// Contract: the semantics docs/consumer.md gives RedisStore, one key at a time under a mutex.
//  - A claim is a lease on an injectable clock (the steady clock by default, a ManualClock in
//    tests): a live lease of another owner answers CONFLICT with retry_after = what is left of
//    it; an ended one is TAKEN_OVER. Each granted claim counts an attempt and gets the key's
//    next fencing token (1 for a new key; tokens restart at 1 when an expired key comes back).
//  - Run calls the handler outside the mutex and marks the key COMPLETED only if it is still
//    PENDING under this owner and the token this store granted it (else LOST).
//  - Release and Unclaim free the owner's claim (Unclaim also uncounts its attempt); MarkFailed
//    marks FAILED only the owner's current claim (and token, when not 0) or a key not there.
//  - COMPLETED and FAILED keys expire after their ttl, PENDING ones `pending_retention` after
//    their lease: an expired key is absent.
// Leases are never renewed and handlers get no ClaimLease (claim_held() is always true) nor a
// connection. The batch methods are the base class defaults. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "walrelay/consumer.h"

namespace walrelay::testing {

namespace wc = walrelay::consumer;

// A clock that moves only when told to, for leases that end without waiting for them.
// Thread-safe.
class ManualClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  // The current time.
  time_point now() const {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  // Moves the time on by `d`.
  void Advance(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }
  // A clock function for MemoryStore reading this clock (which must outlive the store).
  std::function<time_point()> AsFunction() const {
    return [this] { return now(); };
  }

 private:
  mutable std::mutex mu_;
  time_point now_ = std::chrono::steady_clock::now();
};

class MemoryStore final : public wc::IdempotencyStore {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  enum class State { kPending, kCompleted, kFailed };

  // One key as the store keeps it (Inspect returns a copy).
  struct KeyRecord {
    State state = State::kPending;
    std::string owner;  // "" once released
    int attempts = 0;
    int64_t fencing_token = 0;
    std::string result;
    std::string last_error;
    std::string payload_hash;
    std::string topic;  // the record that last claimed the key
    int64_t offset = 0;
    std::chrono::steady_clock::time_point claimed_at;
    std::chrono::steady_clock::time_point lease_until;
    std::chrono::steady_clock::time_point expires_at;
  };

  explicit MemoryStore(Clock clock = std::chrono::steady_clock::now,
                       std::chrono::milliseconds pending_retention = std::chrono::hours(24))
      : clock_(std::move(clock)), pending_retention_(pending_retention) {}

  // Claims the key as the contract above says.
  Result<wc::Claim> Acquire(const std::string& consumer, const std::string& key,
                            const std::string& owner, std::chrono::milliseconds lease,
                            const wc::Message& message) override;
  // Calls the handler (outside the mutex), then marks the key COMPLETED if the claim still holds.
  Result<wc::RunOutcome> Run(const std::string& consumer, const std::string& key,
                             const std::string& owner, std::chrono::milliseconds completed_ttl,
                             const wc::Message& message, int attempt,
                             const wc::Handler& handler) override;
  // Frees the owner's claim, keeping its attempt and recording `error`.
  Status Release(const std::string& consumer, const std::string& key, const std::string& owner,
                 const std::string& error) override;
  // Marks the key FAILED if it is the owner's current claim (with this token, unless 0) or absent.
  Result<bool> MarkFailed(const std::string& consumer, const std::string& key,
                          const std::string& owner, int64_t fencing_token, const std::string& error,
                          std::chrono::milliseconds failed_ttl) override;
  // Expired keys are dropped when next looked at: always 0.
  Result<int64_t> CleanupBatch(int batch_size) override;
  // Frees the owner's claim and uncounts its attempt.
  Status Unclaim(const std::string& consumer, const std::string& key,
                 const std::string& owner) override;

  // The key as stored now; nullopt when absent (or expired).
  std::optional<KeyRecord> Inspect(const std::string& consumer, const std::string& key);
  // The store's clock now.
  std::chrono::steady_clock::time_point now() const { return clock_(); }

 private:
  using Id = std::pair<std::string, std::string>;  // (consumer, key)

  // The live record of `id`, dropping it first if it expired; nullptr when absent. Needs mu_.
  KeyRecord* Find(const Id& id);

  Clock clock_;
  const std::chrono::milliseconds pending_retention_;
  std::mutex mu_;
  std::map<Id, KeyRecord> keys_;
  // The fencing token each owner's latest claim of a key was granted, checked by Run (which is
  // not given the token), as RedisStore remembers its own claims' tokens.
  std::map<std::pair<Id, std::string>, int64_t> granted_tokens_;
};

}  // namespace walrelay::testing
