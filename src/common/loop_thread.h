// LoopThread: the check that code documented as "loop thread only" runs there.
//
// Contract: Bind() records the calling thread as the loop's (the thread that runs the
// io_context); Check() asserts that the calling thread is that one, once bound. The assertion
// is on in builds without NDEBUG (the sanitizer builds, scripts/sanitize.sh): a delivery
// report, a timer or a connect outcome served on another thread stops the process there, at
// the call that broke the rule, instead of racing. Release builds compile Check() away.
#pragma once

#include <atomic>
#include <cassert>
#include <thread>

namespace walrelay {

class LoopThread {
 public:
  // The calling thread is the loop's from now on.
  void Bind() { id_.store(std::this_thread::get_id()); }
  // Asserts that the calling thread is the loop's (when bound).
  void Check() const {
#ifndef NDEBUG
    const std::thread::id bound = id_.load();
    assert(bound == std::thread::id() || bound == std::this_thread::get_id());
#endif
  }

 private:
  std::atomic<std::thread::id> id_{};
};

}  // namespace walrelay
