// Renewer: keeps the lease of the claim whose handler is running alive, for the stores whose
// leases are checked by time alone (RedisStore, DynamoStore). The store supplies the renewal
// call (on a connection of its own, since the thread calls it while the store's connection
// serves the handler's thread) and a log.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "walrelay/consumer/handler.h"

namespace walrelay::consumer {

// Renews the lease of the claim whose handler is running, from its own thread (and its own
// connection, through `renew`), once the claim is a third of the lease old (counted from when
// the claim, or the latest renewal, was sent: the job's ClaimLease) and every third of the
// lease after that, so a slow but live handler keeps its key; a process that stops (crash,
// pause) stops renewing, and its lease runs out as before. Each accepted renewal extends the
// ClaimLease the handler sees, and a refused one marks it lost. Watch and Unwatch only set
// fields under a mutex: the thread looks every sixth of the lease, so a handler shorter than
// that costs no wake-up.
class Renewer {
 public:
  struct Job {
    std::string key, owner, token;
    std::chrono::milliseconds lease{0};
    // What the handler sees of the claim; shared, so a renewal that returns after the handler
    // ended writes to a live object.
    std::shared_ptr<ClaimLease> claim;
  };
  // `renew` returns "OK", "LOST", or an error; `log` gets one line per refused renewal.
  Renewer(std::function<Result<std::string>(const Job&)> renew,
          std::function<void(const std::string&)> log)
      : renew_(std::move(renew)), log_(std::move(log)), thread_([this] { Loop(); }) {}
  ~Renewer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  Renewer(const Renewer&) = delete;
  Renewer& operator=(const Renewer&) = delete;

  void Watch(Job job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (job.lease != period_ * 6) {
      period_ = std::max(job.lease / 6, std::chrono::milliseconds(1));
      cv_.notify_one();  // a new lease: look at the new cadence
    }
    job_ = std::move(job);
    watching_ = true;
  }
  void Unwatch() {
    std::lock_guard<std::mutex> lock(mu_);
    watching_ = false;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
      cv_.wait_for(lock, period_);
      if (quit_ || !watching_ || !Due(job_)) continue;
      const Job job = job_;
      lock.unlock();
      const auto sent_at = std::chrono::steady_clock::now();
      auto r = renew_(job);
      lock.lock();
      const bool same = watching_ && job_.key == job.key && job_.token == job.token;
      if (r.ok() && *r == "OK") {
        job.claim->HeldFrom(sent_at, job.lease);
        continue;
      }
      if (r.ok()) job.claim->Lost();
      // Taken over (the lease had run out before a renewal got through) or unreachable: the
      // completion's token check decides; a connection error is tried again next time.
      if (log_)
        log_("RENEW the lease of " + job.key + " (fencing token " + job.token + ") " +
             (r.ok() ? "was refused: " + *r : "failed: " + r.status().message()));
      if (r.ok() && same) watching_ = false;
    }
  }

  // Whether the job's claim is a third of its lease old.
  static bool Due(const Job& job) {
    return std::chrono::steady_clock::now() >= job.claim->until() - (job.lease - job.lease / 3);
  }

  std::function<Result<std::string>(const Job&)> renew_;
  std::function<void(const std::string&)> log_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  bool watching_ = false;
  Job job_;
  std::chrono::milliseconds period_{1000};
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace walrelay::consumer
