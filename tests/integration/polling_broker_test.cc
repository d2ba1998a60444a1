// source.mode=polling on a real Apache Kafka broker: three relays poll one outbox table (one
// holds the lease, two wait), and the active one is killed with SIGKILL five times while a
// writer inserts 20,000 events. Every event arrives, per-key order holds, and duplicates (rows
// relayed but not yet marked when their relay died) are counted.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "devtools/child_process.h"
#include "outbox_events.h"
#include "relay_fixture.h"

using namespace walrelay;
using namespace walrelay::testing;
using namespace std::chrono_literals;

namespace {

constexpr int kInstances = 3;
constexpr int kKills = 5;
constexpr int kBatches = 200;  // of 100 events, in 10-event transactions: 20,000 events

struct Instance {
  std::unique_ptr<devtools::ChildProcess> process;
  std::string log;  // each start logs to a file of its own
};

bool Polls(const Instance& instance) {
  return devtools::ReadFile(instance.log).find("polling public.outbox in") != std::string::npos;
}
bool Waits(const Instance& instance) {
  return devtools::ReadFile(instance.log).find("as a standby") != std::string::npos;
}

}  // namespace

TEST_CASE("real broker, polling: kill -9 of the active poller five times, three instances, "
          "20,000 events: none lost, per-key order kept") {
  RelayFixture fx{RealBroker{}};
  fx.Exec(ReadWholeFile(std::string(WALRELAY_SOURCE_DIR) + "/docs/outbox-polling.sql"));
  const std::string config =
      fx.WriteConfig("killpoll", {{"source.mode", "polling"},
                                  {"polling.interval.ms", "20"},
                                  {"polling.lease.retry.ms", "100"},
                                  // Records linger between produce and acknowledgement, so kills
                                  // find rows relayed and not yet marked.
                                  {"kafka.linger.ms", "300"}});
  auto spawn = [&] {
    Instance instance;
    instance.process = fx.SpawnRelay(config);
    instance.log = fx.log_path();
    return instance;
  };
  std::vector<Instance> instances;
  for (int i = 0; i < kInstances; ++i) {
    instances.push_back(spawn());
    // The first takes the lease; each later one waits as a standby.
    REQUIRE(devtools::WaitForFileContains(
        instances.back().log, i == 0 ? "polling public.outbox in" : "as a standby", 30s));
  }

  std::atomic<int> written{0};
  std::atomic<int> failures{0};
  std::thread writer([&] {
    for (int batch = 0; batch < kBatches; ++batch) {
      std::string sql;
      for (int i = 1; i <= 100; ++i) {
        const int seq = batch * 100 + i;
        sql += (i % 10 == 1 ? "BEGIN;" : "") + InsertEvent(seq) + (i % 10 == 0 ? "COMMIT;" : "");
      }
      if (!fx.pg().Exec(sql).ok()) failures.fetch_add(1);
      written.store((batch + 1) * 100);
      std::this_thread::sleep_for(40ms);
    }
  });

  int kills_with_rows_in_flight = 0;
  for (int kill = 0; kill < kKills; ++kill) {
    std::this_thread::sleep_for(1200ms + 200ms * kill);
    int active = -1;
    REQUIRE(Eventually(
        [&] {
          for (int i = 0; i < kInstances; ++i) {
            if (Polls(instances[i])) active = i;
          }
          return active >= 0;
        },
        30s));
    // Rows committed 100 ms before the kill and still unmarked: the relay polls every 20 ms, so
    // it has read them, and their records linger 300 ms in the producer or await their marks.
    if (fx.Value("SELECT count(*) FROM outbox WHERE created_at < "
                 "(now() AT TIME ZONE 'utc') - interval '100 milliseconds'") != "0") {
      ++kills_with_rows_in_flight;
    }
    REQUIRE(instances[active].process->Kill(SIGKILL).ok());
    auto code = instances[active].process->Wait(10s);
    REQUIRE(code.ok());
    CHECK(*code == 128 + SIGKILL);
    // The killed one comes back (as a standby, or polling if it asks first): three again.
    instances[active] = spawn();
    REQUIRE(Eventually([&] { return Polls(instances[active]) || Waits(instances[active]); }, 30s));
  }
  writer.join();
  REQUIRE(failures.load() == 0);
  const int total = kBatches * 100;
  CHECK(Eventually([&] { return fx.Value("SELECT count(*) FROM outbox") == "0"; }, 120s));

  auto records = ReadEverySeq(*fx.Reader(), SeqRange(total), 120s);
  auto seen = CheckRecords(records);
  int lost = 0, duplicates = 0;
  for (int s = 1; s <= total; ++s) {
    auto it = seen.find(s);
    if (it == seen.end()) ++lost;
    else duplicates += it->second - 1;
  }
  CHECK(lost == 0);
  // A kill that finds nothing read and unmarked tests nothing. Duplicates are only reported:
  // they are the records Kafka had stored when their relay died before marking them, and
  // records still in the producer at the kill are relayed again without a repeat.
  CHECK(kills_with_rows_in_flight >= 2);
  int running = 0;
  for (auto& instance : instances) running += instance.process->Running() ? 1 : 0;
  CHECK(running == kInstances);
  MESSAGE("polling, kill -9 of the active poller x"
          << kKills << " (" << kills_with_rows_in_flight << " with rows read and not yet marked), "
          << kInstances << " instances: " << total << " events -> " << records.size()
          << " records, " << lost << " lost, " << duplicates << " duplicates");
}
