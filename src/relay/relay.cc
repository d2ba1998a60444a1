#include "relay/relay.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>

#include "pg/preflight.h"
#include "pg/wire_messages.h"

namespace walrelay {
namespace {

// Messages handled per turn of the loop before yielding, so timers and delivery reports are
// served even while a large backlog streams in.
constexpr int kMessagesPerTurn = 512;

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Relay::Relay(RelaySettings settings, boost::asio::io_context& io)
    : settings_(std::move(settings)),
      io_(io),
      pg_socket_(io),
      kafka_events_(io),
      status_timer_(io),
      poll_timer_(io),
      shutdown_timer_(io) {
  source_context_.topic_prefix = settings_.topic_prefix;
  source_context_.database = settings_.dbname;
  source_context_.connector_name = settings_.name;
}

Relay::~Relay() = default;

Status Relay::Prepare() {
  auto conn = ReplicationConnection::Connect(settings_);
  if (!conn.ok()) return conn.status();
  conn_.emplace(std::move(conn).value());

  PreflightReport report;
  WALRELAY_RETURN_IF_ERROR(RunPreflight(*conn_, settings_, report));
  if (!report.slot.exists) {
    auto created = conn_->CreateSlot(settings_.slot_name);
    if (!created.ok()) {
      return Status::Precondition("cannot create replication slot '" + settings_.slot_name +
                                  "' with plugin wal2json: " + created.status().message());
    }
    spdlog::info("created replication slot '{}' (plugin wal2json) at LSN {}", settings_.slot_name,
                 created->ToString());
    tracker_ = DeliveryTracker(*created);
  } else {
    tracker_ = DeliveryTracker(report.slot.confirmed_flush);
    spdlog::info("using replication slot '{}', confirmed up to LSN {}", settings_.slot_name,
                 report.slot.confirmed_flush.ToString());
  }

  auto chain = TransformChain::Build(settings_.properties);
  if (!chain.ok()) return chain.status();
  chain_.emplace(std::move(chain).value());
  for (const auto& key : settings_.properties.UnreadKeys()) {
    spdlog::warn("unknown configuration key '{}' is ignored", key);
  }

  auto producer = KafkaProducer::Create(
      settings_.kafka, [this](const DeliveryReport& report) { OnDelivery(report); });
  if (!producer.ok()) return producer.status();
  producer_ = std::move(producer).value();

  const std::string add_tables = settings_.Wal2JsonAddTables();
  WALRELAY_RETURN_IF_ERROR(conn_->StartReplication(settings_.slot_name, Lsn(), add_tables));
  confirmed_lsn_ = tracker_.confirmable().value();
  streaming_ = true;
  spdlog::info("streaming slot '{}' of database '{}' (tables: {}) to Kafka at {}",
               settings_.slot_name, settings_.dbname,
               add_tables.empty() ? "filtered by regex" : add_tables,
               settings_.kafka["bootstrap.servers"]);
  return Status::Ok();
}

Status Relay::Run() {
  if (Status st = Prepare(); !st.ok()) {
    spdlog::error("{}", st.ToString());
    streaming_ = false;
    return st;
  }
  // Our own descriptor for libpq's socket, so closing it never closes libpq's.
  pg_socket_.assign(dup(conn_->socket()));
  kafka_events_.assign(dup(producer_->event_fd()));
  WaitForKafkaEvents();
  ArmStatusTimer();
  ArmPollTimer();
  Pump();
  io_.run();
  streaming_ = false;
  return final_status_;
}

void Relay::RequestStop() {
  boost::asio::post(io_, [this] {
    if (!stopping_) spdlog::info("stop requested; waiting for Kafka to acknowledge in-flight records");
    BeginShutdown();
  });
}

bool Relay::Backpressured() const {
  if (static_cast<int64_t>(tracker_.inflight_records()) >= settings_.max_queue_size) return true;
  return settings_.max_queue_size_bytes > 0 &&
         static_cast<int64_t>(tracker_.inflight_bytes()) >= settings_.max_queue_size_bytes;
}

void Relay::Pump() {
  pump_scheduled_ = false;
  for (int handled = 0; handled < kMessagesPerTurn; ++handled) {
    if (stopping_ || Backpressured()) return;  // delivery reports resume the pump
    std::string_view message;
    auto read = conn_->ReadMessage(message);
    if (!read.ok()) return Fail(read.status());
    if (*read == ReplicationConnection::ReadStatus::kEnded) {
      return Fail(Status::Connection("the server ended the replication stream"));
    }
    if (*read == ReplicationConnection::ReadStatus::kWouldBlock) return WaitForSocket();
    if (Status st = HandleMessage(message); !st.ok()) return Fail(st);
  }
  producer_->Poll();
  pump_scheduled_ = true;
  boost::asio::post(io_, [this] { Pump(); });
}

void Relay::WaitForSocket() {
  if (socket_wait_armed_ || stopping_) return;
  socket_wait_armed_ = true;
  pg_socket_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                        [this](const boost::system::error_code& ec) {
                          socket_wait_armed_ = false;
                          if (ec || stopping_) return;
                          if (Status st = conn_->ConsumeInput(); !st.ok()) return Fail(st);
                          Pump();
                        });
}

void Relay::WaitForKafkaEvents() {
  kafka_events_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                           [this](const boost::system::error_code& ec) {
                             if (ec || finished_) return;
                             producer_->ClearEvent();
                             producer_->Poll();
                             WaitForKafkaEvents();
                           });
}

