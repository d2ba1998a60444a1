#include "config/relay_settings.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>

#include "common/regex_limits.h"
#include "convert/converters.h"
#include "delivery/topic_name.h"
#include "delivery/transactional_ids.h"
#include "transform/connect_column.h"

namespace walrelay {
namespace {

constexpr const char* kAcceptedWithoutEffect[] = {
    "connector.class",
    "tasks.max",
    "snapshot.mode",
    "max.batch.size",
    "poll.interval.ms",
    "heartbeat.interval.ms",
    "provide.transaction.metadata",
    "schema.include.list",
    "include.schema.changes",
    "database.server.name",
    "lsn.flush.mode",
    "slot.max.retries",
    "errors.log.enable",
    "errors.log.include.messages",
    "retriable.restart.connector.wait.ms",
    "errors.deadletterqueue.topic.replication.factor",
    "errors.retry.delay.max.ms",
};

bool IsPlainTableName(const std::string& s) {
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$'))
      return false;
  }
  return std::count(s.begin(), s.end(), '.') == 1;
}

Result<ListenerAddress> ParseListener(const std::string& key, const std::string& value) {
  ListenerAddress address;
  std::string scheme;
  for (const char* candidate : {"http://", "https://"}) {
    if (value.rfind(candidate, 0) == 0) scheme = candidate;
  }
  if (scheme.empty()) {
    return Status::Config("'" + key + "' must be http://host:port or https://host:port, got '" +
                          value + "'");
  }
  address.https = scheme == "https://";
  std::string rest = value.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::string port_text;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return Status::Config("'" + key + "' must be " + scheme + "host:port, got '" + value + "'");
    }
    address.host = rest.substr(1, close - 1);
    port_text = rest.substr(close + 2);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos) {
      return Status::Config("'" + key + "' must be " + scheme + "host:port, got '" + value + "'");
    }
    address.host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
  }
  // Kafka Connect reads an empty host as every interface.
  if (address.host.empty()) address.host = "0.0.0.0";
  if (address.host == "localhost") address.host = "127.0.0.1";
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535) {
    return Status::Config("'" + key + "' has an invalid port in '" + value + "'");
  }
  address.port = static_cast<uint16_t>(port);
  in6_addr ignored;
  if (inet_pton(AF_INET, address.host.c_str(), &ignored) != 1 &&
      inet_pton(AF_INET6, address.host.c_str(), &ignored) != 1) {
    return Status::Config("'" + key + "' needs an IP address (or localhost) as host, got '" +
                          address.host + "'");
  }
  return address;
}

// The PEM files of an https listener: both required, both readable now, so `validate` and a
// start report a wrong path before anything else (their contents are checked when the server
// loads them).
Status ParseHttpsFiles(const Properties& p, const std::set<std::string>& provider_keys,
                       ListenerAddress& listener) {
  constexpr const char* kCertKey = "listeners.https.ssl.certificate.location";
  constexpr const char* kKeyKey = "listeners.https.ssl.key.location";
  if (!listener.https) {
    for (const char* key : {kCertKey, kKeyKey}) {
      if (p.Has(key)) {
        return Status::Config("'" + std::string(key) + "' is set but 'listeners' is http://...; " +
                              "use an https:// listener or remove the key");
      }
    }
    return Status::Ok();
  }
  for (auto [key, out] :
       {std::pair{kCertKey, &listener.certificate_path}, std::pair{kKeyKey, &listener.key_path}}) {
    *out = Trim(p.GetString(key, ""));
    if (out->empty()) {
      return Status::Config("'listeners' is https://... but '" + std::string(key) +
                            "' is not set; it must name a PEM file (" +
                            (key == kCertKey ? "the server certificate, then any intermediates"
                                             : "the certificate's private key, unencrypted") +
                            ")");
    }
    // A path that came through ${env:} or ${file:} is not repeated.
    const std::string shown = provider_keys.count(key) ? "the file it names" : "'" + *out + "'";
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    const int fd = open(out->c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      return Status::Config("'" + std::string(key) + "': cannot read " + shown + ": " +
                            std::strerror(errno));
    }
    struct stat st {};
    const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!regular) {
      return Status::Config("'" + std::string(key) + "': " + shown + " is not a regular file");
    }
  }
  return Status::Ok();
}

