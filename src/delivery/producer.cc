#include "delivery/producer.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "config/connector_config.h"
#include "delivery/topic_name.h"

namespace walrelay {
namespace {

// Set inside a KafkaProducer::DeferCallbacks scope on the thread that runs it.
thread_local bool deferring_callbacks = false;

std::string Printable(const void* data, size_t len) {
  if (!data) return "(null)";
  std::string s(static_cast<const char*>(data), std::min<size_t>(len, 100));
  for (auto& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  return len > 100 ? s + "..." : s;
}

void LogFromLibrdkafka(const rd_kafka_t*, int level, const char* facility, const char* message) {
  // librdkafka's messages never include configured secrets; log them at a matching level.
  if (level <= 3) {
    spdlog::error("kafka: {} {}", facility, message);
  } else if (level <= 4) {
    spdlog::warn("kafka: {} {}", facility, message);
  } else {
    spdlog::debug("kafka: {} {}", facility, message);
  }
}

bool Contains(std::string_view text, std::string_view needle) {
  return text.find(needle) != std::string_view::npos;
}

// librdkafka reports a refused client certificate (the broker's TLS alert arrives after the
// client's half of the handshake) and a dropped connection alike as _TRANSPORT; only the text
// tells them apart. A disconnect during the handshake is left out: a restarting broker
// causes it as well.
bool LooksLikeTlsRefusal(std::string_view reason) {
  return Contains(reason, "certificate") || Contains(reason, "unknown ca") ||
         Contains(reason, "alert handshake failure") ||
         (Contains(reason, "SSL handshake failed") && !Contains(reason, "Disconnected"));
}

// The producer-wide errors that retrying cannot cure, as the Status the relay stops with.
std::optional<Status> ClassifyProducerError(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                                            const std::string& reason) {
  if (err == RD_KAFKA_RESP_ERR__FATAL) {
    char cause_text[512] = "";
    const rd_kafka_resp_err_t cause = rd_kafka_fatal_error(rk, cause_text, sizeof cause_text);
    if (cause == RD_KAFKA_RESP_ERR__FENCED || cause == RD_KAFKA_RESP_ERR_PRODUCER_FENCED) {
      return Status(ErrorCode::kKafkaFenced,
                    std::string("fenced: another process initialised this relay's Kafka "
                                "transactional.id (a standby that took over the slot); nothing "
                                "more commits through this producer (") +
                        cause_text + ")");
    }
    return Status::Kafka(std::string("librdkafka fatal error ") + rd_kafka_err2name(cause) + ": " +
                         cause_text +
                         "; the producer cannot go on. With kafka.enable.idempotence=true (the "
                         "default) the brokers must support idempotent producers and grant the "
                         "principal IDEMPOTENT_WRITE; see the broker's log");
  }
  if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
    return Status(ErrorCode::kKafkaAuthentication,
                  "Kafka refused the login: " + reason +
                      "; check kafka.security.protocol, kafka.sasl.mechanisms, "
                      "kafka.sasl.username and kafka.sasl.password");
  }
  if (err == RD_KAFKA_RESP_ERR__SSL ||
      (err == RD_KAFKA_RESP_ERR__TRANSPORT && LooksLikeTlsRefusal(reason))) {
    return Status(ErrorCode::kKafkaTls,
                  "TLS with the Kafka broker failed: " + reason +
                      "; check kafka.ssl.ca.location (the CA that signed the brokers' "
                      "certificates), kafka.ssl.certificate.location, kafka.ssl.key.location and "
                      "kafka.ssl.key.password (a client certificate the brokers trust), and "
                      "kafka.security.protocol");
  }
  return std::nullopt;
}

}  // namespace

std::string DeliveryErrorText(rd_kafka_resp_err_t error) {
  std::string text = rd_kafka_err2str(error);
  switch (error) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
      return text + " (the record is larger than the topic's max.message.bytes or the broker's "
                    "message.max.bytes; raise those or make the event smaller)";
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
      return text + " (Kafka refuses the topic name: only ASCII letters, digits, '.', '_' and "
                    "'-', at most 249 characters; check the routing of the event)";
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
      return text + " (the topic does not exist and the brokers do not create it, "
                    "auto.create.topics.enable=false: create the topic)";
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
      return text + " (fewer in-sync replicas than the topic's min.insync.replicas: bring the "
                    "replicas back or lower min.insync.replicas)";
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
      return text + " (not acknowledged within errors.retry.timeout: the brokers were "
                    "unreachable, or kept refusing it with a retriable error such as "
                    "NOT_ENOUGH_REPLICAS, fewer in-sync replicas than min.insync.replicas; see "
                    "the broker's log)";
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
      return text + " (the principal may not write to the topic: grant WRITE on it)";
    default: return text;
  }
}

