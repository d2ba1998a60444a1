// Cancellation: lets a wait deep inside a call on a worker thread see that its owner gave up,
// without a flag threaded through every interface in between.
//
// Contract: a Cancellation::Scope on a worker thread's stack names the flag for every call made
// on that thread while it lives (relay/source_connector.h opens one per connect attempt);
// Cancellation::Requested() reads it, and is false on a thread without a scope (the loop). A
// wait that can be resumed later waits in slices of at most kSlice and returns early, with the
// error of a timed-out slice, once cancellation is requested (librdkafka's
// rd_kafka_init_transactions is resumable after a timeout: delivery/kafka_transactions.cc).
// Scopes nest; the innermost one counts. Thread-local: a scope is seen only on its own thread.
#pragma once

#include <atomic>
#include <chrono>

namespace walrelay {

class Cancellation {
 public:
  // How long one slice of a cancellable wait may last.
  static constexpr std::chrono::milliseconds kSlice{100};

  class Scope {
   public:
    explicit Scope(const std::atomic<bool>& flag) : outer_(current_) { current_ = &flag; }
    ~Scope() { current_ = outer_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const std::atomic<bool>* const outer_;
  };

  static bool Requested() { return current_ != nullptr && current_->load(); }

 private:
  static inline thread_local const std::atomic<bool>* current_ = nullptr;
};

}  // namespace walrelay
