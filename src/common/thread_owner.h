// ThreadOwner: the check that code documented as "loop thread only" runs on one thread.
//
// Contract: the first AssertOnOwnerThread() records the calling thread as the owner, unless
// Bind() named it before (Relay::Run binds the thread that runs the io_context); from then on
// AssertOnOwnerThread() on any other thread prints which check failed, on which thread, and
// aborts, in builds without NDEBUG. The sanitizer builds keep assertions on (-UNDEBUG, the top
// CMakeLists.txt), so a delivery report, a timer or a ledger update served on the wrong thread
// stops the test there, at the call that broke the rule, instead of racing. Release builds
// (NDEBUG) compile AssertOnOwnerThread() to nothing; the layout is the same in both, so
// translation units built either way agree on it.
//
// OnOwnerThread() is the predicate the assertion uses (true while unowned), for tests. A copy
// starts unowned: a copied object belongs to the thread that first uses it. Assignment keeps
// the owner of the object assigned to.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

namespace walrelay {

class ThreadOwner {
 public:
  ThreadOwner() = default;
  ThreadOwner(const ThreadOwner&) {}
  ThreadOwner& operator=(const ThreadOwner&) { return *this; }

  // The calling thread owns the object from now on.
  void Bind() { owner_.store(std::this_thread::get_id(), std::memory_order_relaxed); }
  // Whether the calling thread may use the object: it owns it, or nobody does yet.
  bool OnOwnerThread() const {
    const std::thread::id owner = owner_.load(std::memory_order_relaxed);
    return owner == std::thread::id() || owner == std::this_thread::get_id();
  }
  // Aborts (debug builds) unless the calling thread owns the object; the first call binds.
  // `what` names the entry point, as the message shows it. Use WALRELAY_ASSERT_OWNER.
  void AssertOnOwnerThread(const char* what, const char* file, int line) const {
#ifndef NDEBUG
    std::thread::id expected;
    const std::thread::id self = std::this_thread::get_id();
    if (owner_.compare_exchange_strong(expected, self, std::memory_order_relaxed)) return;
    if (expected != self) Violation(what, file, line, expected, self);
#else
    (void)what, (void)file, (void)line;
#endif
  }

 private:
  [[noreturn]] static void Violation(const char* what, const char* file, int line,
                                     std::thread::id owner, std::thread::id self) {
    std::ostringstream ids;
    ids << "thread " << self << ", owner thread " << owner;
    std::fprintf(stderr, "%s:%d: %s is loop thread only but was called on another thread (%s)\n",
                 file, line, what, ids.str().c_str());
    std::fflush(stderr);
    std::abort();
  }

  mutable std::atomic<std::thread::id> owner_{};
};

}  // namespace walrelay

// Asserts that the calling thread owns `owner` (a ThreadOwner); nothing in release builds.
#ifdef NDEBUG
#define WALRELAY_ASSERT_OWNER(owner, what) ((void)0)
#else
#define WALRELAY_ASSERT_OWNER(owner, what) (owner).AssertOnOwnerThread(what, __FILE__, __LINE__)
#endif
