#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <thread>

#include "common/thread_owner.h"

using namespace walrelay;

namespace {

// Whether `check` returns true on a thread of its own.
template <typename F>
bool OnAnotherThread(F check) {
  bool result = false;
  std::thread t([&] { result = check(); });
  t.join();
  return result;
}

}  // namespace

TEST_CASE("thread owner: the first check binds, another thread is refused, a copy starts free") {
  ThreadOwner owner;
  CHECK(owner.OnOwnerThread());
  CHECK(OnAnotherThread([&] { return owner.OnOwnerThread(); }));  // nobody owns it yet
  owner.AssertOnOwnerThread("first use", __FILE__, __LINE__);     // binds in every build
#ifndef NDEBUG
  CHECK(owner.OnOwnerThread());
  CHECK_FALSE(OnAnotherThread([&] { return owner.OnOwnerThread(); }));
  const ThreadOwner copy = owner;
  CHECK(OnAnotherThread([&] { return copy.OnOwnerThread(); }));
  // Bind() hands the object to the calling thread (Relay::Run's loop).
  CHECK(OnAnotherThread([&] {
    owner.Bind();
    return owner.OnOwnerThread();
  }));
  CHECK_FALSE(owner.OnOwnerThread());
#endif
}

#ifndef NDEBUG
TEST_CASE("thread owner: a loop-thread-only call on another thread aborts with its name") {
  ThreadOwner owner;
  // Owned by a thread that has ended: the main thread is another. The child process below
  // starts no thread (ThreadSanitizer does not support threads started after fork).
  OnAnotherThread([&] {
    WALRELAY_ASSERT_OWNER(owner, "Example::Entry");
    return true;
  });
  int err[2];
  REQUIRE(pipe(err) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    dup2(err[1], STDERR_FILENO);
    close(err[0]);
    std::signal(SIGABRT, SIG_DFL);  // not doctest's handler, which is not async-signal-safe
    WALRELAY_ASSERT_OWNER(owner, "Example::Entry");
    _exit(0);  // not reached in a build with assertions
  }
  close(err[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(err[0], buf, sizeof buf)) > 0;) message.append(buf, n);
  close(err[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK_MESSAGE(message.find("Example::Entry is loop thread only but was called on another "
                             "thread") != std::string::npos,
                message);
  CHECK_MESSAGE(message.find("thread_owner_test.cc:") != std::string::npos, message);
}
#endif
