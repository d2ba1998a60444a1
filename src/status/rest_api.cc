#include "status/rest_api.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <vector>

#include "config/connector_config.h"
#include "status/slot_metrics.h"

namespace walrelay {
namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

HttpResponse Json(int status, const rapidjson::StringBuffer& buffer) {
  return {status, "application/json", std::string(buffer.GetString(), buffer.GetSize())};
}

HttpResponse Error(int status, const std::string& message) {
  return KafkaConnectError(status, message);
}

std::string PercentDecode(const std::string& in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
      out += static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += in[i];
    }
  }
  return out;
}

std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) out.push_back(PercentDecode(path.substr(start, slash - start)));
    start = slash + 1;
  }
  return out;
}

void WriteConfig(JsonWriter& w, const RelaySettings& settings) {
  w.StartObject();
  bool has_name = false;
  for (const auto& [key, value] : settings.properties.values()) {
    has_name = has_name || key == "name";
    w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
    w.String(DisplayValue(key, value, settings.provider_keys.count(key) != 0));
  }
  if (!has_name) {
    w.Key("name");
    w.String(settings.name);
  }
  w.EndObject();
}

// Task 0's status object; "trace" only once the relay failed, as in Kafka Connect.
void WriteTaskStatus(JsonWriter& w, const std::string& state, const std::string& worker_id,
                     const Status& failure) {
  w.StartObject();
  w.Key("id");
  w.Int(0);
  w.Key("state");
  w.String(state);
  w.Key("worker_id");
  w.String(worker_id);
  if (!failure.ok()) {
    w.Key("trace");
    w.String(failure.ToString());
  }
  w.EndObject();
}

}  // namespace

RestApi::RestApi(RelayView& relay, std::string worker_id, const HttpServer* server)
    : relay_(relay),
      server_(server),
      worker_id_(std::move(worker_id)),
      access_(relay.settings().rest_auth, relay.settings().listener) {}

std::string RestApi::State() const {
  if (!relay_.failure().ok()) return "FAILED";
  if (relay_.state() == RelayState::kStandby) return "UNASSIGNED";
  if (relay_.paused()) return "PAUSED";
  return "RUNNING";
}

HttpResponse RestApi::Handle(const HttpRequest& request) {
  if (auto refusal = access_.CheckRequest(request)) return *refusal;
  const std::vector<std::string> path = Segments(request.path);
  const std::string& method = request.method;
  const std::string& name = relay_.settings().name;
  auto allow = [&](const char* expected) { return method == expected; };
  auto not_allowed = [] { return Error(405, "HTTP 405 Method Not Allowed"); };

  if (path.empty()) return allow("GET") ? Info() : not_allowed();
  if (path.size() == 1 && path[0] == "metrics") return allow("GET") ? Metrics() : not_allowed();
  if (path.size() == 1 && path[0] == "healthz") return allow("GET") ? Health() : not_allowed();
  if (path[0] != "connectors") return Error(404, "HTTP 404 Not Found");
  if (path.size() == 1) {
    if (!allow("GET")) {
      // POST /connectors creates connectors in Kafka Connect; walrelay runs the one it was
      // started with.
      return Error(405, "HTTP 405 Method Not Allowed: walrelay runs the one connector of its "
                        "config file");
    }
    rapidjson::StringBuffer buffer;
    JsonWriter w(buffer);
    w.StartArray();
    w.String(name);
    w.EndArray();
    return Json(200, buffer);
  }
  if (path[1] != name) return Error(404, "Connector " + path[1] + " not found");
  const std::vector<std::string> rest(path.begin() + 2, path.end());
  using V = std::vector<std::string>;
  if (rest.empty()) return allow("GET") ? Connector() : not_allowed();
  if (rest == V{"config"}) return allow("GET") ? Config() : not_allowed();
  if (rest == V{"status"}) return allow("GET") ? ConnectorStatus() : not_allowed();
  if (rest == V{"tasks", "0", "status"}) return allow("GET") ? TaskStatus() : not_allowed();
  if (rest == V{"pause"}) {
    if (!allow("PUT")) return not_allowed();
    if (auto refusal = access_.CheckChange(request)) return *refusal;
    relay_.Pause();
    return {202, "application/json", ""};
  }
  if (rest == V{"resume"}) {
    if (!allow("PUT")) return not_allowed();
    if (auto refusal = access_.CheckChange(request)) return *refusal;
    relay_.Resume();
    return {202, "application/json", ""};
  }
  if (rest == V{"restart"} || rest == V{"tasks", "0", "restart"}) {
    if (!allow("POST")) return not_allowed();
    if (auto refusal = access_.CheckChange(request)) return *refusal;
    if (!relay_.Restart()) return Error(409, "Connector " + name + " is stopping");
    return {204, "application/json", ""};
  }
  if (rest.size() >= 2 && rest[0] == "tasks" && rest[1] != "0") {
    return Error(404, "Task " + name + "-" + rest[1] + " not found");
  }
  return Error(404, "HTTP 404 Not Found");
}

