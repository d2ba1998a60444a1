// Shared by the chain and plugin unit tests: where the built plugins are, a record as the
// event router emits it, a chain built from a few config keys, and a log capture.
#pragma once

#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "transform/chain.h"
#include "transform/change_event_source.h"

namespace walrelay::testing {

inline constexpr const char* kEventId = "8f6b8a8e-2c1d-4c55-9b7a-2f3c4d5e6f70";
inline constexpr const char* kLsnText = "16/B374D848";
inline constexpr int64_t kCommitMs = 1700000000123;  // 2023-11-14T22:13:20.123Z

// An example plugin in build/plugins/, or a test plugin in build/tests/plugins/.
inline std::string PluginFile(const std::string& name) {
  return std::string(WALRELAY_PLUGIN_DIR) + "/" + name + ".so";
}
inline std::string TestPluginFile(const std::string& name) {
  return std::string(WALRELAY_TEST_PLUGIN_DIR) + "/" + name + ".so";
}

inline SourceContext TestContext() { return {"shop", "shopdb", "orders-outbox", {}}; }

// An outbox row as PostgreSQL 15 + wal2json render it, with Debezium's default column names.
inline RowChange OutboxChange() {
  RowChange row;
  row.op = ChangeOp::kInsert;
  row.lsn = Lsn::Parse(kLsnText).value();
  row.xid = 771;
  row.schema = "public";
  row.table = "outbox";
  row.commit_time_ms = kCommitMs;
  row.primary_key = {"id"};
  row.columns = {
      {"id", "uuid", ValueKind::kString, kEventId},
      {"aggregatetype", "character varying(255)", ValueKind::kString, "Order"},
      {"aggregateid", "character varying(255)", ValueKind::kString, "42"},
      {"type", "character varying(255)", ValueKind::kString, "OrderCreated"},
      {"payload", "jsonb", ValueKind::kString,
       R"({"total": 12345678901234567890.50, "n": [1, 2]})"},
  };
  return row;
}

// The record the event router makes of OutboxChange() with the type in an `eventType` header.
inline Record RoutedRecord() {
  Record r;
  r.topic = "outbox.event.Order";
  r.key = "42";
  r.value = R"({"total": 12345678901234567890.50, "n": [1, 2]})";
  r.headers = {{"id", kEventId}, {"eventType", "OrderCreated"}};
  r.timestamp_ms = kCommitMs;
  r.source.lsn = Lsn::Parse(kLsnText).value();
  r.source.table = "public.outbox";
  r.source.commit_time_ms = kCommitMs;
  r.source.op = ChangeOp::kInsert;
  r.source.xid = 771;
  return r;
}

inline Properties Config(const std::map<std::string, std::string>& values) {
  return Properties(values);
}

inline Result<TransformChain> BuildChain(const std::map<std::string, std::string>& config) {
  return TransformChain::Build(Config(config), TestContext());
}

inline TransformChain MustBuild(const std::map<std::string, std::string>& config) {
  auto chain = BuildChain(config);
  REQUIRE_MESSAGE(chain.ok(), chain.status().ToString());
  return std::move(chain).value();
}

// A chain of one transform `alias` of `type`, configured with `keys` (short names).
inline TransformChain OneTransform(const std::string& type,
                                   const std::map<std::string, std::string>& keys = {},
                                   const std::string& alias = "t") {
  std::map<std::string, std::string> config = {{"transforms", alias},
                                               {"transforms." + alias + ".type", type}};
  for (const auto& [k, v] : keys) config["transforms." + alias + "." + k] = v;
  return MustBuild(config);
}

// The error Status of building a one-transform chain that must fail.
inline Status BuildError(const std::string& type,
                         const std::map<std::string, std::string>& keys = {}) {
  std::map<std::string, std::string> config = {{"transforms", "t"}, {"transforms.t.type", type}};
  for (const auto& [k, v] : keys) config["transforms.t." + k] = v;
  auto chain = BuildChain(config);
  REQUIRE_FALSE(chain.ok());
  return chain.status();
}

inline std::string HeaderText(const Record& r, const std::string& name) {
  const Header* h = r.FindHeader(name);
  if (h == nullptr) return "(missing)";
  return h->value.value_or("(null)");
}

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Sends spdlog's default logger to a string while alive.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_);
    auto logger = std::make_shared<spdlog::logger>("capture", sink);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::string text() const { return stream_.str(); }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace walrelay::testing
