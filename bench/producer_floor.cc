// producer_floor: the CPU a bare librdkafka producer spends to produce a given set of records
// with walrelay's producer settings, the floor librdkafka puts under walrelay's CPU per row.
//
// walrelay's CPU is compared with that of the walsender serving it (docs/performance.md, "CPU
// per row against the walsender"). Part of walrelay's CPU is librdkafka's: copying each record
// into its queue, building and sending batches, reading acknowledgements, delivery reports.
// This program measures that part alone, on the records walrelay wrote (captured from Kafka by
// bench/producer_floor.sh): same topic layout, keys, values, headers and timestamps, same
// number of records, the librdkafka properties walrelay derives from the same connector config
// (ParseRelaySettings: enable.idempotence, acks=all, batch.size, queue bounds, partitioner,
// message.timeout.ms) and walrelay's in-flight bounds (max.queue.size records and
// max.queue.size.in.bytes of topic + key + value, src/delivery/record_pipeline.cc). The loop
// is walrelay's in its simplest form: rd_kafka_producev with RD_KAFKA_MSG_F_COPY and new
// headers per record, rd_kafka_poll(0) every 512 records (walrelay's turn), a blocking
// rd_kafka_poll while at an in-flight bound, a dr_msg_cb that only counts, rd_kafka_flush.
//
// Only the produce phase is timed: the records are read into memory and the topic's metadata
// fetched before it. Printed: the process's CPU-seconds for that phase (getrusage, user +
// system) and each thread's (/proc/self/task/*/schedstat: the main thread, which produces and
// serves the reports, and librdkafka's threads, the broker thread among them).
//
//   build/bench/producer_floor CONFIG RECORDS TOPIC [--rate=ROWS_PER_S] [key=value...]
//
// CONFIG: a walrelay connector config (its kafka.* settings and bounds are used; nothing else).
// RECORDS: records, each: int64 timestamp_ms, int32 key length (-1: null), key, int32 value
// length (-1: null), value, uint32 header count, then per header uint32 name length, name,
// int32 value length (-1: null), value; all little-endian. TOPIC: where they go (any
// partition, as walrelay's records). --rate: produce no faster than this, on average from the
// start (walrelay's own pace, which its walsender sets), serving reports with rd_kafka_poll
// while ahead as walrelay's loop waits for its socket; without it, as fast as the in-flight
// bounds let. key=value: librdkafka properties set over walrelay's.
// Last line: "floor records=N bytes=B wall_s=W cpu_s=C user_s=U sys_s=S main_s=M broker_s=K
// rdk_main_s=R other_s=O delivered=D failed=F".
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/rdkafka_handles.h"
#include "config/connector_config.h"
#include "config/relay_settings.h"

namespace {

using walrelay::KafkaConfPtr;
using walrelay::KafkaHandlePtr;
using walrelay::KafkaHeadersPtr;
using walrelay::KafkaTopicPtr;

constexpr int kRecordsPerTurn = 512;  // src/relay/relay.cc, kMessagesPerTurn
constexpr int kPaceEvery = 64;        // records between checks of --rate

struct Bytes {  // a slice of the records file; null when absent
  const char* data = nullptr;
  size_t size = 0;
};
struct Record {
  int64_t timestamp_ms = 0;
  Bytes key, value;
  std::vector<std::pair<std::string_view, Bytes>> headers;
};

class Reader {
 public:
  explicit Reader(const std::string& buf) : p_(buf.data()), end_(buf.data() + buf.size()) {}
  bool done() const { return p_ == end_; }
  template <typename T>
  T Fixed() {
    T v;
    Need(sizeof v);
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }
  Bytes Slice(int64_t len) {
    if (len < 0) return {};
    Need(static_cast<size_t>(len));
    Bytes b{p_, static_cast<size_t>(len)};
    p_ += len;
    return b;
  }

 private:
  void Need(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) throw std::runtime_error("records file truncated");
  }
  const char* p_;
  const char* end_;
};