Status ParseRestAuth(const Properties& p, RestAuthSettings& auth) {
  constexpr const char* kToken = "rest.auth.token";
  constexpr const char* kUser = "rest.auth.basic.username";
  constexpr const char* kPassword = "rest.auth.basic.password";
  // A key that is present but empty (an empty secret file, an unset variable) would otherwise
  // leave the endpoints open without anyone noticing. Errors never show the values.
  for (const char* key : {kToken, kUser, kPassword}) {
    if (auto v = p.Get(key); v && v->empty()) {
      return Status::Config("'" + std::string(key) + "' is empty; set a value or remove the key");
    }
  }
  auth.token = p.GetString(kToken, "");
  auth.basic_username = p.GetString(kUser, "");
  auth.basic_password = p.GetString(kPassword, "");
  for (char c : auth.token) {
    if (std::isspace(static_cast<unsigned char>(c)) ||
        std::iscntrl(static_cast<unsigned char>(c))) {
      return Status::Config("'" + std::string(kToken) +
                            "' contains whitespace or a control character; a bearer token cannot");
    }
  }
  if (auth.basic_username.empty() != auth.basic_password.empty()) {
    return Status::Config(std::string("'") + (auth.basic_username.empty() ? kUser : kPassword) +
                          "' is missing; basic auth needs both '" + kUser + "' and '" + kPassword +
                          "'");
  }
  if (auth.basic_username.find(':') != std::string::npos) {
    return Status::Config("'" + std::string(kUser) +
                          "' contains ':', which basic auth cannot carry");
  }
  for (const std::string& host : p.GetList("rest.allowed.hosts", {})) {
    if (host.find_first_of(":/[] ") != std::string::npos) {
      return Status::Config("'rest.allowed.hosts' entry '" + host +
                            "' must be a host name without port or scheme");
    }
    auth.allowed_hosts.push_back(ToLower(host));
  }
  return Status::Ok();
}

// A slot position is confirmed once Kafka acknowledged every record up to it, so each
// librdkafka setting that lets an acknowledgement mean less than "in every in-sync replica",
// or that gives records up without the relay knowing, would confirm rows that can be lost.
Status CheckDurableProducer(const Properties& p, bool errors_tolerance_all) {
  auto refuse = [](const std::string& key, const std::string& value, const std::string& why) {
    return Status::Config("'" + key + "' = '" + value + "' " + why +
                          "; remove it, or set producer.durability.checks=false to accept "
                          "that risk (see docs/configuration.md)");
  };
  // librdkafka reads request.required.acks and delivery.timeout.ms as aliases.
  for (const char* key : {"kafka.acks", "kafka.request.required.acks"}) {
    if (auto v = p.Get(key); v && ToLower(Trim(*v)) != "all" && Trim(*v) != "-1") {
      return refuse(key, *v,
                    "lets Kafka acknowledge a record that not every in-sync replica has, so a "
                    "confirmed row can be lost when a broker fails; walrelay needs acks=all");
    }
  }
  if (auto v = p.Get("kafka.enable.idempotence"); v && ToLower(Trim(*v)) != "true") {
    return refuse("kafka.enable.idempotence", *v,
                  "lets retries reorder or duplicate records of a partition");
  }
  if (auto v = p.Get("kafka.delivery.report.only.error"); v && ToLower(Trim(*v)) == "true") {
    return refuse("kafka.delivery.report.only.error", *v,
                  "suppresses the acknowledgements the slot position is confirmed by, so the "
                  "slot would never advance");
  }
  if (errors_tolerance_all) {
    for (const char* key : {"kafka.message.timeout.ms", "kafka.delivery.timeout.ms"}) {
      if (auto v = p.Get(key); v && Trim(*v) != "0") {
        return refuse(key, *v,
                      "with errors.tolerance=all makes a record that waits out a broker outage "
                      "time out and be skipped or dead-lettered; use errors.retry.timeout to "
                      "bound retries deliberately");
      }
    }
  }
  return Status::Ok();
}

// exactly.once.support and its companions. Without exactly.once.support the companions are
// ignored with a warning (a config written for Connect's workers may carry them); with it they
// are checked.
Status ParseExactlyOnce(const Properties& p, ExactlyOnceSettings& eos) {
  if (!p.Get("exactly.once.support")) {
    for (const char* key : {"transaction.boundary", "transaction.boundary.interval.ms",
                            "transaction.boundary.max.records", "transaction.boundary.max.bytes",
                            "transaction.boundary.split.ms", "transactional.id"}) {
      if (p.Get(key)) {
        spdlog::warn("'{}' is ignored: 'exactly.once.support' is not set, the relay delivers at "
                     "least once",
                     key);
      }
    }
    return Status::Ok();
  }
  auto support = p.GetEnum("exactly.once.support", "requested", {"requested", "required"});
  if (!support.ok()) return support.status();
  eos.support =
      *support == "required" ? ExactlyOnceSupport::kRequired : ExactlyOnceSupport::kRequested;
  auto boundary = p.GetEnum("transaction.boundary", "interval", {"interval", "source.commit"});
  if (!boundary.ok()) return boundary.status();
  eos.boundary.mode = *boundary == "source.commit" ? TransactionBoundaryMode::kEverySourceCommit
                                                   : TransactionBoundaryMode::kGrouped;
  auto interval = p.GetInt("transaction.boundary.interval.ms", 25, 1, 3600000);
  if (!interval.ok()) return interval.status();
  eos.boundary.interval = std::chrono::milliseconds(*interval);
  auto max_records = p.GetInt("transaction.boundary.max.records", 0, 0, INT64_MAX);
  if (!max_records.ok()) return max_records.status();
  eos.boundary.max_records = *max_records;
  auto max_bytes = p.GetInt("transaction.boundary.max.bytes", 0, 0, INT64_MAX);
  if (!max_bytes.ok()) return max_bytes.status();
  eos.boundary.max_bytes = *max_bytes;
  // A third of Kafka's transaction timeout unless set: the commit's flush and the commit
  // itself then have the other two thirds. Checked against the timeout with the kafka.* keys.
  auto timeout = p.GetInt("kafka.transaction.timeout.ms", 60000, 1000, INT32_MAX);
  if (!timeout.ok()) return timeout.status();
  const int64_t transaction_timeout_ms = *timeout;
  auto split = p.GetInt("transaction.boundary.split.ms",
                        std::max<int64_t>(1, transaction_timeout_ms / 3), 1, INT32_MAX);
  if (!split.ok()) return split.status();
  if (*split >= transaction_timeout_ms)
    return Status::Config("'transaction.boundary.split.ms' is " + std::to_string(*split) +
                          ": it must be below kafka.transaction.timeout.ms (" +
                          std::to_string(transaction_timeout_ms) +
                          "), or Kafka aborts a long source transaction's Kafka transaction "
                          "before it is split");
  eos.boundary.split_after = std::chrono::milliseconds(*split);
  eos.transactional_id = p.Get("transactional.id").value_or("");
  return CheckTransactionalId(eos.transactional_id);
}