void Relay::ArmPollTimer() {
  // A safety net for librdkafka events that do not signal the queue fd (e.g. errors).
  poll_timer_.expires_after(std::chrono::milliseconds(200));
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    producer_->Poll();
    ArmPollTimer();
  });
}

void Relay::ArmStatusTimer() {
  status_timer_.expires_after(std::chrono::milliseconds(settings_.status_update_interval_ms));
  status_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    SendStatus(true);
    ArmStatusTimer();
  });
}

void Relay::SendStatus(bool reply_to_server) {
  (void)reply_to_server;
  const Lsn flush = tracker_.confirmable();
  const Lsn write = std::max(received_lsn_, flush);
  if (Status st = conn_->SendStandbyStatus(write, flush, false); !st.ok()) return Fail(st);
  if (flush != last_sent_flush_) {
    spdlog::debug("confirmed LSN {} to the server", flush.ToString());
    last_sent_flush_ = flush;
  }
  confirmed_lsn_ = flush.value();
}

Status Relay::HandleMessage(std::string_view message) {
  if (message.empty()) return Status::Protocol("empty CopyData message");
  if (message[0] == 'k') {
    auto keepalive = ParseKeepalive(message);
    if (!keepalive.ok()) return keepalive.status();
    // Everything committed before walEnd has been streamed already; while nothing is in flight
    // that position is safe to confirm, so an idle outbox does not pin WAL.
    tracker_.ServerPosition(keepalive->wal_end);
    if (keepalive->reply_requested) SendStatus(true);
    return Status::Ok();
  }
  if (message[0] != 'w') {
    return Status::Protocol(std::string("unexpected replication message type '") + message[0] + "'");
  }
  auto xlog = ParseXLogData(message);
  if (!xlog.ok()) return xlog.status();
  if (xlog->data_start > received_lsn_) received_lsn_ = xlog->data_start;
  WALRELAY_RETURN_IF_ERROR(decoder_.Decode(xlog->payload, xlog->data_start, message_));
  switch (message_.kind) {
    case MessageKind::kBegin:
      tracker_.BeginTransaction();
      return Status::Ok();
    case MessageKind::kCommit:
      tracker_.CommitTransaction(message_.commit.end_lsn);
      return Status::Ok();
    case MessageKind::kMessage:
      spdlog::debug("logical decoding message with prefix '{}' at LSN {} is not relayed",
                    message_.message.prefix, message_.message.lsn.ToString());
      return Status::Ok();
    case MessageKind::kChange:
      return HandleChange(message_.change);
  }
  return Status::Ok();
}