bool IsRecordSpecificError(rd_kafka_resp_err_t error) {
  switch (error) {
    // This record's size: larger than the broker's or the topic's limit, or than the
    // client's kafka.message.max.bytes. The next record may well fit.
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    // This record's topic name, routed from the row's own values, is one Kafka forbids.
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    // The broker refused this record's contents or its timestamp.
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
    // The record outlived errors.retry.timeout: the operator set that bound so that a record
    // Kafka keeps refusing is given up under errors.tolerance=all (the config refuses
    // kafka.message.timeout.ms with errors.tolerance=all so that this happens only then).
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT: return true;
    // Everything else says nothing about the record itself: a fatal or state error stops the
    // whole producer (__FATAL, __STATE, the idempotent producer's sequence errors); a missing
    // or forbidden topic (UNKNOWN_TOPIC_OR_PART, __UNKNOWN_TOPIC, TOPIC_AUTHORIZATION_FAILED)
    // refuses every later record for it too; a purge we did not ask for (__PURGE_QUEUE,
    // __PURGE_INFLIGHT) follows a producer-wide failure. Codes not listed are unknown here,
    // and an unknown cause must not let the slot move past the record.
    default: return false;
  }
}

// Asks the brokers for one topic's metadata at a time, off the caller's thread, because
// rd_kafka_metadata() blocks for a round trip (or its timeout while brokers are down).
class KafkaProducer::MetadataPrefetcher {
 public:
  explicit MetadataPrefetcher(rd_kafka_t* rk) : rk_(rk), thread_([this] { Work(); }) {}
  ~MetadataPrefetcher() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  void Request(const std::string& topic) {
    {
      std::lock_guard lock(mutex_);
      pending_.push_back(topic);
    }
    wake_.notify_one();
  }

 private:
  // Short: a failed request costs nothing but time, librdkafka's own scan still runs.
  static constexpr int kTimeoutMs = 1000;

  void Work() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (stopping_) return;
      const std::string topic = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      KafkaTopicPtr rkt(rd_kafka_topic_new(rk_, topic.c_str(), nullptr));
      const rd_kafka_metadata_t* md = nullptr;
      if (rkt &&
          rd_kafka_metadata(rk_, 0, rkt.get(), &md, kTimeoutMs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
      }
      lock.lock();
    }
  }

  rd_kafka_t* rk_;  // owned by the producer, which outlives this object
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::string> pending_;
  bool stopping_ = false;
  std::thread thread_;
};

KafkaProducer::KafkaProducer() = default;

rd_kafka_topic_t* KafkaProducer::TopicHandle(const std::string& name) {
  auto it = topics_.find(name);
  if (it != topics_.end()) return it->second.get();
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_.get(), name.c_str(), nullptr);
  if (!rkt) return nullptr;
  topics_.emplace(name, rkt);
  prefetcher_->Request(name);
  return rkt;
}

std::string DescribeRecord(const Record& record) {
  std::string out;
  if (const Header* id = record.FindHeader("id"); id && id->value)
    out = "event id " + *id->value + " ";
  out += "(topic '" + record.topic + "', key " +
         (record.key ? "'" + Printable(record.key->data(), record.key->size()) + "'" : "null") +
         ")";
  return out;
}

