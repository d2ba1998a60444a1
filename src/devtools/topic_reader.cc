#include "devtools/topic_reader.h"

#include "consumer/internal.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <thread>

namespace walrelay::devtools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kTopicWait = std::chrono::seconds(10);
constexpr int kMetadataTimeoutMs = 5000;

// Connection failures reach error_cb and last_error(); as log lines they would only clutter
// test output, so only critical messages are printed.
void QuietLog(const rd_kafka_t*, int level, const char* fac, const char* buf) {
  if (level <= 2) std::fprintf(stderr, "topic-reader: %s: %s\n", fac, buf);
}

Result<KafkaMetadataPtr> FetchMetadata(rd_kafka_t* rk, int timeout_ms = kMetadataTimeoutMs) {
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, nullptr, &md, timeout_ms);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
    return Status::Kafka(std::string("metadata request failed: ") + rd_kafka_err2str(err));
  return KafkaMetadataPtr(md);
}

ConsumedRecord ToRecord(const rd_kafka_message_t* m) {
  consumer::Message msg = consumer::MessageFromKafka(m);
  ConsumedRecord r;
  r.topic = std::move(msg.topic);
  r.partition = msg.partition;
  r.offset = msg.offset;
  r.key = std::move(msg.key);
  r.value = std::move(msg.value);
  for (auto& h : msg.headers)
    r.headers.push_back(walrelay::Header{std::move(h.key), std::move(h.value)});
  r.timestamp_ms = msg.timestamp_ms;
  return r;
}

std::string Printable(const std::optional<std::string>& s) {
  if (!s) return "(null)";
  std::string out;
  out.reserve(s->size());
  for (unsigned char c : *s) {
    if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string IsoUtc(int64_t ms) {
  // Floor division so pre-1970 timestamps still print a valid time.
  int64_t secs = ms / 1000;
  int64_t frac = ms % 1000;
  if (frac < 0) {
    frac += 1000;
    secs -= 1;
  }
  const std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return "?";
  char buf[64];
  const size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03dZ", static_cast<int>(frac));
  return buf;
}

}  // namespace

Result<std::unique_ptr<TopicReader>> TopicReader::Create(const std::string& bootstrap_servers,
                                                         IsolationLevel isolation) {
  static std::atomic<int> instance{0};
  // librdkafka only allows rd_kafka_assign() on a handle with a group.id. The group is never
  // joined (no subscribe) and nothing is committed; the unique name keeps it that way even if
  // someone adds a subscribe later.
  const std::string group = "walrelay-topic-reader-" + std::to_string(::getpid()) + "-" +
                            std::to_string(instance.fetch_add(1));
  const std::pair<const char*, std::string> settings[] = {
      {"bootstrap.servers", bootstrap_servers},
      {"client.id", "walrelay-topic-reader"},
      {"group.id", group},
      {"enable.auto.commit", "false"},
      {"enable.auto.offset.store", "false"},
      {"enable.partition.eof", "false"},
      {"auto.offset.reset", "earliest"},
      {"isolation.level",
       isolation == IsolationLevel::kReadUncommitted ? "read_uncommitted" : "read_committed"},
      {"allow.auto.create.topics", "false"},
      // Tests wait on single records; the default 500 ms fetch wait would dominate them.
      {"fetch.wait.max.ms", "50"},
      // Tests take brokers down and up; librdkafka's default backoff (up to 10 s) would make
      // the reader lag seconds behind a broker that is back.
      {"reconnect.backoff.max.ms", "500"},
  };

  std::unique_ptr<TopicReader> reader(new TopicReader());
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char errstr[512];
  for (const auto& [name, value] : settings) {
    if (rd_kafka_conf_set(conf, name, value.c_str(), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return Status::Kafka(std::string("topic reader config ") + name + ": " + errstr);
    }
  }
  rd_kafka_conf_set_log_cb(conf, QuietLog);
  rd_kafka_conf_set_error_cb(conf, &TopicReader::ErrorCallback);
  rd_kafka_conf_set_opaque(conf, reader.get());

  // rd_kafka_new takes ownership of conf only on success.
  reader->consumer_.reset(rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr)));
  if (!reader->consumer_) {
    rd_kafka_conf_destroy(conf);
    return Status::Kafka(std::string("cannot create topic reader: ") + errstr);
  }
  // Route error events through rd_kafka_consumer_poll so one call serves everything.
  rd_kafka_poll_set_consumer(reader->consumer_.get());
  return reader;
}

TopicReader::~TopicReader() = default;

void TopicReader::ErrorCallback(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
  (void)rk;
  auto* self = static_cast<TopicReader*>(opaque);
  self->SetLastError(std::string(rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err))) + ": " +
                     reason);
}

void TopicReader::SetLastError(std::string error) {
  std::lock_guard<std::mutex> lock(error_mu_);
  last_error_ = std::move(error);
}

std::string TopicReader::last_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return last_error_;
}