HttpResponse RestApi::Info() const {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("version");
  w.String(WALRELAY_VERSION);
  w.EndObject();
  return Json(200, buffer);
}

HttpResponse RestApi::Connector() const {
  const std::string& name = relay_.settings().name;
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("name");
  w.String(name);
  w.Key("config");
  WriteConfig(w, relay_.settings());
  w.Key("tasks");
  w.StartArray();
  w.StartObject();
  w.Key("connector");
  w.String(name);
  w.Key("task");
  w.Int(0);
  w.EndObject();
  w.EndArray();
  w.Key("type");
  w.String("source");
  w.EndObject();
  return Json(200, buffer);
}

HttpResponse RestApi::Config() const {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  WriteConfig(w, relay_.settings());
  return Json(200, buffer);
}

HttpResponse RestApi::ConnectorStatus() const {
  const std::string state = State();
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("name");
  w.String(relay_.settings().name);
  w.Key("connector");
  w.StartObject();
  w.Key("state");
  w.String(state);
  w.Key("worker_id");
  w.String(worker_id_);
  w.EndObject();
  w.Key("tasks");
  w.StartArray();
  WriteTaskStatus(w, state, worker_id_, relay_.failure());
  w.EndArray();
  w.Key("type");
  w.String("source");
  WriteSlotHealthJson(w, relay_.settings().slot_name, relay_.slot_health());
  w.EndObject();
  return Json(200, buffer);
}

HttpResponse RestApi::TaskStatus() const {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  WriteTaskStatus(w, State(), worker_id_, relay_.failure());
  return Json(200, buffer);
}

HttpResponse RestApi::Health() const {
  const std::string state = State();
  std::string reason;
  if (!relay_.failure().ok()) {
    reason = relay_.failure().ToString();
  } else if (relay_.state() == RelayState::kStopping || relay_.state() == RelayState::kStopped) {
    reason = "stopping";
  } else if (!relay_.producer_ready()) {
    reason = "the Kafka producer is not created yet";
  } else if (relay_.state() != RelayState::kStandby && !relay_.connected()) {
    reason = "no replication connection" +
             (relay_.connection_error().empty() ? std::string() : ": " + relay_.connection_error());
  }
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("status");
  w.String(reason.empty() ? "UP" : "DOWN");
  w.Key("state");
  w.String(state);
  if (!reason.empty()) {
    w.Key("reason");
    w.String(reason);
  }
  w.EndObject();
  return Json(reason.empty() ? 200 : 503, buffer);
}