// offsets.storage.* and offset.flush.interval.ms: the durable source position, kept in both
// delivery modes. Exactly once needs the topic named (Connect's KIP-618 connectors do too);
// at least once defaults to a topic of the connector's own.
Status ParseOffsetStorage(const Properties& p, const std::string& name, bool exactly_once,
                          OffsetStorageSettings& offsets) {
  if (auto topic = p.Get("offsets.storage.topic")) {
    offsets.topic = Trim(*topic);
  } else if (exactly_once) {
    return Status::Config("'offsets.storage.topic' is required with 'exactly.once.support': the "
                          "topic where the relay stores its source position (one per connector)");
  } else {
    offsets.topic = DefaultOffsetsTopic(name);
  }
  if (Status invalid = CheckTopicName(offsets.topic); !invalid.ok())
    return Status::Config("offsets.storage.topic: " + invalid.message());
  auto partitions = p.GetInt("offsets.storage.partitions", 1, 1, 10000);
  if (!partitions.ok()) return partitions.status();
  offsets.partitions = static_cast<int32_t>(*partitions);
  auto replication = p.GetInt("offsets.storage.replication.factor", -1, -1, 32767);
  if (!replication.ok()) return replication.status();
  if (*replication == 0) {
    return Status::Config("'offsets.storage.replication.factor' is 0; use -1 (the broker's "
                          "default) or a positive number of replicas");
  }
  offsets.replication_factor = static_cast<int16_t>(*replication);
  auto flush = p.GetInt("offset.flush.interval.ms", 60000, 100, 86400000);
  if (!flush.ok()) return flush.status();
  offsets.flush_interval = std::chrono::milliseconds(*flush);
  return Status::Ok();
}

size_t CountCommaItems(const std::string& list) {
  return static_cast<size_t>(std::count(list.begin(), list.end(), ',')) + 1;
}