std::vector<Record> ParseRecords(const std::string& buf) {
  std::vector<Record> out;
  Reader r(buf);
  while (!r.done()) {
    Record rec;
    rec.timestamp_ms = r.Fixed<int64_t>();
    rec.key = r.Slice(r.Fixed<int32_t>());
    rec.value = r.Slice(r.Fixed<int32_t>());
    const uint32_t n = r.Fixed<uint32_t>();
    for (uint32_t i = 0; i < n; ++i) {
      const Bytes name = r.Slice(r.Fixed<uint32_t>());
      const Bytes value = r.Slice(r.Fixed<int32_t>());
      rec.headers.emplace_back(std::string_view(name.data, name.size), value);
    }
    out.push_back(std::move(rec));
  }
  return out;
}

// Per thread: name and nanoseconds on a CPU so far (schedstat's first field).
std::map<int, std::pair<std::string, double>> ThreadCpu() {
  std::map<int, std::pair<std::string, double>> out;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string base = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(base + "/comm"), sched(base + "/schedstat");
    std::string name;
    double ns = 0;
    std::getline(comm, name);
    sched >> ns;
    out[std::atoi(e->d_name)] = {name, ns / 1e9};
  }
  closedir(dir);
  return out;
}

double RusageSeconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

struct Flight {  // the in-flight bounds, as walrelay's RecordPipeline counts them
  int64_t records = 0;
  int64_t bytes = 0;
  uint64_t delivered = 0;
  uint64_t failed = 0;
  rd_kafka_resp_err_t first_error = RD_KAFKA_RESP_ERR_NO_ERROR;
};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* f = static_cast<Flight*>(opaque);
  if (m->err) {
    if (!f->failed++) f->first_error = m->err;
  } else {
    ++f->delivered;
  }
  --f->records;
  f->bytes -= static_cast<int64_t>(reinterpret_cast<uintptr_t>(m->_private));
}

void OnError(rd_kafka_t*, int err, const char* reason, void*) {
  std::fprintf(stderr, "producer_floor: kafka error %s: %s\n",
               rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err)), reason);
}