Status Relay::HandleChange(const RowChange& change) {
  const std::string table = change.QualifiedTable();
  if (!settings_.IncludesTable(table)) return Status::Ok();
  Record record = MakeSourceRecord(change, source_context_);
  auto outcome = chain_->Apply(record);
  if (!outcome.ok()) {
    return outcome.status().WithContext("row of " + table + " at LSN " + change.lsn.ToString());
  }
  if (*outcome == TransformOutcome::kDrop) return Status::Ok();
  if (record.change) {
    record.value = SerializeChangeEvent(*record.change, source_context_, NowMillis());
    record.change = nullptr;
  }
  const size_t bytes = record.topic.size() + (record.key ? record.key->size() : 0) +
                       (record.value ? record.value->size() : 0);
  const uint64_t ticket = tracker_.AddRecord(change.lsn, bytes);
  if (Status st = producer_->Produce(record, ticket); !st.ok()) {
    tracker_.Fail(ticket, st.message());
    return st.WithContext("row of " + table + " at LSN " + change.lsn.ToString());
  }
  return Status::Ok();
}

void Relay::OnDelivery(const DeliveryReport& report) {
  if (report.error == RD_KAFKA_RESP_ERR_NO_ERROR) {
    tracker_.Acknowledge(report.ticket);
  } else {
    const bool first = !tracker_.failure().has_value();
    tracker_.Fail(report.ticket, report.description + ": " + rd_kafka_err2str(report.error));
    if (first && report.error != RD_KAFKA_RESP_ERR__PURGE_QUEUE &&
        report.error != RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
      const FailedDelivery& f = *tracker_.failure();
      Fail(Status::Kafka("Kafka did not accept " + f.error + "; the row is at LSN " +
                         f.lsn.ToString() + "; the slot stays confirmed at " +
                         tracker_.confirmable().ToString() + " so it is sent again after a restart"));
    }
  }
  if (stopping_) {
    if (tracker_.inflight_records() == 0) FinishShutdown();
  } else if (!pump_scheduled_ && !socket_wait_armed_ && !Backpressured()) {
    pump_scheduled_ = true;
    boost::asio::post(io_, [this] { Pump(); });
  }
}

void Relay::Fail(Status status) {
  if (final_status_.ok()) {
    spdlog::error("{}", status.ToString());
    final_status_ = std::move(status);
  }
  BeginShutdown();
}

void Relay::BeginShutdown() {
  if (stopping_ || finished_) return;
  stopping_ = true;
  boost::system::error_code ignored;
  pg_socket_.cancel(ignored);
  if (!producer_ || tracker_.inflight_records() == 0) return FinishShutdown();
  shutdown_timer_.expires_after(std::chrono::milliseconds(settings_.shutdown_timeout_ms));
  shutdown_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    spdlog::warn("{} records still unacknowledged after shutdown.timeout.ms={}; exiting without "
                 "confirming them (they are sent again on restart)",
                 tracker_.inflight_records(), settings_.shutdown_timeout_ms);
    FinishShutdown();
  });
}

void Relay::FinishShutdown() {
  if (finished_) return;
  finished_ = true;
  if (conn_ && streaming_) {
    SendStatus(true);
    if (Status st = conn_->EndStreaming(); !st.ok()) spdlog::warn("{}", st.message());
    if (final_status_.ok() && settings_.slot_drop_on_stop) {
      if (Status st = conn_->DropSlot(settings_.slot_name); !st.ok()) {
        spdlog::warn("slot.drop.on.stop: {}", st.message());
      } else {
        spdlog::info("dropped replication slot '{}' (slot.drop.on.stop=true)", settings_.slot_name);
      }
    }
  }
  spdlog::info("stopped; slot '{}' confirmed up to LSN {}", settings_.slot_name,
               tracker_.confirmable().ToString());
  if (producer_ && producer_->OutstandingMessages() > 0) producer_->PurgeAll();
  boost::system::error_code ignored;
  status_timer_.cancel();
  poll_timer_.cancel();
  shutdown_timer_.cancel();
  kafka_events_.cancel(ignored);
  pg_socket_.close(ignored);
  kafka_events_.close(ignored);
  streaming_ = false;
  io_.stop();
}

}  // namespace walrelay