// database.port: one port for every host, or (libpq's multi-host form) one per host of
// database.hostname, comma-separated. Returned as libpq's `port` value.
Result<std::string> ParsePorts(const Properties& p, size_t hosts) {
  const std::string value = Trim(p.GetString("database.port", "5432"));
  std::vector<std::string> ports;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    ports.push_back(
        Trim(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (ports.size() != 1 && ports.size() != hosts)
    return Status::Config("'database.port' names " + std::to_string(ports.size()) + " ports for " +
                          std::to_string(hosts) +
                          " hosts in 'database.hostname'; give one port, or one per host");
  std::string joined;
  for (const std::string& port : ports) {
    int number = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (ec != std::errc() || end != port.data() + port.size() || number < 1 || number > 65535)
      return Status::Config("'database.port' must be a port number from 1 to 65535 (or one per "
                            "host, comma-separated), got '" +
                            value + "'");
    joined += (joined.empty() ? "" : ",") + std::to_string(number);
  }
  return joined;
}

bool IsPlainIdentifier(const std::string& s) {
  if (s.empty() || s.size() > 63 || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$')) return false;
  }
  return true;
}

// source.mode and the polling.* keys. Polling reads one table, whose rows it deletes or marks,
// so table.include.list must name exactly that table; exactly once is refused (a Kafka
// transaction cannot include the table's marks: docs/polling.md).
Status ParseSourceMode(const Properties& p, RelaySettings& s) {
  auto mode = p.GetEnum("source.mode", "replication", {"replication", "polling"});
  if (!mode.ok()) return mode.status();
  if (*mode == "replication") {
    for (const char* key :
         {"polling.interval.ms", "polling.batch.size", "polling.mark", "polling.order.column",
          "polling.lease.retry.ms", "polling.unread.check.ms"}) {
      if (p.Get(key)) spdlog::warn("'{}' is ignored: 'source.mode' is 'replication'", key);
    }
    return Status::Ok();
  }
  s.source_mode = SourceMode::kPolling;
  if (s.table_include.size() != 1 || !IsPlainTableName(s.table_include[0])) {
    return Status::Config("'table.include.list' must name exactly one table as schema.table with "
                          "'source.mode'=polling (the outbox table that is polled), got '" +
                          p.GetString("table.include.list", "public.outbox") + "'");
  }
  PollingSettings& polling = s.polling;
  const std::string& qualified = s.table_include[0];
  polling.schema = qualified.substr(0, qualified.find('.'));
  polling.table = qualified.substr(qualified.find('.') + 1);
  if (!IsPlainIdentifier(polling.schema) || !IsPlainIdentifier(polling.table)) {
    return Status::Config("'table.include.list' entry '" + qualified +
                          "' is not a plain schema.table name");
  }
  polling.order_column = Trim(p.GetString("polling.order.column", polling.order_column));
  if (!IsPlainIdentifier(polling.order_column)) {
    return Status::Config("'polling.order.column' must be a column name, got '" +
                          polling.order_column + "'");
  }
  auto interval = p.GetInt("polling.interval.ms", polling.interval_ms, 1, 3600000);
  if (!interval.ok()) return interval.status();
  polling.interval_ms = *interval;
  auto batch = p.GetInt("polling.batch.size", polling.batch_size, 1, 100000);
  if (!batch.ok()) return batch.status();
  polling.batch_size = *batch;
  auto lease_retry = p.GetInt("polling.lease.retry.ms", polling.lease_retry_ms, 1, 3600000);
  if (!lease_retry.ok()) return lease_retry.status();
  polling.lease_retry_ms = *lease_retry;
  auto unread_check = p.GetInt("polling.unread.check.ms", polling.unread_check_ms, 0, 86400000);
  if (!unread_check.ok()) return unread_check.status();
  polling.unread_check_ms = *unread_check;
  const std::string mark = Trim(p.GetString("polling.mark", "delete"));
  if (mark.starts_with("column:")) {
    polling.mark_column = Trim(mark.substr(7));
    if (!IsPlainIdentifier(polling.mark_column)) {
      return Status::Config(
          "'polling.mark' must be 'delete' or 'column:<timestamp column>', got '" + mark + "'");
    }
  } else if (mark != "delete") {
    return Status::Config("'polling.mark' must be 'delete' or 'column:<timestamp column>', got '" +
                          mark + "'");
  }
  return Status::Ok();
}

}  // namespace

std::string DefaultOffsetsTopic(const std::string& name) {
  std::string topic = "walrelay-offsets-";
  for (char c : name) {
    const bool legal =
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    topic += legal ? c : '_';
  }
  return topic.substr(0, 249);
}

bool IsAcceptedWithoutEffect(const std::string& key) {
  for (const char* k : kAcceptedWithoutEffect)
    if (key == k) return true;
  return false;
}

bool ListenerAddress::IsLoopback() const {
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool RelaySettings::IncludesMessagePrefix(const std::string& prefix) const {
  auto any_matches = [&prefix](const std::vector<std::regex>& patterns) {
    for (const auto& re : patterns)
      if (std::regex_match(prefix, re)) return true;
    return false;
  };
  if (!message_prefix_include.empty()) return any_matches(message_prefix_include);
  return !any_matches(message_prefix_exclude);
}

bool RelaySettings::IncludesTable(const std::string& qualified_table) const {
  for (const auto& re : table_include_regex)
    if (std::regex_match(qualified_table, re)) return true;
  return false;
}

std::set<std::string> RelaySettings::ProvidedKafkaKeys() const {
  std::set<std::string> out;
  for (const auto& key : provider_keys)
    if (key.starts_with("kafka.")) out.insert(key.substr(6));
  return out;
}

std::vector<std::string> RelaySettings::PlainIncludedTables() const {
  std::vector<std::string> out;
  for (const auto& t : table_include)
    if (IsPlainTableName(t)) out.push_back(t);
  return out;
}

std::string RelaySettings::Wal2JsonAddTables() const {
  std::string out;
  for (const auto& t : table_include) {
    if (!IsPlainTableName(t)) return "";
    if (!out.empty()) out += ',';
    out += t;
  }
  return out;
}

namespace {
// librdkafka 2.0's defaults for queue.buffering.max.messages and queue.buffering.max.kbytes.
constexpr int64_t kLibrdkafkaDefaultQueueMessages = 100000;
constexpr int64_t kLibrdkafkaDefaultQueueKbytes = 1048576;
// Kafka Connect's producer default for max.request.size: the largest record Debezium sends.
constexpr int64_t kConnectMaxRequestSize = 1048576;
// librdkafka's default batch.size, and how many batches the in-flight byte bound is split into.
constexpr int64_t kLibrdkafkaDefaultBatchBytes = 1000000;
constexpr int64_t kBatchesPerInflightBound = 2;
}  // namespace

Result<RelaySettings> ParseRelaySettings(const ConnectorConfig& config) {
  const Properties& p = config.properties;
  RelaySettings s;
  s.name = config.name;
  s.properties = p;
  s.provider_keys = config.provider_keys;

  const std::string listeners = Trim(p.GetString("listeners", "http://127.0.0.1:8083"));
  if (listeners.find(',') != std::string::npos) {
    return Status::Config("'listeners' names more than one listener; walrelay serves one");
  }
  auto listener = ParseListener("listeners", listeners);
  if (!listener.ok()) return listener.status();
  s.listener = *listener;
  if (Status st = ParseHttpsFiles(p, config.provider_keys, s.listener); !st.ok()) return st;
  if (Status st = ParseRestAuth(p, s.rest_auth); !st.ok()) return st;
  auto max_connections = p.GetInt("rest.max.connections", s.listener.max_connections, 1, 10000);
  if (!max_connections.ok()) return max_connections.status();
  s.listener.max_connections = static_cast<int>(*max_connections);
  if (p.Get("log.level")) {
    auto checked =
        p.GetEnum("log.level", "info", {"trace", "debug", "info", "warn", "error", "off"});
    if (!checked.ok()) return checked.status();
    s.log_level = *checked;
  }
  auto log_format = p.GetEnum("log.format", "text", {"text", "json"});
  if (!log_format.ok()) return log_format.status();
  s.log_format = *log_format;
  auto progress = p.GetInt("log.progress.interval.ms", 60000, 0, 86400000);
  if (!progress.ok()) return progress.status();
  s.progress_interval_ms = *progress;

  if (Status st = ParseExactlyOnce(p, s.exactly_once); !st.ok()) return st;
  // Said before the keys exactly once would need next: they do not matter with polling.
  if (s.exactly_once.enabled() && ToLower(Trim(p.GetString("source.mode", ""))) == "polling") {
    return Status::Config("'exactly.once.support' is not supported with 'source.mode'=polling: "
                          "the row marks cannot join a Kafka transaction; remove one of them");
  }
  if (Status st = ParseOffsetStorage(p, s.name, s.exactly_once.enabled(), s.offsets); !st.ok())
    return st;
  if (s.exactly_once.enabled() && s.exactly_once.transactional_id.empty()) {
    s.exactly_once.transactional_id = DefaultTransactionalId(s.name);
  }

  if (auto cls = p.Get("connector.class");
      cls && *cls != "io.debezium.connector.postgresql.PostgresConnector") {
    return Status::Config("'connector.class' is " + *cls +
                          "; walrelay replaces io.debezium.connector.postgresql.PostgresConnector");
  }

  auto host = p.GetRequired("database.hostname");
  if (!host.ok()) return host.status();
  auto port = ParsePorts(p, CountCommaItems(*host));
  if (!port.ok()) return port.status();
  auto user = p.GetRequired("database.user");
  if (!user.ok()) return user.status();
  auto dbname = p.GetRequired("database.dbname");
  if (!dbname.ok()) return dbname.status();
  s.dbname = *dbname;
  auto sslmode = p.GetEnum("database.sslmode", "prefer",
                           {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"});
  if (!sslmode.ok()) return sslmode.status();
  // libpq tries GSSAPI encryption first by default, which initialises Kerberos (about half a
  // megabyte of memory, and a lookup of credentials) on every connection; walrelay asks for
  // it only when configured, as JDBC users enable Kerberos explicitly too.
  auto gssencmode = p.GetEnum("database.gssencmode", "disable", {"disable", "prefer", "require"});
  if (!gssencmode.ok()) return gssencmode.status();
  s.pg_params = {{"host", *host},     {"port", *port},       {"user", *user},
                 {"dbname", *dbname}, {"sslmode", *sslmode}, {"gssencmode", *gssencmode}};
  // Several hosts (libpq's multi-host form: a primary and its standbys) are tried in turn at
  // every connect; only a primary can serve the slot, so by default the first that accepts
  // writes is taken, and after a failover the promoted standby is found without a restart.
  const bool several_hosts = CountCommaItems(*host) > 1;
  auto session_attrs =
      p.GetEnum("database.target.session.attrs", several_hosts ? "read-write" : "any",
                {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"});
  if (!session_attrs.ok()) return session_attrs.status();
  if (*session_attrs != "any") s.pg_params.emplace_back("target_session_attrs", *session_attrs);
  // A large transaction spills to disk in the walsender once it exceeds the server's
  // logical_decoding_work_mem (64MB by default); raising it for walrelay's own connection
  // decodes such transactions in memory without changing the server's setting.
  const std::string work_mem = p.GetString("logical.decoding.work.mem", "");
  if (!work_mem.empty()) {
    static const std::regex kMemory(R"([1-9][0-9]{0,9}(kB|MB|GB|TB)?)");
    if (!std::regex_match(work_mem, kMemory)) {
      return Status::Config("'logical.decoding.work.mem' must be a PostgreSQL memory size such as "
                            "256MB (a number with kB, MB, GB or TB), got '" +
                            work_mem + "'");
    }
    s.pg_params.emplace_back("options", "-c logical_decoding_work_mem=" + work_mem);
  }
  if (auto pw = p.Get("database.password")) s.pg_params.emplace_back("password", *pw);
  for (const auto& [key, libpq] : std::initializer_list<std::pair<const char*, const char*>>{
           {"database.sslcert", "sslcert"},
           {"database.sslkey", "sslkey"},
           {"database.sslpassword", "sslpassword"},
           {"database.sslrootcert", "sslrootcert"},
           {"database.sslcrl", "sslcrl"}}) {
    if (auto v = p.Get(key)) s.pg_params.emplace_back(libpq, *v);
  }
  auto connect_timeout = p.GetInt("database.connect.timeout.ms", 10000, 1000, 3600000);
  if (!connect_timeout.ok()) return connect_timeout.status();
  s.connect_timeout_ms = *connect_timeout;
  s.pg_params.emplace_back("connect_timeout", std::to_string((*connect_timeout + 999) / 1000));
  // A peer that vanished without closing the connection (a failed-over host, a dropped NAT
  // entry) is otherwise noticed only by the kernel's retransmission limit, about 15 minutes.
  auto keepalive = p.GetBool("database.tcpKeepAlive", true);
  if (!keepalive.ok()) return keepalive.status();
  auto keepalive_idle = p.GetInt("database.tcp.keepalive.idle.ms", 30000, 1000, 3600000);
  if (!keepalive_idle.ok()) return keepalive_idle.status();
  auto keepalive_interval = p.GetInt("database.tcp.keepalive.interval.ms", 10000, 1000, 3600000);
  if (!keepalive_interval.ok()) return keepalive_interval.status();
  auto keepalive_count = p.GetInt("database.tcp.keepalive.count", 3, 1, 100);
  if (!keepalive_count.ok()) return keepalive_count.status();
  auto user_timeout = p.GetInt("database.tcp.user.timeout.ms", 60000, 0, 3600000);
  if (!user_timeout.ok()) return user_timeout.status();
  s.pg_params.emplace_back("keepalives", *keepalive ? "1" : "0");
  if (*keepalive) {
    s.pg_params.emplace_back("keepalives_idle", std::to_string((*keepalive_idle + 999) / 1000));
    s.pg_params.emplace_back("keepalives_interval",
                             std::to_string((*keepalive_interval + 999) / 1000));
    s.pg_params.emplace_back("keepalives_count", std::to_string(*keepalive_count));
    s.pg_params.emplace_back("tcp_user_timeout", std::to_string(*user_timeout));
  }
  auto query_timeout = p.GetInt("database.query.timeout.ms", 30000, 0, 3600000);
  if (!query_timeout.ok()) return query_timeout.status();
  s.query_timeout_ms = *query_timeout;
  auto receive_timeout = p.GetInt("database.replication.receive.timeout.ms", 75000, 0, 3600000);
  if (!receive_timeout.ok()) return receive_timeout.status();
  if (*receive_timeout != 0 && *receive_timeout < 1000) {
    return Status::Config("'database.replication.receive.timeout.ms' must be 0 (never) or at "
                          "least 1000, got " +
                          std::to_string(*receive_timeout));
  }
  s.receive_timeout_ms = *receive_timeout;
  s.pg_params.emplace_back("application_name", "walrelay");

  s.slot_name = p.GetString("slot.name", "debezium");
  if (s.slot_name.empty() || s.slot_name.size() > 63 ||
      s.slot_name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
    return Status::Config("'slot.name' must be 1-63 lower-case letters, digits or '_', got '" +
                          s.slot_name + "'");
  }
  s.plugin_name = p.GetString("plugin.name", "pgoutput");
  if (s.plugin_name != "wal2json" && s.plugin_name != "pgoutput") {
    return Status::Config("'plugin.name' is '" + s.plugin_name +
                          "'; walrelay decodes pgoutput (built into PostgreSQL) and wal2json");
  }
  s.publication_name = p.GetString("publication.name", "dbz_publication");
  if (s.publication_name.empty() || s.publication_name.size() > 63) {
    return Status::Config("'publication.name' must be 1-63 characters, got '" + s.publication_name +
                          "'");
  }
  auto mode = p.GetString("publication.autocreate.mode", "all_tables");
  if (mode == "all_tables") {
    s.publication_mode = PublicationMode::kAllTables;
  } else if (mode == "disabled") {
    s.publication_mode = PublicationMode::kDisabled;
  } else if (mode == "filtered") {
    s.publication_mode = PublicationMode::kFiltered;
  } else if (mode == "no_tables") {
    s.publication_mode = PublicationMode::kNoTables;
  } else {
    return Status::Config("'publication.autocreate.mode' is '" + mode +
                          "'; expected all_tables, disabled, filtered or no_tables");
  }
  auto drop = p.GetBool("slot.drop.on.stop", false);
  if (!drop.ok()) return drop.status();
  s.slot_drop_on_stop = *drop;
  auto failover = p.GetBool("slot.failover", false);
  if (!failover.ok()) return failover.status();
  s.slot_failover = *failover;
  auto create = p.GetBool("slot.create", true);
  if (!create.ok()) return create.status();
  s.slot_create = *create;
  auto recreate = p.GetBool("slot.recreate.when.missing", false);
  if (!recreate.ok()) return recreate.status();
  s.slot_recreate_when_missing = *recreate;

  s.table_include = p.GetList("table.include.list", {"public.outbox"});
  if (s.table_include.empty())
    return Status::Config("'table.include.list' must name at least one table");
  for (const auto& t : s.table_include) {
    WALRELAY_RETURN_IF_ERROR(CheckRegexNumbers(t, "table.include.list"));
    try {
      s.table_include_regex.emplace_back(t, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return Status::Config("'table.include.list' entry '" + t +
                            "' is not a valid regex: " + e.what());
    }
  }
  for (auto [key, target] : {std::pair{"message.prefix.include.list", &s.message_prefix_include},
                             std::pair{"message.prefix.exclude.list", &s.message_prefix_exclude}}) {
    for (const auto& pattern : p.GetList(key, {})) {
      WALRELAY_RETURN_IF_ERROR(CheckRegexNumbers(pattern, key));
      try {
        target->emplace_back(pattern,
                             std::regex::ECMAScript | std::regex::icase | std::regex::optimize);
      } catch (const std::regex_error& e) {
        return Status::Config("'" + std::string(key) + "' entry '" + pattern +
                              "' is not a valid regex: " + e.what());
      }
    }
  }
  if (!s.message_prefix_include.empty() && !s.message_prefix_exclude.empty()) {
    return Status::Config(
        "'message.prefix.include.list' and 'message.prefix.exclude.list' are both set; set "
        "only one (as in Debezium)");
  }
  auto prefix = p.GetRequired("topic.prefix");
  if (!prefix.ok()) return prefix.status();
  s.topic_prefix = *prefix;
  if (Status st = ParseSourceMode(p, s); !st.ok()) return st;

  auto status_ms = p.GetInt("status.update.interval.ms", 10000, 1, 3600000);
  if (!status_ms.ok()) return status_ms.status();
  s.status_update_interval_ms = *status_ms;
  auto queue = p.GetInt("max.queue.size", 8192, 1, 10000000);
  if (!queue.ok()) return queue.status();
  s.max_queue_size = *queue;
  // Debezium's default is 0 (no byte bound); walrelay bounds the bytes in flight by default,
  // so its memory stays small and flat whatever the transaction size.
  auto queue_bytes = p.GetInt("max.queue.size.in.bytes", kDefaultMaxQueueBytes, 0, INT64_MAX);
  if (!queue_bytes.ok()) return queue_bytes.status();
  s.max_queue_size_bytes = *queue_bytes;
  auto shutdown = p.GetInt("shutdown.timeout.ms", 30000, 0, 3600000);
  if (!shutdown.ok()) return shutdown.status();
  s.shutdown_timeout_ms = *shutdown;

  struct IntKey {
    const char* key;
    int64_t def, min, max;
    int64_t* out;
  };
  for (const IntKey& k : std::initializer_list<IntKey>{
           {"reconnect.backoff.initial.ms", 500, 1, 3600000, &s.reconnect_backoff_initial_ms},
           {"reconnect.backoff.max.ms", 30000, 1, 3600000, &s.reconnect_backoff_max_ms},
           {"errors.max.retries", -1, -1, INT32_MAX, &s.errors_max_retries},
           {"slot.retry.delay.ms", 10000, 1, 3600000, &s.standby_retry_ms},
           {"slot.health.interval.ms", 10000, 0, 3600000, &s.slot_health_interval_ms},
           {"slot.stall.warn.ms", 30000, 1, 86400000, &s.slot_stall_warn_ms},
           {"errors.retry.timeout", -1, -1, INT32_MAX, &s.errors_retry_timeout_ms}}) {
    auto v = p.GetInt(k.key, k.def, k.min, k.max);
    if (!v.ok()) return v.status();
    *k.out = *v;
  }
  if (s.reconnect_backoff_max_ms < s.reconnect_backoff_initial_ms) {
    return Status::Config(
        "'reconnect.backoff.max.ms' must not be below 'reconnect.backoff.initial.ms'");
  }
  auto tombstones = p.GetBool("tombstones.on.delete", true);
  if (!tombstones.ok()) return tombstones.status();
  s.tombstones_on_delete = *tombstones;
  auto skipped = ParseSkippedOperations(p);
  if (!skipped.ok()) return skipped.status();
  s.skipped_operations = *skipped;
  // A polled row is an insert: skipped, it would be marked (deleted) without being relayed.
  if (s.source_mode == SourceMode::kPolling && s.skipped_operations.Skips('c')) {
    return Status::Config("'skipped.operations' skips inserts (c), but 'source.mode'=polling "
                          "relays the table's inserted rows and marks them once relayed: every "
                          "event would be marked and none relayed; remove c");
  }
  // A converter that writes Connect schemas (convert/converters.h) makes Debezium's
  // handling-mode defaults apply, since a schema must describe Debezium's values.
  auto converters = Converters::Build(p);
  if (!converters.ok()) return converters.status();
  auto modes = ReadColumnModes(p, converters->WritesSchemas());
  if (!modes.ok()) return modes.status();
  s.column_modes = *modes;
  auto tolerance = p.GetEnum("errors.tolerance", "none", {"none", "all"});
  if (!tolerance.ok()) return tolerance.status();
  s.errors_tolerance_all = *tolerance == "all";
  s.dead_letter_topic = Trim(p.GetString("errors.deadletterqueue.topic.name", ""));
  auto context_headers = p.GetBool("errors.deadletterqueue.context.headers.enable", true);
  if (!context_headers.ok()) return context_headers.status();
  s.dead_letter_context_headers = *context_headers;
  if (!s.dead_letter_topic.empty()) {
    // Every failed record would otherwise fail a second time, at its dead letter, and stop
    // the relay.
    if (Status st = CheckTopicName(s.dead_letter_topic); !st.ok()) {
      return Status::Config("'errors.deadletterqueue.topic.name': " + st.message());
    }
  }
  if (!s.dead_letter_topic.empty() && !s.errors_tolerance_all) {
    return Status::Config("'errors.deadletterqueue.topic.name' is set but 'errors.tolerance' is "
                          "'none'; set errors.tolerance=all to route failed records to it");
  }

  // Defaults chosen so records survive broker failover and land where Java producers put them.
  // Retriable failures (broker down, leader moves) are retried by librdkafka, in order, for
  // errors.retry.timeout; by default until delivered, so an outage holds records, never drops.
  s.kafka = {{"enable.idempotence", "true"},
             {"acks", "all"},
             {"partitioner", "murmur2_random"},
             {"message.timeout.ms",
              s.errors_retry_timeout_ms > 0 ? std::to_string(s.errors_retry_timeout_ms) : "0"}};
  for (const auto& [key, value] : p.values()) {
    if (key.rfind("kafka.", 0) == 0) {
      p.MarkRead(key);
      s.kafka[key.substr(6)] = value;
    }
  }
  if (s.exactly_once.enabled()) {
    // A transactional producer (delivery/exactly_once.h). librdkafka refuses a message timeout
    // longer than the transaction timeout, and "forever" (0) among them: a record not delivered
    // within the transaction's time aborts it, and the relay replays it in a new one.
    s.kafka["transactional.id"] = s.exactly_once.transactional_id;
    const std::string transaction_timeout =
        s.kafka.count("transaction.timeout.ms") ? s.kafka["transaction.timeout.ms"] : "60000";
    if (s.kafka["message.timeout.ms"] == "0") s.kafka["message.timeout.ms"] = transaction_timeout;
  }
  // The largest record: Kafka Connect's producers take records up to max.request.size
  // (1,048,576 by default), librdkafka up to message.max.bytes (1,000,000 by default), so a
  // record in between that Debezium delivers would be refused here. Connect's name is taken
  // too (kafka.max.request.size, which librdkafka does not know); message.max.bytes wins.
  if (auto connect_name = s.kafka.find("max.request.size"); connect_name != s.kafka.end()) {
    if (!s.kafka.count("message.max.bytes")) s.kafka["message.max.bytes"] = connect_name->second;
    s.kafka.erase(connect_name);
  }
  if (!s.kafka.count("message.max.bytes"))
    s.kafka["message.max.bytes"] = std::to_string(kConnectMaxRequestSize);
  // librdkafka's own queue must hold whatever max.queue.size and max.queue.size.in.bytes let
  // into flight, or a full queue would refuse records the relay has room for; the relay
  // handles that too (it holds the record and pauses the stream), but it should be rare.
  if (!s.kafka.count("queue.buffering.max.messages")) {
    s.kafka["queue.buffering.max.messages"] =
        std::to_string(std::max<int64_t>(kLibrdkafkaDefaultQueueMessages, s.max_queue_size));
  }
  if (!s.kafka.count("queue.buffering.max.kbytes") && s.max_queue_size_bytes > 0) {
    // Twice the bytes: librdkafka counts headers and its own overhead, which the relay does
    // not, and the relay lets one record in beyond its bound.
    const int64_t kbytes = std::min<int64_t>(
        INT32_MAX,
        std::max<int64_t>(kLibrdkafkaDefaultQueueKbytes, s.max_queue_size_bytes / 1024 * 2 + 1024));
    s.kafka["queue.buffering.max.kbytes"] = std::to_string(kbytes);
  }
  if (!s.kafka.count("batch.size") && s.max_queue_size_bytes > 0) {
    // librdkafka sends a partition's batch when it is full or linger.ms after its first
    // record. Once max.queue.size.in.bytes is reached no record is added until Kafka
    // acknowledges, so a batch that cannot fill waits the whole linger.ms: with 1 MB batches and
    // the 256 KiB bound, every round waited 5 ms and throttled the relay far below the
    // walsender's pace. Half the bound fills. A quarter (the earlier default) let five requests
    // be in flight for one partition (librdkafka's batches count record overhead and headers
    // the bound does not), the idempotent producer's limit, and librdkafka's broker thread then
    // polls without sleeping from linger.ms until an acknowledgement: on the real broker it used
    // more CPU than the relay's own thread. Against several partitions, whose shares of the
    // bound do not fill half of it, batches leave after linger.ms (docs/performance.md).
    s.kafka["batch.size"] = std::to_string(std::clamp<int64_t>(
        s.max_queue_size_bytes / kBatchesPerInflightBound, 1, kLibrdkafkaDefaultBatchBytes));
  }
  if (!s.kafka.count("bootstrap.servers")) {
    return Status::Config("missing required key 'kafka.bootstrap.servers'");
  }
  auto durability_checks = p.GetBool("producer.durability.checks", true);
  if (!durability_checks.ok()) return durability_checks.status();
  if (*durability_checks) {
    if (Status st = CheckDurableProducer(p, s.errors_tolerance_all); !st.ok()) return st;
  }
  for (const auto& [key, _] : p.values())
    if (IsAcceptedWithoutEffect(key)) p.MarkRead(key);
  return s;
}

}  // namespace walrelay