Result<std::unique_ptr<KafkaProducer>> KafkaProducer::Create(
    const std::map<std::string, std::string>& properties, DeliveryHandler handler,
    FailureHandler on_failure, const std::set<std::string>& hidden_value_keys) {
  KafkaConfPtr conf(rd_kafka_conf_new());
  char errstr[512];
  for (const auto& [key, value] : properties) {
    const rd_kafka_conf_res_t res =
        rd_kafka_conf_set(conf.get(), key.c_str(), value.c_str(), errstr, sizeof errstr);
    if (res == RD_KAFKA_CONF_UNKNOWN) {
      // The value plays no part, and a mistyped secret key ("sasl.pasword") is not known
      // to be secret: show only the key.
      return Status::Config("'kafka." + key + "': " + errstr);
    }
    if (res != RD_KAFKA_CONF_OK) {
      // errstr may echo the value; never show it for secrets or values from a provider.
      const bool hidden = IsSecretKey(key) || hidden_value_keys.count(key) > 0;
      return Status::Config("'kafka." + key + "' = " + DisplayValue(key, value, hidden) + ": " +
                            (hidden ? std::string("invalid value") : std::string(errstr)));
    }
  }
  std::unique_ptr<KafkaProducer> producer(new KafkaProducer());
  producer->handler_ = std::move(handler);
  producer->on_failure_ = std::move(on_failure);
  for (const auto& [key, value] : properties) {
    if (IsSecretKey(key) && !value.empty()) producer->secrets_.push_back(value);
  }
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaProducer::OnDelivery);
  // Served by rd_kafka_poll() on the main queue, so on the caller's thread like the reports.
  rd_kafka_conf_set_error_cb(conf.get(), &KafkaProducer::OnError);
  rd_kafka_conf_set_log_cb(conf.get(), &LogFromLibrdkafka);
  rd_kafka_conf_set_opaque(conf.get(), producer.get());
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (!rk) return Status::Config(std::string("cannot create the Kafka producer: ") + errstr);
  conf.release();  // rd_kafka_new took ownership
  char max_bytes[32];
  size_t max_bytes_len = sizeof max_bytes;
  long message_max = 1000000;
  if (rd_kafka_conf_get(rd_kafka_conf(rk), "message.max.bytes", max_bytes, &max_bytes_len) ==
      RD_KAFKA_CONF_OK) {
    message_max = std::atol(max_bytes);
  }
  // Headers, key and record overhead must fit beside the value.
  producer->max_value_bytes_ = static_cast<size_t>(std::max(0L, message_max - 16384));
  producer->rk_.reset(rk);
  producer->main_queue_.reset(rd_kafka_queue_get_main(rk));
  producer->prefetcher_ = std::make_unique<MetadataPrefetcher>(rk);

  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return Status::Internal("cannot create a pipe");
  producer->event_read_fd_ = fds[0];
  producer->event_write_fd_ = fds[1];
  rd_kafka_queue_io_event_enable(producer->main_queue_.get(), fds[1], "1", 1);
  return producer;
}

KafkaProducer::~KafkaProducer() {
  prefetcher_.reset();
  if (main_queue_) rd_kafka_queue_io_event_enable(main_queue_.get(), -1, nullptr, 0);
  main_queue_.reset();
  topics_.clear();
  rk_.reset();
  if (event_read_fd_ >= 0) close(event_read_fd_);
  if (event_write_fd_ >= 0) close(event_write_fd_);
}

Status KafkaProducer::Produce(const Record& record, uint64_t ticket,
                              rd_kafka_resp_err_t* error_code) {
  // librdkafka sends any name; refusing here fails the record the same way on every broker.
  // A topic with a handle passed this check when its handle was made: checking each record's
  // name again cost more than the lookup.
  const auto known = topics_.find(record.topic);
  if (known == topics_.end()) {
    if (Status invalid = CheckTopicName(record.topic); !invalid.ok()) {
      if (error_code) *error_code = RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION;
      return Status::Kafka("cannot produce " + DescribeRecord(record) + ": " + invalid.message());
    }
  }
  KafkaHeadersPtr headers;
  if (!record.headers.empty()) {
    headers.reset(rd_kafka_headers_new(record.headers.size()));
    for (const auto& h : record.headers) {
      rd_kafka_header_add(headers.get(), h.key.data(), static_cast<ssize_t>(h.key.size()),
                          h.value ? h.value->data() : nullptr,
                          h.value ? static_cast<ssize_t>(h.value->size()) : 0);
    }
  }
  const void* key_data = record.key ? record.key->data() : nullptr;
  const size_t key_size = record.key ? record.key->size() : 0;
  void* value_data = record.value ? const_cast<char*>(record.value->data()) : nullptr;
  const size_t value_size = record.value ? record.value->size() : 0;
  const int32_t partition =
      record.partition == kAnyPartition ? RD_KAFKA_PARTITION_UA : record.partition;
  void* opaque = reinterpret_cast<void*>(static_cast<uintptr_t>(ticket));
  rd_kafka_topic_t* rkt = known != topics_.end() ? known->second.get() : TopicHandle(record.topic);
  if (!rkt) {
    if (error_code) *error_code = rd_kafka_last_error();
    return Status::Kafka("cannot produce " + DescribeRecord(record) + ": " +
                         rd_kafka_err2str(rd_kafka_last_error()));
  }
  const rd_kafka_resp_err_t err = rd_kafka_producev(
      rk_.get(), RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(partition),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key_data, key_size),
      RD_KAFKA_V_VALUE(value_data, value_size), RD_KAFKA_V_TIMESTAMP(record.timestamp_ms),
      RD_KAFKA_V_HEADERS(headers.get()), RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    headers.release();  // librdkafka owns them now
    return Status::Ok();
  }
  // QUEUE_FULL included: waiting for room here would block the caller's loop; the caller
  // keeps the record and tries again after delivery reports have made room.
  if (error_code) *error_code = err;
  return Status::Kafka("cannot produce " + DescribeRecord(record) + ": " + rd_kafka_err2str(err));
}

