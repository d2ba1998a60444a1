// OffsetWriter against librdkafka's in-process mock cluster: a position is written only under
// the server, timeline and slot of the stream that confirmed it, also when Start() changes them
// while that position is pending or its write is still in flight; and a refused write comes
// back only while it is the newest position.
#include <doctest/doctest.h>
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "delivery/offset_store.h"
#include "delivery/offset_writer.h"
#include "delivery/source_offsets.h"
#include "devtools/mock_kafka.h"
#include "devtools/topic_reader.h"

using namespace walrelay;
using namespace std::chrono_literals;

namespace {

constexpr const char* kTopic = "offsets";
constexpr const char* kSystemId = "7311111111111111111";
constexpr const char* kSlot = "walrelay";
// Long enough that a position after the first one of a stream stays pending during a test.
constexpr std::chrono::milliseconds kLongInterval = 1h;

// Polls `writer` until `done` or the deadline.
template <typename Done>
bool PollUntil(OffsetWriter& writer, Done done, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    writer.Poll();
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Polls `writer` for `duration`: time for anything due to be written.
void PollFor(OffsetWriter& writer, std::chrono::milliseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
    writer.Poll();
    std::this_thread::sleep_for(5ms);
  }
}

// Every position in the offsets topic, in the order written (one partition).
std::vector<SourceOffset> ReadPositions(const devtools::MockKafka& kafka, size_t expected) {
  auto reader = devtools::TopicReader::Create(kafka.bootstrap_servers());
  REQUIRE(reader.ok());
  auto records = (*reader)->ReadAtLeast({kTopic}, expected, 10s);
  REQUIRE(records.ok());
  // Anything written after the expected records would arrive within this.
  for (auto& late : (*reader)->Poll(500ms)) records->push_back(std::move(late));
  std::vector<SourceOffset> positions;
  for (const auto& record : *records) {
    REQUIRE(record.value);
    auto parsed = ParseSourceOffset(*record.value);
    REQUIRE_MESSAGE(parsed.ok(), parsed.status().ToString());
    positions.push_back(*parsed);
  }
  return positions;
}

bool Has(const std::vector<SourceOffset>& positions, uint32_t timeline, Lsn lsn) {
  for (const auto& p : positions)
    if (p.timeline == timeline && p.lsn == lsn) return true;
  return false;
}

}  // namespace

TEST_CASE("a position pending when Start() changes the timeline is written under the old one") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic(kTopic, 1, 1).ok());
  const std::map<std::string, std::string> properties{
      {"bootstrap.servers", (*kafka)->bootstrap_servers()}};
  const OffsetStore store(properties, kTopic, SourceOffsetKey("orders", "shop"));
  const Lsn first(0x1000), pending(0x2000), after(0x3000);
  {
    auto writer = OffsetWriter::Create(properties, store, kLongInterval);
    REQUIRE(writer.ok());
    OffsetWriter& w = **writer;
    w.Start(kSystemId, 1, kSlot, 1);
    w.Confirmed(first);  // the first of a stream: written at once
    w.Confirmed(pending);
    REQUIRE(w.Due());  // not yet written: due an interval after the first
    // A failover: the stream goes on from a promoted standby, on timeline 2.
    w.Start(kSystemId, 2, kSlot, 1);
    PollFor(w, 200ms);
    w.Confirmed(after);  // the new timeline's first position: written at once
    CHECK(PollUntil(w, [&] { return w.written() == 3; }));
    CHECK(w.failed() == 0);
    CHECK_FALSE(w.Due());
  }
  const auto positions = ReadPositions(**kafka, 3);
  REQUIRE(positions.size() == 3);
  // The pending position belongs to timeline 1, which confirmed it; timeline 2 never did.
  CHECK_FALSE(Has(positions, 2, pending));
  CHECK(positions[0].timeline == 1);
  CHECK(positions[0].lsn == first);
  CHECK(positions[1].timeline == 1);
  CHECK(positions[1].lsn == pending);
  CHECK(positions[2].timeline == 2);
  CHECK(positions[2].lsn == after);
}