HttpResponse RestApi::Metrics() const {
  const RelayCounters& c = relay_.counters();
  const RelaySettings& settings = relay_.settings();
  // The label values known before any event; topics routed from row values are not.
  std::vector<std::string> known_topics;
  if (!settings.dead_letter_topic.empty()) known_topics.push_back(settings.dead_letter_topic);
  PrometheusText m;
  m.Family("walrelay_info", "gauge", "Always 1; labels name the connector, slot and version.");
  m.Sample({{"connector", relay_.settings().name},
            {"slot", relay_.settings().slot_name},
            {"version", WALRELAY_VERSION}},
           uint64_t{1});
  m.PerLabel("walrelay_source_records_total", "counter",
             "Row changes read from the slot for included tables.", "table", c.source_records,
             settings.PlainIncludedTables());
  m.Single("walrelay_source_changes_skipped_total", "counter",
           "Row changes of included tables not relayed: skipped.operations names their "
           "operation (truncates by default).",
           c.source_changes_skipped);
  m.PerLabel("walrelay_logical_messages_total", "counter",
             "pg_logical_emit_message() records read from the slot, by outcome: relayed, "
             "filtered (prefix not included) or non_transactional (refused).",
             "outcome", c.logical_messages, {"relayed", "filtered", "non_transactional"});
  m.PerLabel("walrelay_records_acked_total", "counter",
             "Records Kafka acknowledged, by topic (dead letters under their topic).", "topic",
             c.acked, known_topics);
  m.PerLabel("walrelay_records_failed_total", "counter",
             "Records whose transform, conversion or Kafka delivery failed, by stage.", "stage",
             c.failed, {"transform", "convert", "produce"});
  m.Single("walrelay_dlq_records_total", "counter",
           "Records sent to the dead-letter topic (errors.deadletterqueue.topic.name).",
           c.dead_letters);
  m.Single("walrelay_records_skipped_total", "counter",
           "Failed records skipped by errors.tolerance=all without a dead-letter topic.",
           c.skipped);
  m.Single("walrelay_reconnects_total", "counter",
           "Replication connections re-established after a loss or a restart.", c.reconnects);
  m.Single("walrelay_slot_recreated_total", "counter",
           "Times the replication slot had vanished and was created again "
           "(slot.recreate.when.missing); rows in between may be missing.",
           c.slots_recreated);
  if (relay_.settings().exactly_once.enabled()) {
    const std::map<std::string, uint64_t> outcomes{
        {"committed", c.kafka_transactions.committed.load()},
        {"aborted", c.kafka_transactions.aborted.load()}};
    m.PerLabel("walrelay_kafka_transactions_total", "counter",
               "Kafka transactions (exactly.once.support) by outcome: committed, or aborted and "
               "replayed.",
               "outcome", outcomes, {"committed", "aborted"});
    m.Single("walrelay_kafka_transactions_split_total", "counter",
             "Kafka transactions committed inside a source transaction that outgrew one "
             "(transaction.boundary.split.ms); also counted as committed.",
             c.kafka_transactions.split.load());
    m.Single("walrelay_source_changes_held_in_kafka_total", "counter",
             "Changes of a split source transaction that a replay skipped: a committed Kafka "
             "transaction holds their records.",
             c.source_changes_held_in_kafka);
  } else {
    m.PerLabel("walrelay_offset_writes_total", "counter",
               "Source positions written to offsets.storage.topic by outcome: written, or "
               "failed and written again.",
               "outcome", c.offset_writes, {"written", "failed"});
  }
  if (relay_.settings().source_mode == SourceMode::kPolling) {
    m.Single("walrelay_polling_reads_total", "counter",
             "Reads of the outbox table (source.mode=polling).", c.polling_reads);
    m.Single("walrelay_polling_rows_read_total", "counter",
             "Rows those reads returned (a row read again after a reconnect counts again).",
             c.polling_rows_read);
    m.Single("walrelay_polling_read_seconds_total", "counter",
             "Time spent in those reads; divided by the reads, a read's mean duration, which "
             "grows with the dead rows a held xmin horizon keeps in the table (docs/polling.md).",
             static_cast<double>(c.polling_read_micros) / 1e6);
  }
  m.Single("walrelay_confirmed_flush_lsn", "gauge",
           "LSN last confirmed to PostgreSQL (the slot's confirmed_flush_lsn), as an integer.",
           relay_.confirmed_lsn().value());
  m.Single("walrelay_received_lsn", "gauge",
           "Highest WAL position received from the slot, as an integer.",
           relay_.received_lsn().value());
  m.Single("walrelay_inflight_records", "gauge",
           "Records handed to Kafka and not yet acknowledged.",
           static_cast<uint64_t>(relay_.inflight_records()));
  m.Single("walrelay_inflight_bytes", "gauge", "Bytes of the records in flight.",
           static_cast<uint64_t>(relay_.inflight_bytes()));
  m.Single("walrelay_ack_ledger_entries", "gauge",
           "Entries of the ack ledger: records not yet acknowledged and the commit markers "
           "between them; bounded by the records in flight, not by transactions streamed.",
           static_cast<uint64_t>(relay_.ack_ledger_entries()));
  m.Single("walrelay_ack_ledger_bytes", "gauge", "Memory of the ack ledger's entries.",
           static_cast<uint64_t>(relay_.ack_ledger_bytes()));
  m.Single("walrelay_kafka_queue_full_total", "counter",
           "Times librdkafka's queue was full: the record was held and the stream paused until "
           "Kafka acknowledged earlier records.",
           c.queue_full);
  m.Single("walrelay_held_records", "gauge",
           "Records waiting for room in librdkafka's queue (queue.buffering.max.messages or "
           "queue.buffering.max.kbytes).",
           static_cast<uint64_t>(relay_.held_records()));
  m.Single("walrelay_replication_lag_seconds", "gauge",
           "Now minus the commit time of the newest acknowledged record; 0 when idle and "
           "caught up.",
           relay_.ReplicationLagSeconds());
  m.Single("walrelay_kafka_queue_messages", "gauge",
           "Messages librdkafka holds: queued, in flight, or awaiting their delivery report.",
           static_cast<uint64_t>(std::max(relay_.kafka_queue_length(), 0)));
  m.Single("walrelay_paused", "gauge", "1 while paused through the REST API.",
           static_cast<uint64_t>(relay_.paused() ? 1 : 0));
  m.Single("walrelay_standby", "gauge", "1 while a standby waiting for the slot.",
           static_cast<uint64_t>(relay_.state() == RelayState::kStandby ? 1 : 0));
  m.Single("walrelay_up", "gauge",
           "1 while the relay holds a live replication connection and a producer.",
           static_cast<uint64_t>(
               relay_.connected() && relay_.producer_ready() && relay_.failure().ok() ? 1 : 0));
  m.PerLabel("walrelay_rest_requests_refused_total", "counter",
             "REST requests refused: a Host a loopback listener does not accept (host), a "
             "change sent by a web page of another origin or with an HTML form's Content-Type "
             "(cross_site), missing or wrong credentials (unauthorized), a change on a "
             "non-loopback listener without credentials configured (no_credentials).",
             "reason", access_.refusals(), RestAccess::RefusalReasons());
  m.Single("walrelay_rest_accept_errors_total", "counter",
           "Failed accept() calls of the REST listener (e.g. out of file descriptors).",
           server_ ? server_->accept_errors() : uint64_t{0});
  WriteSlotHealthMetrics(m, relay_.slot_health(), relay_.slot_stalls());
  m.Single("walrelay_rest_connections_refused_total", "counter",
           "REST connections closed at once because rest.max.connections were open.",
           server_ ? server_->connections_refused() : uint64_t{0});
  m.Single("walrelay_rest_connections_open", "gauge",
           "REST connections being served, this scrape's included.",
           static_cast<uint64_t>(server_ ? server_->open_connections() : 0));
  return {200, "text/plain; version=0.0.4; charset=utf-8", m.text()};
}

}  // namespace walrelay