// librdkafka is C: an exception unwinding through its frames would skip its cleanup and end
// the process (std::terminate) with nothing said. The callbacks catch everything and stop the
// producer instead; the record whose report was being served stays unconfirmed.
void KafkaProducer::OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
  auto* self = static_cast<KafkaProducer*>(opaque);
  try {
    std::optional<DeliveryReport> report = self->MakeReport(m);
    if (!report) {
      if (m->err && !deferring_callbacks) self->ReportFatalErrorFirst(rk);
      return;
    }
    if (deferring_callbacks) return self->Defer(std::move(*report));
    self->ServeDelivery(rk, *report);
  } catch (const std::exception& e) {
    self->ReportCallbackException("a delivery report", e.what());
  } catch (...) {
    self->ReportCallbackException("a delivery report", "an exception of unknown type");
  }
}

void KafkaProducer::OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque) {
  auto* self = static_cast<KafkaProducer*>(opaque);
  try {
    if (deferring_callbacks) return self->Defer(DeferredError{err, reason ? reason : ""});
    self->ServeError(rk, err, reason);
  } catch (const std::exception& e) {
    self->ReportCallbackException("a producer error", e.what());
  } catch (...) {
    self->ReportCallbackException("a producer error", "an exception of unknown type");
  }
}

KafkaProducer::DeferCallbacks::DeferCallbacks() : outer_(deferring_callbacks) {
  deferring_callbacks = true;
}
KafkaProducer::DeferCallbacks::~DeferCallbacks() { deferring_callbacks = outer_; }

void KafkaProducer::Defer(Deferred callback) {
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    deferred_.push_back(std::move(callback));
  }
  // The loop waits on the queue's descriptor, and this callback emptied the queue.
  const char wake = '1';
  [[maybe_unused]] ssize_t written = write(event_write_fd_, &wake, 1);
}

int KafkaProducer::ServeDeferred() {
  std::vector<Deferred> kept;
  {
    std::lock_guard<std::mutex> lock(deferred_mutex_);
    if (deferred_.empty()) return 0;
    kept.swap(deferred_);
  }
  for (const Deferred& callback : kept) {
    try {
      if (const auto* report = std::get_if<DeliveryReport>(&callback)) {
        ServeDelivery(rk_.get(), *report);
      } else {
        const auto& error = std::get<DeferredError>(callback);
        ServeError(rk_.get(), error.code, error.reason.c_str());
      }
    } catch (const std::exception& e) {
      ReportCallbackException("a deferred callback", e.what());
    } catch (...) {
      ReportCallbackException("a deferred callback", "an exception of unknown type");
    }
  }
  return static_cast<int>(kept.size());
}

void KafkaProducer::ReportCallbackException(const char* serving, const char* what) noexcept {
  try {
    ReportFailure(Status::Internal(std::string("internal error while serving ") + serving +
                                   " from librdkafka: " + what +
                                   "; the producer stops and nothing after the record is "
                                   "confirmed"));
  } catch (...) {
    // Reporting failed as well (out of memory): a stop with nothing said would look like a
    // clean one, and continuing could confirm past the record.
    std::fputs("walrelay: internal error in a librdkafka callback; aborting\n", stderr);
    std::abort();
  }
}