TEST_CASE("a write refused after Start() changed the timeline is not written again under the new "
          "one") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic(kTopic, 1, 1).ok());
  const std::map<std::string, std::string> properties{
      {"bootstrap.servers", (*kafka)->bootstrap_servers()}};
  const OffsetStore store(properties, kTopic, SourceOffsetKey("orders", "shop"));
  const Lsn refused(0x1000), after(0x3000);
  {
    auto writer = OffsetWriter::Create(properties, store, kLongInterval);
    REQUIRE(writer.ok());
    OffsetWriter& w = **writer;
    w.Start(kSystemId, 1, kSlot, 1);
    // The broker refuses the first write; its report is served only by a later Poll().
    (*kafka)->PushProduceErrors(1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    w.Confirmed(refused);
    w.Start(kSystemId, 2, kSlot, 1);
    REQUIRE(PollUntil(w, [&] { return w.failed() == 1; }));
    // Past OffsetWriter::kRetryAfter: a refused position due again would be written by now.
    PollFor(w, OffsetWriter::kRetryAfter + 500ms);
    CHECK(w.written() == 0);
    CHECK_FALSE(w.Due());
    w.Confirmed(after);
    CHECK(PollUntil(w, [&] { return w.written() >= 1; }));
    PollFor(w, 200ms);
    CHECK(w.written() == 1);
  }
  const auto positions = ReadPositions(**kafka, 1);
  // Timeline 2 never confirmed the refused position; only its own is stored.
  CHECK_FALSE(Has(positions, 2, refused));
  REQUIRE(positions.size() == 1);
  CHECK(positions[0].timeline == 2);
  CHECK(positions[0].lsn == after);
}

TEST_CASE("a refused write older than the newest one handed to the producer is not written again") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic(kTopic, 1, 1).ok());
  const std::map<std::string, std::string> properties{
      {"bootstrap.servers", (*kafka)->bootstrap_servers()}};
  const OffsetStore store(properties, kTopic, SourceOffsetKey("orders", "shop"));
  const Lsn older(0x1000), newer(0x2000);
  {
    // No interval: every confirmed position is written at once.
    auto writer = OffsetWriter::Create(properties, store, 0ms);
    REQUIRE(writer.ok());
    OffsetWriter& w = **writer;
    w.Start(kSystemId, 1, kSlot, 1);
    // Both go out before either report is served; the broker refuses the first request, which
    // holds the older one and, as they are written together, usually the newer one too.
    (*kafka)->PushProduceErrors(1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    w.Confirmed(older);
    w.Confirmed(newer);
    REQUIRE(PollUntil(w, [&] { return w.failed() >= 1; }));
    // Past OffsetWriter::kRetryAfter, so whatever is written again has been by now.
    PollFor(w, OffsetWriter::kRetryAfter + 500ms);
    CHECK(PollUntil(w, [&] { return w.written() >= 1; }));
  }
  const auto positions = ReadPositions(**kafka, 1);
  // The stored position is the newest: the older one does not come back after it.
  REQUIRE_FALSE(positions.empty());
  CHECK(positions.back().lsn == newer);
  for (const auto& p : positions) CHECK(p.lsn == newer);
}

TEST_CASE("a write refused after Forget() does not bring the position back") {
  auto kafka = devtools::MockKafka::Start(1);
  REQUIRE(kafka.ok());
  REQUIRE((*kafka)->CreateTopic(kTopic, 1, 1).ok());
  const std::map<std::string, std::string> properties{
      {"bootstrap.servers", (*kafka)->bootstrap_servers()}};
  const OffsetStore store(properties, kTopic, SourceOffsetKey("orders", "shop"));
  {
    auto writer = OffsetWriter::Create(properties, store, kLongInterval);
    REQUIRE(writer.ok());
    OffsetWriter& w = **writer;
    w.Start(kSystemId, 1, kSlot, 1);
    (*kafka)->PushProduceErrors(1, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
    w.Confirmed(Lsn(0x1000));
    // slot.drop.on.stop: the next start is to be a first start.
    w.Forget();
    REQUIRE(PollUntil(w, [&] { return w.failed() >= 1; }));
    PollFor(w, OffsetWriter::kRetryAfter + 500ms);
  }
  auto reader = devtools::TopicReader::Create((*kafka)->bootstrap_servers());
  REQUIRE(reader.ok());
  REQUIRE((*reader)->Assign({kTopic}).ok());
  const auto records = (*reader)->Poll(2s);
  // Nothing, or the tombstone last: no position is stored after Forget().
  if (!records.empty()) CHECK_FALSE(records.back().value.has_value());
  for (const auto& record : records) CHECK_FALSE(record.value.has_value());
}
