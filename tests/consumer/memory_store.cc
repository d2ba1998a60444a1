#include "memory_store.h"

#include <exception>

namespace walrelay::testing {

MemoryStore::KeyRecord* MemoryStore::Find(const Id& id) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return nullptr;
  if (clock_() >= it->second.expires_at) {
    // Expired keys are absent, as Redis drops them; the next claim starts again at token 1.
    keys_.erase(it);
    return nullptr;
  }
  return &it->second;
}

Result<wc::Claim> MemoryStore::Acquire(const std::string& consumer, const std::string& key,
                                       const std::string& owner, std::chrono::milliseconds lease,
                                       const wc::Message& message) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id{consumer, key};
  const auto now = clock_();
  wc::Claim claim;
  KeyRecord* record = Find(id);
  if (record == nullptr) {
    record = &keys_[id];
    record->payload_hash = wc::PayloadHash(message);
  } else {
    claim.attempts = record->attempts;
    claim.last_error = record->last_error;
    claim.payload_hash = record->payload_hash;
    if (record->state == State::kCompleted) {
      claim.state = wc::Claim::State::kDuplicate;
      claim.result = record->result;
      return claim;
    }
    if (record->state == State::kFailed) {
      claim.state = wc::Claim::State::kFailed;
      return claim;
    }
    // A PENDING key: free (released), this owner's own, or another owner's claim.
    if (!record->owner.empty() && record->owner != owner) {
      claim.previous_owner = record->owner;
      if (record->lease_until > now) {
        claim.state = wc::Claim::State::kConflict;
        claim.retry_after =
            std::chrono::duration_cast<std::chrono::milliseconds>(record->lease_until - now);
        return claim;
      }
      claim.state = wc::Claim::State::kTakenOver;
    }
  }
  record->state = State::kPending;
  record->owner = owner;
  record->attempts += 1;
  record->fencing_token += 1;
  record->topic = message.topic;
  record->offset = message.offset;
  record->claimed_at = now;
  record->lease_until = now + lease;
  record->expires_at = now + lease + pending_retention_;
  claim.attempts = record->attempts;
  claim.fencing_token = record->fencing_token;
  claim.payload_hash = record->payload_hash;
  granted_tokens_[{id, owner}] = record->fencing_token;
  return claim;
}

Result<wc::RunOutcome> MemoryStore::Run(const std::string& consumer, const std::string& key,
                                        const std::string& owner,
                                        std::chrono::milliseconds completed_ttl,
                                        const wc::Message& message, int attempt,
                                        const wc::Handler& handler) {
  const Id id{consumer, key};
  int64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto granted = granted_tokens_.find({id, owner});
    if (granted != granted_tokens_.end()) token = granted->second;
  }
  wc::RunOutcome out;
  wc::HandlerContext ctx(message, key, attempt, nullptr, token);
  // Outside the mutex: a handler may take long, and other owners must meanwhile see the key.
  try {
    out.handler = handler(ctx);
  } catch (const std::exception& e) {
    out.handler = wc::HandlerResult::Retry("exception", e.what());
  }
  if (out.handler.kind != wc::HandlerResult::Kind::kDone) {
    out.kind = wc::RunOutcome::Kind::kFailed;
    return out;
  }
  std::lock_guard<std::mutex> lock(mu_);
  granted_tokens_.erase({id, owner});
  KeyRecord* record = Find(id);
  // The mark is conditional on the claim: this owner's, under the token it was granted.
  if (record == nullptr || record->state != State::kPending || record->owner != owner ||
      (token != 0 && record->fencing_token != token)) {
    out.kind = wc::RunOutcome::Kind::kLost;
    return out;
  }
  record->state = State::kCompleted;
  record->owner.clear();
  record->result = out.handler.result;
  record->expires_at = clock_() + completed_ttl;
  out.kind = wc::RunOutcome::Kind::kCompleted;
  return out;
}

Status MemoryStore::Release(const std::string& consumer, const std::string& key,
                            const std::string& owner, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id{consumer, key};
  granted_tokens_.erase({id, owner});
  KeyRecord* record = Find(id);
  // Another owner's claim, or a key that moved on, is left alone (Redis answers LOST, not an
  // error).
  if (record == nullptr || record->state != State::kPending || record->owner != owner) {
    return Status::Ok();
  }
  record->owner.clear();
  record->last_error = error;
  return Status::Ok();
}

Result<bool> MemoryStore::MarkFailed(const std::string& consumer, const std::string& key,
                                     const std::string& owner, int64_t fencing_token,
                                     const std::string& error,
                                     std::chrono::milliseconds failed_ttl) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id{consumer, key};
  granted_tokens_.erase({id, owner});
  KeyRecord* record = Find(id);
  if (record != nullptr) {
    // A stale holder's failure never overrides the current claim, nor a COMPLETED key.
    if (record->state != State::kPending || record->owner != owner) return false;
    if (fencing_token != 0 && record->fencing_token != fencing_token) return false;
  } else {
    record = &keys_[id];  // gone (expired): the dead letter is remembered all the same
  }
  record->state = State::kFailed;
  record->owner.clear();
  record->last_error = error;
  record->expires_at = clock_() + failed_ttl;
  return true;
}

Result<int64_t> MemoryStore::CleanupBatch(int) { return int64_t{0}; }

Status MemoryStore::Unclaim(const std::string& consumer, const std::string& key,
                            const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id{consumer, key};
  granted_tokens_.erase({id, owner});
  KeyRecord* record = Find(id);
  if (record == nullptr || record->state != State::kPending || record->owner != owner) {
    return Status::Ok();
  }
  record->owner.clear();
  if (record->attempts > 0) record->attempts -= 1;
  return Status::Ok();
}

std::optional<MemoryStore::KeyRecord> MemoryStore::Inspect(const std::string& consumer,
                                                           const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const KeyRecord* record = Find({consumer, key});
  if (record == nullptr) return std::nullopt;
  return *record;
}

}  // namespace walrelay::testing