Status TopicReader::AssignExisting(const std::vector<std::string>& topics, int metadata_timeout_ms,
                                   std::set<std::string>& missing, std::string& problem) {
  std::set<std::string> wanted;
  for (const auto& t : topics) {
    const auto it = assigned_.lower_bound({t, std::numeric_limits<int32_t>::min()});
    if (it == assigned_.end() || it->first != t) wanted.insert(t);
  }
  missing = wanted;
  if (wanted.empty()) return Status::Ok();

  auto md = FetchMetadata(consumer_.get(), metadata_timeout_ms);
  if (!md.ok()) {
    problem = md.status().message();
    return Status::Ok();
  }
  KafkaPartitionListPtr list(rd_kafka_topic_partition_list_new(0));
  std::vector<std::pair<std::string, int32_t>> added;
  for (int i = 0; i < (*md)->topic_cnt; ++i) {
    const rd_kafka_metadata_topic_t& t = (*md)->topics[i];
    if (!wanted.count(t.topic)) continue;
    if (t.err != RD_KAFKA_RESP_ERR_NO_ERROR || t.partition_cnt <= 0) {
      if (t.err != RD_KAFKA_RESP_ERR_NO_ERROR)
        problem = std::string(t.topic) + ": " + rd_kafka_err2str(t.err);
      continue;
    }
    for (int32_t p = 0; p < t.partition_cnt; ++p) {
      rd_kafka_topic_partition_list_add(list.get(), t.topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
      added.emplace_back(t.topic, p);
    }
    missing.erase(t.topic);
  }
  if (added.empty()) return Status::Ok();
  // Incremental, so partitions already being read keep their position.
  KafkaErrorPtr error(rd_kafka_incremental_assign(consumer_.get(), list.get()));
  if (error) return Status::Kafka(std::string("assign: ") + rd_kafka_error_string(error.get()));
  assigned_.insert(added.begin(), added.end());
  return Status::Ok();
}

Status TopicReader::Assign(const std::vector<std::string>& topics) {
  // A topic the relay has not produced to yet does not exist, and consumers do not create
  // topics; retry until the producer side has created it.
  const auto deadline = Clock::now() + kTopicWait;
  std::set<std::string> missing;
  std::string problem;
  while (true) {
    WALRELAY_RETURN_IF_ERROR(AssignExisting(topics, kMetadataTimeoutMs, missing, problem));
    if (missing.empty()) return Status::Ok();
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::string names;
  for (const auto& t : missing) names += (names.empty() ? "" : ", ") + t;
  return Status::Kafka("topic(s) " + names + " not found within " +
                       std::to_string(kTopicWait.count()) + " s" +
                       (problem.empty() ? "" : " (" + problem + ")"));
}

void TopicReader::PollInto(std::vector<ConsumedRecord>& out, std::chrono::milliseconds timeout,
                           size_t stop_after) {
  const auto deadline = Clock::now() + timeout;
  do {
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(remaining.count(), 0, 100));
    KafkaMessagePtr msg(rd_kafka_consumer_poll(consumer_.get(), wait_ms));
    if (!msg) continue;
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
    if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::string where;
      if (msg->rkt != nullptr)
        where = std::string(rd_kafka_topic_name(msg->rkt)) + "[" + std::to_string(msg->partition) +
                "]: ";
      SetLastError(where + rd_kafka_message_errstr(msg.get()));
      continue;
    }
    out.push_back(ToRecord(msg.get()));
    if (out.size() >= stop_after) return;
  } while (Clock::now() < deadline);
}

std::vector<ConsumedRecord> TopicReader::Poll(std::chrono::milliseconds timeout) {
  std::vector<ConsumedRecord> out;
  PollInto(out, timeout, std::numeric_limits<size_t>::max());
  return out;
}

Result<std::vector<ConsumedRecord>> TopicReader::ReadAtLeast(const std::vector<std::string>& topics,
                                                             size_t expected,
                                                             std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::vector<ConsumedRecord> out;
  std::set<std::string> missing;
  std::string problem;
  // Topics may appear only once the producer gets through (e.g. after a broker outage), so
  // missing ones are looked up again while polling rather than failing after kTopicWait.
  auto next_lookup = Clock::now();
  while (true) {
    const auto now = Clock::now();
    if (now >= next_lookup) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      const int md_timeout = static_cast<int>(std::clamp<int64_t>(left.count(), 100, 2000));
      WALRELAY_RETURN_IF_ERROR(AssignExisting(topics, md_timeout, missing, problem));
      next_lookup = missing.empty() ? Clock::time_point::max()
                                    : Clock::now() + std::chrono::milliseconds(250);
    }
    if (out.size() >= expected) break;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    PollInto(out, std::min(left, std::chrono::milliseconds(250)), expected);
  }
  if (out.size() < expected && !missing.empty()) {
    std::string names;
    for (const auto& t : missing) names += (names.empty() ? "" : ", ") + t;
    SetLastError("topic(s) " + names + " not found" +
                 (problem.empty() ? "" : " (" + problem + ")"));
  }
  return out;
}

Result<std::vector<std::string>> TopicReader::ListTopics() {
  auto md = FetchMetadata(consumer_.get());
  if (!md.ok()) return md.status();
  std::vector<std::string> names;
  for (int i = 0; i < (*md)->topic_cnt; ++i) {
    const std::string name = (*md)->topics[i].topic;
    if (name.rfind("__", 0) != 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string FormatRecord(const ConsumedRecord& record) {
  std::string out = "topic=" + record.topic + " partition=" + std::to_string(record.partition) +
                    " offset=" + std::to_string(record.offset) + "\n";
  out += "  key: " + Printable(record.key) + "\n";
  out += "  headers: ";
  if (record.headers.empty()) out += "(none)";
  for (size_t i = 0; i < record.headers.size(); ++i) {
    if (i > 0) out += ", ";
    out += Printable(record.headers[i].key) + "=" + Printable(record.headers[i].value);
  }
  out += "\n  timestamp: ";
  out += record.timestamp_ms < 0
             ? "(none)"
             : std::to_string(record.timestamp_ms) + " (" + IsoUtc(record.timestamp_ms) + ")";
  out += "\n  value: " + Printable(record.value);
  return out;
}

}  // namespace walrelay::devtools