std::optional<DeliveryReport> KafkaProducer::MakeReport(const rd_kafka_message_t* m) const {
  DeliveryReport report{
      static_cast<uint64_t>(reinterpret_cast<uintptr_t>(m->_private)), m->err, {}, {}};
  if (report.ticket == kNoReport) return std::nullopt;
  if (m->err) {
    std::string id;
    rd_kafka_headers_t* hdrs = nullptr;
    if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const void* v = nullptr;
      size_t len = 0;
      if (rd_kafka_header_get_last(hdrs, "id", &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR && v)
        id = "event id " + Printable(v, len) + " ";
    }
    report.description = id + "(topic '" + rd_kafka_topic_name(m->rkt) + "', partition " +
                         std::to_string(m->partition) + ", key " +
                         (m->key ? "'" + Printable(m->key, m->key_len) + "'" : "null") + ")";
    Record& failed = report.failed;
    failed.topic = rd_kafka_topic_name(m->rkt);
    if (m->key) failed.key.emplace(static_cast<const char*>(m->key), m->key_len);
    if (m->payload) failed.value.emplace(static_cast<const char*>(m->payload), m->len);
    rd_kafka_timestamp_type_t ts_type;
    failed.timestamp_ms = rd_kafka_message_timestamp(m, &ts_type);
    if (hdrs) {
      const char* name = nullptr;
      const void* value = nullptr;
      size_t size = 0;
      for (size_t i = 0;
           rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
           ++i) {
        failed.headers.push_back(Header{name, value ? std::optional<std::string>(std::string(
                                                          static_cast<const char*>(value), size))
                                                    : std::nullopt});
      }
    }
  }
  return report;
}

void KafkaProducer::ServeDelivery(rd_kafka_t* rk, const DeliveryReport& report) {
  if (report.error) ReportFatalErrorFirst(rk);
  handler_(report);
}

void KafkaProducer::ServeError(rd_kafka_t* rk, int err, const char* reason) {
  std::string text = reason ? reason : "";
  // librdkafka does not put configured secrets in its errors; a broker's text might echo one.
  for (const auto& secret : secrets_) {
    for (size_t pos; (pos = text.find(secret)) != std::string::npos;)
      text.replace(pos, secret.size(), "[hidden]");
  }
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  std::optional<Status> failure = ClassifyProducerError(rk, code, text);
  if (!failure) {
    // What librdkafka logs itself for an error when no error_cb is set.
    spdlog::error("kafka: ERROR {}: {}", rd_kafka_name(rk), text);
    return;
  }
  ReportFailure(*failure);
}

void KafkaProducer::ReportFailure(const Status& failure) {
  if (!failure_.ok()) return;  // librdkafka repeats it on every reconnect attempt
  failure_ = failure;
  if (on_failure_) on_failure_(failure_);
}

void KafkaProducer::ReportFatalErrorFirst(rd_kafka_t* rk) {
  // As librdkafka raises a fatal error it fails the records in flight with the broker's error
  // and purges those queued; the relay must learn the real cause before their reports, or it
  // would stop naming one refused record instead.
  if (!failure_.ok() || rd_kafka_fatal_error(rk, nullptr, 0) == RD_KAFKA_RESP_ERR_NO_ERROR) return;
  if (auto fatal = ClassifyProducerError(rk, RD_KAFKA_RESP_ERR__FATAL, "")) ReportFailure(*fatal);
}

int KafkaProducer::Poll() {
  const int kept = ServeDeferred();
  return kept + rd_kafka_poll(rk_.get(), 0);
}

void KafkaProducer::ClearEvent() {
  char buf[64];
  while (read(event_read_fd_, buf, sizeof buf) > 0) {
  }
}

int KafkaProducer::OutstandingMessages() const { return rd_kafka_outq_len(rk_.get()); }

Result<std::string> KafkaProducer::CheckBrokers(int timeout_ms) {
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk_.get(), 0, nullptr, &md, timeout_ms);
  if (err) {
    Poll();  // serves the error callback, which may say why
    if (!failure_.ok()) return failure_;
    return Status::Kafka(
        std::string("no answer from the brokers in 'kafka.bootstrap.servers' within ") +
        std::to_string(timeout_ms) + " ms: " + rd_kafka_err2str(err));
  }
  std::string out = std::to_string(md->broker_cnt) + " broker(s) reachable";
  rd_kafka_metadata_destroy(md);
  return out;
}

void KafkaProducer::PurgeAll() {
  rd_kafka_purge(rk_.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  rd_kafka_poll(rk_.get(), 0);
}

}  // namespace walrelay