int Fail(const std::string& why) {
  std::fprintf(stderr, "producer_floor: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    return Fail("usage: producer_floor CONFIG RECORDS TOPIC [--rate=ROWS_PER_S] [key=value...]");
  }
  const std::string topic = argv[3];
  double rate = 0;

  auto config = walrelay::LoadConnectorConfig(argv[1]);
  if (!config.ok()) return Fail(config.status().message());
  auto settings = walrelay::ParseRelaySettings(*config);
  if (!settings.ok()) return Fail(settings.status().message());
  std::map<std::string, std::string> props = settings->kafka;
  for (int i = 4; i < argc; ++i) {
    if (std::strncmp(argv[i], "--rate=", 7) == 0) {
      rate = std::atof(argv[i] + 7);
      continue;
    }
    const char* eq = std::strchr(argv[i], '=');
    if (!eq) return Fail(std::string("not key=value: ") + argv[i]);
    props[std::string(argv[i], eq - argv[i])] = eq + 1;
  }

  std::ifstream in(argv[2], std::ios::binary);
  if (!in) return Fail(std::string("cannot read ") + argv[2]);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string buf = ss.str();
  std::vector<Record> records;
  try {
    records = ParseRecords(buf);
  } catch (const std::exception& e) {
    return Fail(e.what());
  }

  Flight flight;
  char errstr[512];
  KafkaConfPtr conf(rd_kafka_conf_new());
  for (const auto& [k, v] : props) {
    if (rd_kafka_conf_set(conf.get(), k.c_str(), v.c_str(), errstr, sizeof errstr)) {
      return Fail(k + ": " + errstr);
    }
    std::fprintf(stderr, "producer_floor: %s=%s\n", k.c_str(), v.c_str());
  }
  rd_kafka_conf_set_dr_msg_cb(conf.get(), OnDelivery);
  rd_kafka_conf_set_error_cb(conf.get(), OnError);
  rd_kafka_conf_set_opaque(conf.get(), &flight);
  KafkaHandlePtr rk(rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr));
  if (!rk) return Fail(std::string("rd_kafka_new: ") + errstr);
  conf.release();  // rd_kafka_new took it
  KafkaTopicPtr rkt(rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr));
  // The topic's leader known before the clock starts, as walrelay's metadata prefetch does.
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk.get(), 0, rkt.get(), &md, 10000)) return Fail("no metadata");
  rd_kafka_metadata_destroy(md);

  const int64_t max_records = settings->max_queue_size;
  const int64_t max_bytes = settings->max_queue_size_bytes;  // 0: no byte bound
  std::fprintf(stderr,
               "producer_floor: bounds max.queue.size=%" PRId64 " max.queue.size.in.bytes=%" PRId64
               "\n",
               max_records, max_bytes);
  int64_t payload_bytes = 0;

  rusage ru0, ru1;
  const auto threads0 = ThreadCpu();
  getrusage(RUSAGE_SELF, &ru0);
  const auto t0 = std::chrono::steady_clock::now();
  int turn = 0;
  uint64_t produced = 0;
  const auto elapsed = [&t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (const Record& rec : records) {
    if (rate > 0 && produced % kPaceEvery == 0) {
      const double due = static_cast<double>(produced) / rate;
      for (double ahead; (ahead = due - elapsed()) >= 0.001;) {
        rd_kafka_poll(rk.get(), static_cast<int>(ahead * 1000));
      }
    }
    while (flight.records >= max_records || (max_bytes > 0 && flight.bytes >= max_bytes)) {
      rd_kafka_poll(rk.get(), 1000);
    }
    const int64_t bytes = static_cast<int64_t>(topic.size() + rec.key.size + rec.value.size);
    while (true) {
      KafkaHeadersPtr headers;
      if (!rec.headers.empty()) {
        headers.reset(rd_kafka_headers_new(rec.headers.size()));
        for (const auto& [name, value] : rec.headers) {
          rd_kafka_header_add(headers.get(), name.data(), static_cast<ssize_t>(name.size()),
                              value.data, value.data ? static_cast<ssize_t>(value.size) : 0);
        }
      }
      const rd_kafka_resp_err_t err = rd_kafka_producev(
          rk.get(), RD_KAFKA_V_RKT(rkt.get()), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_KEY(const_cast<char*>(rec.key.data), rec.key.size),
          RD_KAFKA_V_VALUE(const_cast<char*>(rec.value.data), rec.value.size),
          RD_KAFKA_V_TIMESTAMP(rec.timestamp_ms), RD_KAFKA_V_HEADERS(headers.get()),
          RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<uintptr_t>(bytes))),
          RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        headers.release();  // librdkafka owns them now
        break;
      }
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) return Fail(rd_kafka_err2str(err));
      rd_kafka_poll(rk.get(), 100);
    }
    ++produced;
    ++flight.records;
    flight.bytes += bytes;
    payload_bytes += bytes;
    if (++turn == kRecordsPerTurn) {
      rd_kafka_poll(rk.get(), 0);
      turn = 0;
    }
  }
  if (rd_kafka_flush(rk.get(), 120000)) return Fail("flush timed out");
  const double wall = elapsed();
  getrusage(RUSAGE_SELF, &ru1);
  const auto threads1 = ThreadCpu();

  const double user = RusageSeconds(ru1.ru_utime) - RusageSeconds(ru0.ru_utime);
  const double sys = RusageSeconds(ru1.ru_stime) - RusageSeconds(ru0.ru_stime);
  double main_s = 0, broker_s = 0, rdk_main_s = 0, other_s = 0;
  const int self = getpid();
  for (const auto& [tid, now] : threads1) {
    const auto before = threads0.find(tid);
    const double used = now.second - (before != threads0.end() ? before->second.second : 0);
    std::printf("thread %d %s %.3f\n", tid, now.first.c_str(), used);
    if (tid == self) {
      main_s += used;
    } else if (now.first.rfind("rdk:broker", 0) == 0) {
      broker_s += used;
    } else if (now.first == "rdk:main") {
      rdk_main_s += used;
    } else {
      other_s += used;
    }
  }
  std::printf("floor records=%zu bytes=%" PRId64
              " wall_s=%.3f cpu_s=%.3f user_s=%.3f sys_s=%.3f main_s=%.3f broker_s=%.3f "
              "rdk_main_s=%.3f other_s=%.3f delivered=%" PRIu64 " failed=%" PRIu64 "\n",
              records.size(), payload_bytes, wall, user + sys, user, sys, main_s, broker_s,
              rdk_main_s, other_s, flight.delivered, flight.failed);
  if (flight.failed)
    return Fail(std::string("failed deliveries, first: ") + rd_kafka_err2name(flight.first_error));
  return flight.delivered == records.size() ? 0 : Fail("not every record was delivered");
}
