// Outbox events whose payload carries a sequence number, and the checks every relay test
// makes on what consumers read: topic, key, id header, value text, per-key order.
#pragma once

#include <doctest/doctest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "devtools/topic_reader.h"

namespace walrelay::testing {

using devtools::ConsumedRecord;

inline const std::vector<std::string> kAggregateTypes = {"Order", "Customer", "Shipment"};

inline std::vector<std::string> OutboxTopics() {
  std::vector<std::string> t;
  for (const auto& a : kAggregateTypes) t.push_back("outbox.event." + a);
  return t;
}

// One outbox INSERT whose payload carries its sequence number, so tests can check order.
inline std::string InsertEvent(int seq) {
  const std::string& type = kAggregateTypes[seq % 3];
  const std::string key = type + "-" + std::to_string(seq % 17);
  char id[40];
  std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", seq);
  return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('" +
         std::string(id) + "', '" + type + "', '" + key + "', '" + type +
         "Happened', jsonb_build_object('seq', " + std::to_string(seq) + ", 'key', '" + key +
         "', 'text', 'ünï \"q\" \\ ok'));";
}

// The outbox events 1..rows (InsertEvent's rows, the same bytes) in one statement, so one
// source transaction holds them all.
inline std::string InsertEventsInOneStatement(int rows) {
  const std::string type = "(ARRAY['Order','Customer','Shipment'])[s % 3 + 1]";
  const std::string key = type + " || '-' || (s % 17)";
  return "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT "
         "('00000000-0000-4000-8000-' || lpad(s::text, 12, '0'))::uuid, " +
         type + ", " + key + ", " + type + " || 'Happened', jsonb_build_object('seq', s, 'key', " +
         key + ", 'text', 'ünï \"q\" \\ ok') FROM generate_series(1, " + std::to_string(rows) +
         ") s";
}

// The same event as InsertEvent(seq), emitted with pg_logical_emit_message(true, prefix, ...)
// instead of inserted: jsonb's text rendering gives the payload member the bytes a jsonb
// payload column would have, so CheckRecords holds for both.
inline std::string EmitEvent(int seq, const std::string& prefix = "outbox") {
  const std::string& type = kAggregateTypes[seq % 3];
  const std::string key = type + "-" + std::to_string(seq % 17);
  char id[40];
  std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", seq);
  return "SELECT pg_logical_emit_message(true, '" + prefix + "', jsonb_build_object('id', '" +
         std::string(id) + "', 'aggregatetype', '" + type + "', 'aggregateid', '" + key +
         "', 'type', '" + type + "Happened', 'payload', jsonb_build_object('seq', " +
         std::to_string(seq) + ", 'key', '" + key + "', 'text', 'ünï \"q\" \\ ok'))::text);";
}

inline std::string HeaderValue(const ConsumedRecord& r, const std::string& name) {
  for (const auto& h : r.headers)
    if (h.key == name) return h.value.value_or("(null)");
  return "(missing)";
}

inline int SeqOf(const ConsumedRecord& r) {
  rapidjson::Document doc;
  doc.Parse(r.value->c_str());
  REQUIRE_MESSAGE(!doc.HasParseError(), *r.value);
  return doc["seq"].GetInt();
}

// Checks every record's shape; returns how often each seq was seen.
inline std::map<int, int> CheckRecords(const std::vector<ConsumedRecord>& records) {
  std::map<int, int> seen;
  std::map<std::pair<std::string, int32_t>, std::map<std::string, int>> last_seq_per_key;
  for (const auto& r : records) {
    REQUIRE(r.key.has_value());
    REQUIRE(r.value.has_value());
    const int seq = SeqOf(r);
    const std::string& type = kAggregateTypes[seq % 3];
    CHECK(r.topic == "outbox.event." + type);
    CHECK(*r.key == type + "-" + std::to_string(seq % 17));
    char id[40];
    std::snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", seq);
    CHECK(HeaderValue(r, "id") == id);
    // jsonb goes out as its JSON text, not as a quoted JSON string.
    CHECK(r.value->front() == '{');
    CHECK(r.value->find("\"text\": \"ünï \\\"q\\\" \\\\ ok\"") != std::string::npos);
    ++seen[seq];
    // Per-key order: within a partition, a key's sequence numbers only grow, once
    // duplicates from a restart are set aside.
    auto& last = last_seq_per_key[{r.topic, r.partition}][*r.key];
    if (seq > last) last = seq;
    else
      CHECK_MESSAGE(seen[seq] > 1,
                    "out of order for key " << *r.key << ": " << seq << " after " << last);
  }
  return seen;
}

// Reads `reader`'s outbox topics until every seq in `wanted` has been seen (duplicates do not
// count) or `timeout` passes, then a little longer, so duplicates that follow are counted too.
// Returns every record read; the caller asserts on what is missing.
inline std::vector<ConsumedRecord> ReadEverySeq(devtools::TopicReader& reader, std::set<int> wanted,
                                                std::chrono::seconds timeout) {
  std::vector<ConsumedRecord> out;
  if (!reader.Assign(OutboxTopics()).ok()) return out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!wanted.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto& r : reader.Poll(std::chrono::milliseconds(500))) {
      wanted.erase(SeqOf(r));
      out.push_back(std::move(r));
    }
  }
  auto extra = reader.Poll(std::chrono::milliseconds(1500));
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

// Seqs 1..total.
inline std::set<int> SeqRange(int total) {
  std::set<int> s;
  for (int i = 1; i <= total; ++i) s.insert(s.end(), i);
  return s;
}

}  // namespace walrelay::testing
