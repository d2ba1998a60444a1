#include "relay/relay.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "pg/wire_messages.h"

namespace walrelay {
namespace {

// Messages handled per turn of the loop before yielding, so timers and delivery reports are
// served even while a large backlog streams in.
constexpr int kMessagesPerTurn = 512;

// What error messages call the source of a record: "row of public.outbox" for a table, the
// label itself for a logical decoding message (MessageOrigin in record.h).
std::string OriginText(const std::string& origin) {
  return origin.starts_with(kMessageOriginLead) ? origin : "row of " + origin;
}

// walrelay_records_failed_total's stage label for Kafka Connect's stage name.
std::string FailedStageLabel(const std::string& stage) {
  if (stage == "TRANSFORMATION") return "transform";
  if (stage.ends_with("_CONVERTER")) return "convert";
  return "produce";
}

int64_t NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* RelayStateName(RelayState state) {
  switch (state) {
    case RelayState::kConnecting: return "CONNECTING";
    case RelayState::kStandby: return "STANDBY";
    case RelayState::kStreaming: return "STREAMING";
    case RelayState::kStopping: return "STOPPING";
    case RelayState::kStopped: return "STOPPED";
  }
  return "?";
}

namespace {

Result<std::unique_ptr<Decoder>> DecoderFor(const RelaySettings& settings,
                                            CatalogLookups lookups) {
  DecoderOptions options;
  options.publication_names = settings.publication_name;
  options.wal2json_add_tables = settings.Wal2JsonAddTables();
  options.catalog = std::move(lookups);
  return MakeDecoder(settings.plugin_name, options);
}

}  // namespace

Relay::Relay(RelaySettings settings, boost::asio::io_context& io)
    : settings_(std::move(settings)),
      io_(io),
      decoder_([this]() -> std::unique_ptr<Decoder> {
        auto made = DecoderFor(settings_, catalog_.Lookups());
        if (!made.ok()) {
          decoder_status_ = made.status();
          return nullptr;
        }
        return std::move(made).value();
      }()),
      connector_(settings_,
                 [decoder = decoder_.get()](int server_version) {
                   return decoder ? decoder->StartReplicationOptions(server_version)
                                  : std::string();
                 },
                 [this](const SourceIdentity& server, bool slot_missing) {
                   return guarantee_->StoredPosition(server, slot_missing);
                 },
                 [this](const SourceIdentity& server, Lsn slot_position,
                        const std::optional<SourceOffset>& stored) {
                   return guarantee_->StartPosition(server, slot_position, stored);
                 },
                 io),
      pg_socket_(io),
      kafka_events_(io),
      status_timer_(io),
      poll_timer_(io),
      shutdown_timer_(io),
      connect_timer_(io),
      receive_watch_(io, settings_.receive_timeout_ms, [this] { SendStatus(true); },
                     [this](const Status& silent) { ConnectionLost(silent); }),
      progress_timer_(io),
      caught_up_timer_(io),
      boundary_timer_(io) {
  source_context_.topic_prefix = settings_.topic_prefix;
  source_context_.database = settings_.dbname;
  source_context_.connector_name = settings_.name;
  source_context_.modes = settings_.column_modes;
  // With a regex table.include.list (wal2json) or a publication of more tables (pgoutput) the
  // stream carries other tables: their rows are skipped before their columns are decoded, so
  // they cannot fail the relay.
  if (decoder_) {
    decoder_->SetTableFilter([this](std::string_view schema, std::string_view table) {
      return LookupTable(schema, table).included;
    });
  }
}

Relay::~Relay() = default;

Status Relay::Run() {
  if (!decoder_) {
    spdlog::error("{}", decoder_status_.ToString());
    return decoder_status_;
  }
  auto converters = Converters::Build(settings_.properties);
  if (!converters.ok()) {
    spdlog::error("{}", converters.status().ToString());
    return converters.status();
  }
  converters_.emplace(std::move(converters).value());
  converters_->KeepNumberText(settings_.column_modes.decimal == DecimalMode::kNative);
  auto chain = TransformChain::Build(settings_.properties, source_context_);
  if (!chain.ok()) {
    spdlog::error("{}", chain.status().ToString());
    return chain.status();
  }
  chain_.emplace(std::move(chain).value());
  for (const auto& key : settings_.properties.UnreadKeys()) {
    spdlog::warn("unknown configuration key '{}' is ignored", key);
  }
  auto producer = KafkaProducer::Create(
      settings_.kafka, [this](const DeliveryReport& report) { OnDelivery(report); },
      [this](const Status& failure) { OnProducerFailure(failure); },
      settings_.ProvidedKafkaKeys());
  if (!producer.ok()) {
    spdlog::error("{}", producer.status().ToString());
    return producer.status();
  }
  producer_ = std::move(producer).value();
  auto guarantee = MakeDeliveryGuarantee(settings_, *producer_, counters_);
  if (!guarantee.ok()) {
    spdlog::error("{}", guarantee.status().ToString());
    return guarantee.status();
  }
  guarantee_ = std::move(guarantee).value();
  // Asio owns and closes the descriptor it is given: give it a copy of the producer's.
  const int kafka_event_fd = dup(producer_->event_fd());
  if (kafka_event_fd < 0) {
    Status error = Status::Internal(std::string("cannot duplicate the Kafka event descriptor: ") +
                                    std::strerror(errno));
    spdlog::error("{}", error.ToString());
    return error;
  }
  kafka_events_.assign(kafka_event_fd);
  WaitForKafkaEvents();
  ArmPollTimer();
  ArmStatusTimer();
  progress_last_time_ = std::chrono::steady_clock::now();
  ArmProgressTimer();
  StartSlotHealthWatch();
  TryConnect();
  io_.run();
  state_ = RelayState::kStopped;
  return final_status_;
}

// --- Connecting, reconnecting, standby -----------------------------------------------------

void Relay::TryConnect() {
  if (stopping_) return;
  // The next stream replays from what is confirmable: what the last one left open in Kafka is
  // committed if it holds whole source transactions, else dropped.
  if (Status ended = AfterGuarantee(guarantee_->EndStream(held_.empty()));
      !ended.ok() && ended.code() != ErrorCode::kConnection) {
    return Fail(ended);
  }
  ConnectPlan plan;
  plan.streamed_before = ever_streamed_;
  plan.last_confirmed = std::max(last_sent_flush_, slot_floor_);
  plan.previous_walsender_pid = std::exchange(restart_walsender_pid_, std::nullopt);
  connector_.Start(std::move(plan),
                   [this](Result<SourceSession> attempt) { OnConnectAttempt(std::move(attempt)); });
}

void Relay::OnConnectAttempt(Result<SourceSession> attempt) {
  if (stopping_) return;
  if (!attempt.ok()) return ConnectFailed(attempt.status());
  SourceSession& session = *attempt;
  conn_.emplace(std::move(*session.connection));
  const int socket = dup(conn_->socket());  // our own fd: closing it never closes libpq's
  if (socket < 0) {
    CloseConnection();
    return Fail(Status::Internal(std::string("cannot duplicate the replication socket: ") +
                                 std::strerror(errno)));
  }
  pg_socket_.assign(socket);
  if (session.slot_created && !session.slot_recreated) {
    spdlog::info("created replication slot '{}' (plugin {}) at LSN {}", settings_.slot_name,
                 decoder_->plugin_name(), session.slot_position.ToString());
  }
  AdoptSlotPosition(session);
  catalog_.Adopt(session.catalog);
  const std::string add_tables = settings_.Wal2JsonAddTables();
  spdlog::info("streaming slot '{}' ({}) of database '{}' (tables: {}) from LSN {} to Kafka at {}",
               settings_.slot_name, decoder_->plugin_name(), settings_.dbname,
               add_tables.empty() ? "filtered by regex" : add_tables,
               session.slot_position.ToString(), settings_.kafka["bootstrap.servers"]);
  const RelayState before = state_.load();
  consecutive_failures_ = 0;
  state_ = RelayState::kStreaming;
  connection_error_.clear();
  if (ever_streamed_) ++counters_.reconnects;
  ever_streamed_ = true;
  if (paused_) spdlog::info("connected while paused; streaming starts on resume");
  confirmed_lsn_ = std::max(Confirmable(), slot_floor_).value();
  if (before == RelayState::kStandby) spdlog::info("took over slot '{}'", settings_.slot_name);
  receive_watch_.Start(conn_->socket());
  Pump();
}

void Relay::AdoptSlotPosition(const SourceSession& session) {
  // Past the slot's position when the guarantee skips what Kafka holds already.
  const Lsn slot = std::max(session.slot_position, session.start_position);
  // The last position known delivered: this process's, or the stored one for a new process.
  Lsn last_confirmed = std::max(last_sent_flush_, slot_floor_);
  if (!tracker_initialised_ && session.stored) last_confirmed = session.stored->lsn_commit;
  // The server never streams below the slot: a flush below it would only be stale.
  slot_floor_ = slot;
  if (session.slot_recreated) {
    spdlog::error("replication slot '{}' was missing and has been created again "
                  "(slot.recreate.when.missing=true): rows committed between LSN {} (the last "
                  "{}) and LSN {} (the new slot's start) may be missing from Kafka; "
                  "republish them from the outbox table or the source of truth",
                  settings_.slot_name, last_confirmed.ToString(),
                  tracker_initialised_ ? "confirmed" : "stored position", slot.ToString());
    ++counters_.slots_recreated;
  }
  if (!tracker_initialised_) {
    tracker_ = DeliveryTracker(slot);
    tracker_initialised_ = true;
  } else if (session.slot_recreated) {
    tracker_.Rebase(slot);
  } else if (source_identity_ && !(*source_identity_ == session.identity)) {
    spdlog::warn("PostgreSQL is not the server streamed from before ({}, now {}: a failover or a "
                 "promoted standby); slot '{}' is at LSN {}, the relay continues from there and "
                 "confirms no position learnt from the previous server",
                 source_identity_->ToString(), session.identity.ToString(), settings_.slot_name,
                 slot.ToString());
    tracker_.Rebase(slot);
  } else if (slot > tracker_.confirmable()) {
    if (session.start_position <= session.slot_position) {
      spdlog::warn("replication slot '{}' is at LSN {}, past LSN {} this relay can confirm "
                   "(moved by another process); the relay continues from the slot's position",
                   settings_.slot_name, slot.ToString(), tracker_.confirmable().ToString());
    }
    tracker_.Rebase(slot);
  } else {
    // Records still in flight stay tracked; the server replays from the slot's position, so
    // a transaction that was open when the connection broke is sent again from its start.
    tracker_.StreamRestarted();
  }
  source_identity_ = session.identity;
}

void Relay::ConnectFailed(const Status& st) {
  const RelayState before = state_.load();
  CloseConnection();
  connection_error_ = st.message();
  if (st.code() == ErrorCode::kSlotInUse) {
    if (before != RelayState::kStandby) {
      spdlog::info("standby: {}; checking again every {} ms (slot.retry.delay.ms) and taking over "
                   "when it is released",
                   st.message(), settings_.standby_retry_ms);
    }
    state_ = RelayState::kStandby;
    return ScheduleConnect(std::chrono::milliseconds(settings_.standby_retry_ms));
  }
  if (!st.IsRetriableConnection()) return Fail(st);
  ++consecutive_failures_;
  if (settings_.errors_max_retries >= 0 && consecutive_failures_ > settings_.errors_max_retries) {
    return Fail(st.WithContext("giving up after " + std::to_string(settings_.errors_max_retries) +
                               " retries (errors.max.retries)"));
  }
  if (consecutive_failures_ == 1) {
    spdlog::warn("{}; retrying with backoff up to {} ms", st.message(),
                 settings_.reconnect_backoff_max_ms);
  } else {
    spdlog::debug("reconnect attempt {} failed: {}", consecutive_failures_, st.message());
  }
  state_ = RelayState::kConnecting;
  ScheduleConnect(NextBackoff());
}

std::chrono::milliseconds Relay::NextBackoff() {
  // Exponential, capped, with "equal jitter" so a fleet of relays does not reconnect in step.
  const int shift = std::min(consecutive_failures_ - 1, 20);
  const int64_t ceiling = std::min(settings_.reconnect_backoff_max_ms,
                                   settings_.reconnect_backoff_initial_ms << std::max(shift, 0));
  std::uniform_int_distribution<int64_t> half(0, ceiling / 2);
  return std::chrono::milliseconds(ceiling - ceiling / 2 + half(jitter_));
}

void Relay::ScheduleConnect(std::chrono::milliseconds delay) {
  connect_timer_.expires_after(delay);
  connect_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) TryConnect();
  });
}

void Relay::CloseConnection() {
  boost::system::error_code ignored;
  pg_socket_.cancel(ignored);
  pg_socket_.close(ignored);
  socket_wait_armed_ = false;
  receive_watch_.Stop();
  conn_.reset();
}

void Relay::ConnectionLost(const Status& cause) {
  spdlog::warn("lost the replication connection: {}; reconnecting with backoff, {} records "
               "still in flight to Kafka",
               cause.message(), tracker_.inflight_records());
  CloseConnection();
  connection_error_ = "lost the replication connection: " + cause.message();
  state_ = RelayState::kConnecting;
  consecutive_failures_ = 1;
  ScheduleConnect(NextBackoff());
}

void Relay::OnStreamError(Status status) {
  if (status.IsRetriableConnection() && !stopping_) return ConnectionLost(status);
  Fail(std::move(status));
}

// --- Streaming -----------------------------------------------------------------------------

bool Relay::Backpressured() const {
  if (!held_.empty()) return true;
  if (static_cast<int64_t>(tracker_.inflight_records()) >= settings_.max_queue_size) return true;
  return settings_.max_queue_size_bytes > 0 &&
         static_cast<int64_t>(tracker_.inflight_bytes()) >= settings_.max_queue_size_bytes;
}

void Relay::Pump() {
  pump_scheduled_ = false;
  if (finished_ || !SendHeld()) return;
  for (int handled = 0; handled < kMessagesPerTurn; ++handled) {
    if (stopping_ || paused_ || state_ != RelayState::kStreaming || Backpressured()) return;
    std::string_view message;
    auto read = conn_->ReadMessage(message);
    if (!read.ok()) return OnStreamError(read.status());
    if (*read == ReplicationConnection::ReadStatus::kEnded) {
      return OnStreamError(Status::Connection("the server ended the replication stream"));
    }
    if (*read == ReplicationConnection::ReadStatus::kWouldBlock) return WaitForSocket();
    // kConnection: an aborted Kafka transaction, replayed by reconnecting.
    if (Status st = HandleMessage(message); !st.ok()) return OnStreamError(st);
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
                          if (ec || stopping_ || !conn_) return;
                          if (Status st = conn_->ConsumeInput(); !st.ok()) return OnStreamError(st);
                          receive_watch_.Received();
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
    if (state_ == RelayState::kStreaming || (stopping_ && conn_)) SendStatus();
    ArmStatusTimer();
  });
}

void Relay::ArmProgressTimer() {
  if (settings_.progress_interval_ms <= 0) return;
  progress_timer_.expires_after(std::chrono::milliseconds(settings_.progress_interval_ms));
  progress_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    LogProgress();
    ArmProgressTimer();
  });
}

void Relay::LogProgress() {
  uint64_t read = 0;
  uint64_t acked = 0;
  for (const auto& [_, n] : counters_.source_records) read += n;
  for (const auto& [_, n] : counters_.acked) acked += n;
  const auto now = std::chrono::steady_clock::now();
  const double seconds =
      std::max(0.001, std::chrono::duration<double>(now - progress_last_time_).count());
  const char* state = paused_ ? "PAUSED" : RelayStateName(state_);
  spdlog::info("progress: {:.1f} records/s read, {:.1f} records/s acked, lag {:.1f} s, confirmed "
               "LSN {}, {} in flight, {}",
               static_cast<double>(read - progress_last_read_) / seconds,
               static_cast<double>(acked - progress_last_acked_) / seconds,
               ReplicationLagSeconds(), Confirmable().ToString(),
               tracker_.inflight_records(), state);
  progress_last_read_ = read;
  progress_last_acked_ = acked;
  progress_last_time_ = now;
  WarnIfStalled();
}

void Relay::WarnIfStalled() {
  // librdkafka retries a retriable refusal (NOT_ENOUGH_REPLICAS, no leader) and an unreachable
  // broker until errors.retry.timeout, forever by default, and logs such retries only at debug
  // level: without this line a relay held that way would look merely idle.
  const auto now = std::chrono::steady_clock::now();
  const std::optional<uint64_t> oldest = tracker_.OldestPending();
  if (!oldest || oldest != stall_ticket_) {
    stall_ticket_ = oldest;
    stall_since_ = now;
    return;
  }
  const std::optional<DeliveryTracker::Source> source = tracker_.SourceOf(*oldest);
  if (!source) return;
  auto info = inflight_info_.find(*oldest);
  const std::string topic = info != inflight_info_.end() ? info->second.topic->first : "?";
  spdlog::warn("a record for topic '{}' ({} at LSN {}) has waited over {} s for Kafka's "
               "acknowledgement; librdkafka retries it until errors.retry.timeout ({}), and the "
               "slot stays confirmed at {} meanwhile. Usual causes: a broker down, or the topic "
               "has fewer in-sync replicas than its min.insync.replicas (NOT_ENOUGH_REPLICAS); "
               "see the broker's log",
               topic, OriginText(source->table), source->lsn.ToString(),
               std::chrono::duration_cast<std::chrono::seconds>(now - stall_since_).count(),
               settings_.errors_retry_timeout_ms > 0
                   ? std::to_string(settings_.errors_retry_timeout_ms) + " ms"
                   : std::string("-1: forever"),
               Confirmable().ToString());
}

Lsn Relay::Confirmable() const {
  return guarantee_ ? guarantee_->Confirmable(tracker_.confirmable()) : tracker_.confirmable();
}

Status Relay::AfterGuarantee(Status outcome) {
  if (guarantee_->TakeDropped()) DropAborted();
  return outcome;
}

void Relay::DropAborted() {
  // Their delivery reports were served during the abort; held records were never produced.
  for (const HeldRecord& held : held_) tracker_.Acknowledge(held.ticket);
  held_.clear();
  for (const auto& [ticket, _] : inflight_info_) tracker_.Acknowledge(ticket);
  inflight_info_.clear();
  tracker_.Rebase(Confirmable());
}

void Relay::ArmBoundaryTimer() {
  const auto deadline = guarantee_->TickDeadline();
  if (!deadline || boundary_timer_armed_ || finished_) return;
  boundary_timer_armed_ = true;
  // Not sooner than a few milliseconds: a due transaction may have to wait for the end of its
  // source transaction or for held records, and the timer must not spin meanwhile.
  boundary_timer_.expires_at(
      std::max(*deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(5)));
  boundary_timer_.async_wait([this](const boost::system::error_code& ec) {
    boundary_timer_armed_ = false;
    if (ec || finished_ || stopping_) return;
    if (Status ticked = AfterGuarantee(guarantee_->Tick(held_.empty())); !ticked.ok()) {
      return OnStreamError(ticked);
    }
    ConfirmWhenCaughtUp();
    ArmBoundaryTimer();
  });
}

void Relay::SendStatus(bool reply_requested) {
  if (!conn_) return;
  // Never below the slot's position as read at connect: the server has that already, and a
  // lower value would come from an older ledger (a standby that lost a race, another server).
  const Lsn flush = std::max(Confirmable(), slot_floor_);
  const Lsn write = std::max(received_lsn_, flush);
  if (Status st = conn_->SendStandbyStatus(write, flush, reply_requested); !st.ok()) {
    return OnStreamError(st);
  }
  if (flush != last_sent_flush_) {
    spdlog::debug("confirmed LSN {} to the server", flush.ToString());
    last_sent_flush_ = flush;
    guarantee_->Confirmed(flush);
    ArmBoundaryTimer();
  }
  confirmed_lsn_ = flush.value();
}

void Relay::ConfirmWhenCaughtUp() {
  // With nothing in flight the confirmable position is final until new rows arrive: tell the
  // server now rather than at the next periodic update (10 s by default), so the slot, and
  // monitoring of it, is current whenever the relay has caught up. A short delay folds a
  // run of small transactions into one status update.
  if (caught_up_armed_ || tracker_.inflight_records() != 0 || !conn_ ||
      Confirmable() == last_sent_flush_) {
    return;
  }
  caught_up_armed_ = true;
  caught_up_timer_.expires_after(std::chrono::milliseconds(kCaughtUpStatusDelayMs));
  caught_up_timer_.async_wait([this](const boost::system::error_code& ec) {
    caught_up_armed_ = false;
    if (ec || finished_ || state_ != RelayState::kStreaming) return;
    SendStatus();
  });
}

Status Relay::HandleMessage(std::string_view message) {
  if (message.empty()) return Status::Protocol("empty CopyData message");
  if (message[0] == 'k') {
    auto keepalive = ParseKeepalive(message);
    if (!keepalive.ok()) return keepalive.status();
    // Everything committed before walEnd has been streamed already; while nothing is in flight
    // that position is safe to confirm, so an idle outbox does not pin WAL.
    tracker_.ServerPosition(keepalive->wal_end);
    guarantee_->ServerPosition(keepalive->wal_end);
    if (keepalive->reply_requested) SendStatus();
    return Status::Ok();
  }
  if (message[0] != 'w') {
    return Status::Protocol(std::string("unexpected replication message type '") + message[0] + "'");
  }
  auto xlog = ParseXLogData(message);
  if (!xlog.ok()) return xlog.status();
  if (xlog->data_start > received_lsn_) received_lsn_ = xlog->data_start;
  WALRELAY_RETURN_IF_ERROR(decoder_->Decode(xlog->payload, xlog->data_start));
  while (const DecodedMessage* decoded = decoder_->Next()) {
    WALRELAY_RETURN_IF_ERROR(HandleDecoded(*decoded));
  }
  return Status::Ok();
}

Status Relay::HandleDecoded(const DecodedMessage& decoded) {
  switch (decoded.kind) {
    case MessageKind::kBegin:
      tracker_.BeginTransaction();
      guarantee_->SourceBegan();
      current_txn_ = decoded.begin;
      return Status::Ok();
    case MessageKind::kCommit:
      tracker_.CommitTransaction(decoded.commit.end_lsn);
      WALRELAY_RETURN_IF_ERROR(
          AfterGuarantee(guarantee_->SourceCommitted(decoded.commit, held_.empty())));
      ArmBoundaryTimer();  // a Kafka transaction left open is due by its interval
      ConfirmWhenCaughtUp();
      return Status::Ok();
    case MessageKind::kMessage:
      return HandleLogicalMessage(decoded.message);
    case MessageKind::kChange:
      return HandleChange(decoded.change);
    case MessageKind::kExcludedChange:
      return Status::Ok();
  }
  return Status::Ok();
}

const Relay::SourceTable& Relay::LookupTable(std::string_view schema, std::string_view table) {
  // Rows of one table usually arrive together: try the previous table first.
  // Compares "schema.table" without building it for every row.
  auto matches = [schema, table](const SourceTable& t) {
    const std::string_view q = t.qualified;
    return q.size() == schema.size() + 1 + table.size() && q.starts_with(schema) &&
           q[schema.size()] == '.' && q.ends_with(table);
  };
  if (last_table_ < tables_.size() && matches(tables_[last_table_])) return tables_[last_table_];
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (matches(tables_[i])) {
      last_table_ = i;
      return tables_[i];
    }
  }
  SourceTable t{std::string(schema) + "." + std::string(table), false, nullptr};
  t.included = settings_.IncludesTable(t.qualified);
  if (t.included) t.read_counter = &counters_.source_records[t.qualified];
  tables_.push_back(std::move(t));
  last_table_ = tables_.size() - 1;
  return tables_.back();
}

Status Relay::HandleChange(const RowChange& change) {
  const SourceTable& source = LookupTable(change.schema, change.table);
  if (!source.included) return Status::Ok();
  ++*source.read_counter;
  Status relayed = RelayRecord(MakeSourceRecord(change, source_context_), source.qualified, [&] {
    // The dead letter carries the row as the change event it came in as.
    Record original = MakeSourceRecord(change, source_context_);
    original.value = SerializeChangeEvent(change, source_context_, NowMillis());
    return original;
  });
  if (!relayed.ok() || change.op != ChangeOp::kDelete || !settings_.tombstones_on_delete)
    return relayed;
  return RelayRecord(MakeTombstoneRecord(change, source_context_), source.qualified,
                     [&] { return MakeTombstoneRecord(change, source_context_); });
}

Status Relay::HandleLogicalMessage(const LogicalMessage& message) {
  if (!message.transactional) {
    // Written outside any transaction, it is decoded even if the writer's work rolls back,
    // and it arrives apart from the commits the slot is confirmed at: not an outbox event.
    ++counters_.logical_messages["non_transactional"];
    if (auto held_back = non_transactional_warnings_.Admit(message.prefix)) {
      spdlog::warn("refused a non-transactional logical decoding message with prefix '{}' at LSN "
                   "{}: only pg_logical_emit_message(true, ...) messages are relayed, so that an "
                   "event is published exactly when its transaction commits ({} more with this "
                   "prefix refused since the last such line; at most one a minute per prefix, "
                   "all counted in walrelay_logical_messages_total)",
                   message.prefix, message.lsn.ToString(), *held_back);
    }
    return Status::Ok();
  }
  if (!settings_.IncludesMessagePrefix(message.prefix)) {
    ++counters_.logical_messages["filtered"];
    return Status::Ok();
  }
  ++counters_.logical_messages["relayed"];
  auto make = [&] {
    return MakeMessageRecord(message, current_txn_.xid, current_txn_.commit_time_ms,
                             source_context_, NowMillis());
  };
  return RelayRecord(make(), MessageOrigin(message.prefix), make);
}

Status Relay::RelayRecord(Record record, const std::string& origin,
                          const std::function<Record()>& original) {
  auto outcome = chain_->Apply(record);
  if (!outcome.ok()) {
    const std::string id = record.FindHeader("id") && record.FindHeader("id")->value
                               ? " (event id " + *record.FindHeader("id")->value + ")"
                               : "";
    FailureContext failure{"TRANSFORMATION", "transform chain", "walrelay.TransformError",
                           outcome.status().message(), settings_.name, record.source.lsn, origin};
    return ApplyErrorPolicy(original(), failure,
                            outcome.status().WithContext(OriginText(origin) + id + " at LSN " +
                                                         record.source.lsn.ToString()),
                            std::nullopt);
  }
  if (*outcome == TransformOutcome::kDrop) return Status::Ok();
  if (record.change) {
    if (!record.source.tombstone)
      record.value = SerializeChangeEvent(*record.change, source_context_, NowMillis());
    SetChangeEventShapes(record);
    record.change = nullptr;
  }
  record.message = nullptr;
  if (auto failure = converters_->Apply(record)) {
    // The dead letter keeps walrelay's own bytes: the record as it was before conversion.
    FailureContext context{failure->stage, failure->class_name,
                           "org.apache.kafka.connect.errors.DataException",
                           failure->status.message(), settings_.name, record.source.lsn, origin};
    return ApplyErrorPolicy(record, context, failure->status, std::nullopt);
  }
  return Produce(record, origin);
}

void Relay::SetChangeEventShapes(Record& record) const {
  // Structs, described by Debezium's schemas; a tombstone has none. The schemas are only
  // built when a converter writes them: otherwise only their absence matters (a null key).
  const bool schemas = converters_->WritesSchemas();
  record.key_shape = ConnectShape{
      ConnectType::kStruct, schemas ? ChangeEventKeySchemaJson(*record.change, source_context_) : ""};
  record.value_shape = ConnectShape{
      ConnectType::kStruct, schemas && !record.source.tombstone
                                ? ChangeEventSchemaJson(*record.change, source_context_)
                                : ""};
}

Status Relay::Produce(Record& record, const std::string& table) {
  const size_t bytes = record.topic.size() + (record.key ? record.key->size() : 0) +
                       (record.value ? record.value->size() : 0);
  WALRELAY_RETURN_IF_ERROR(AfterGuarantee(guarantee_->BeforeRecord(bytes)));
  ArmBoundaryTimer();
  const uint64_t ticket = tracker_.AddRecord(record.source.lsn, bytes, table);
  if (!last_topic_ || record.topic != last_topic_->first)
    last_topic_ = &*counters_.acked.try_emplace(record.topic).first;
  inflight_info_[ticket] = {last_topic_, record.source.commit_time_ms};
  return Send(record, table, ticket);
}

Status Relay::Send(Record& record, const std::string& table, uint64_t ticket) {
  rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
  Status st = producer_->Produce(record, ticket, &code);
  if (st.ok()) return st;
  if (code == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
    return Hold(HeldRecord{std::move(record), table, ticket, false});
  }
  Status error =
      st.WithContext(OriginText(table) + " at LSN " + record.source.lsn.ToString());
  if (!IsRecordSpecificError(code)) return StopAt(ticket, std::move(error));
  FailureContext failure{"KAFKA_PRODUCE", "librdkafka", rd_kafka_err2name(code), st.message(),
                         settings_.name, record.source.lsn, table};
  return ApplyErrorPolicy(record, failure, std::move(error), ticket);
}

Status Relay::StopAt(std::optional<uint64_t> ticket, Status error) {
  if (ticket) {
    tracker_.Fail(*ticket, error.message());
    inflight_info_.erase(*ticket);
  }
  return error;
}

Status Relay::ApplyErrorPolicy(const Record& record, const FailureContext& failure, Status error,
                               std::optional<uint64_t> ticket) {
  ++counters_.failed[FailedStageLabel(failure.stage)];
  if (!settings_.errors_tolerance_all) return StopAt(ticket, std::move(error));
  if (settings_.dead_letter_topic.empty()) {
    // Kafka Connect's errors.tolerance=all without a dead-letter queue: log and skip.
    spdlog::warn("skipping {} (errors.tolerance=all, no dead-letter topic): {}",
                 DescribeRecord(record), error.message());
    ++counters_.skipped;
    if (ticket) {
      tracker_.Acknowledge(*ticket);
      inflight_info_.erase(*ticket);
    }
    return Status::Ok();
  }
  Record dead = MakeDeadLetterRecord(record, failure, settings_.dead_letter_topic,
                                     settings_.dead_letter_context_headers,
                                     producer_->MaxValueBytes());
  spdlog::warn("sending {} to dead-letter topic '{}': {}", DescribeRecord(record),
               settings_.dead_letter_topic, error.message());
  // The dead letter takes the failed record's place in the ledger, so the row's LSN is
  // confirmed only once the dead letter is acknowledged.
  if (!ticket) {
    WALRELAY_RETURN_IF_ERROR(
        AfterGuarantee(guarantee_->BeforeRecord(dead.value ? dead.value->size() : 0)));
    ArmBoundaryTimer();
  }
  const uint64_t dead_ticket =
      ticket ? *ticket : tracker_.AddRecord(failure.lsn, dead.value ? dead.value->size() : 0,
                                            failure.table);
  TopicAcks* dead_letter_acks = &*counters_.acked.try_emplace(settings_.dead_letter_topic).first;
  auto info = inflight_info_.find(dead_ticket);
  if (info == inflight_info_.end()) {
    inflight_info_[dead_ticket] = {dead_letter_acks, record.source.commit_time_ms};
  } else {
    info->second.topic = dead_letter_acks;
  }
  ++counters_.dead_letters;
  return SendDeadLetter(dead, failure.table, dead_ticket);
}

Status Relay::SendDeadLetter(Record& dead, const std::string& table, uint64_t ticket) {
  rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
  Status st = producer_->Produce(dead, ticket, &code);
  if (st.ok()) return st;
  if (code == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
    return Hold(HeldRecord{std::move(dead), table, ticket, true});
  }
  tracker_.Fail(ticket, st.message());
  inflight_info_.erase(ticket);
  return st.WithContext("dead-letter topic '" + settings_.dead_letter_topic + "'");
}

Status Relay::Hold(HeldRecord held) {
  // librdkafka's own queue (queue.buffering.max.messages or .max.kbytes) is full. Waiting for
  // room here would block the loop: no status updates, REST or delivery reports. The record
  // stays pending in the ledger, so nothing after it is confirmed, and the relay stops reading
  // until a delivery report has made room (see SchedulePump).
  if (producer_->OutstandingMessages() == 0) {
    // Nothing in librdkafka's queue will make room: the record alone exceeds it.
    Status error = Status::Kafka(
        "cannot produce " + DescribeRecord(held.record) + " (" + OriginText(held.table) +
        "): it does not fit librdkafka's empty queue; raise 'kafka.queue.buffering.max.kbytes' "
        "(or remove the override)");
    tracker_.Fail(held.ticket, error.message());
    inflight_info_.erase(held.ticket);
    return error;
  }
  if (held_.empty()) {
    spdlog::debug("librdkafka's queue is full ({} messages); holding the record for topic '{}' "
                  "and reading no further until Kafka acknowledges some",
                  producer_->OutstandingMessages(), held.record.topic);
  }
  ++counters_.queue_full;
  held_.push_back(std::move(held));
  return Status::Ok();
}

bool Relay::SendHeld() {
  while (!held_.empty()) {
    HeldRecord held = std::move(held_.front());
    held_.pop_front();
    const size_t before = held_.size();
    Status st = held.dead_letter ? SendDeadLetter(held.record, held.table, held.ticket)
                                 : Send(held.record, held.table, held.ticket);
    if (!st.ok()) {
      Fail(st);
      return false;
    }
    if (held_.size() > before) {
      // Still full: put it back in front, in its order.
      held_.push_front(std::move(held_.back()));
      held_.pop_back();
      return false;
    }
  }
  return true;
}

void Relay::OnDelivery(const DeliveryReport& report) {
  if (guarantee_->Discarding()) {
    // Served inside an abort: the record is in no transaction anyone will read.
    tracker_.Acknowledge(report.ticket);
    inflight_info_.erase(report.ticket);
    return;
  }
  if (report.error == RD_KAFKA_RESP_ERR_NO_ERROR) {
    OnAcknowledged(report.ticket);
  } else if (IsShutdownPurge(report.error)) {
    tracker_.Fail(report.ticket, "purged at shutdown");
    inflight_info_.erase(report.ticket);
  } else {
    OnRefused(report);
  }
  if (stopping_ && tracker_.inflight_records() == 0) {
    FinishShutdown();
  } else {
    SchedulePump();
  }
}

void Relay::OnAcknowledged(uint64_t ticket) {
  tracker_.Acknowledge(ticket);
  if (auto info = inflight_info_.find(ticket); info != inflight_info_.end()) {
    ++info->second.topic->second;
    last_acked_commit_ms_ = std::max(last_acked_commit_ms_, info->second.commit_time_ms);
    inflight_info_.erase(info);
  }
  ConfirmWhenCaughtUp();
}

bool Relay::IsShutdownPurge(rd_kafka_resp_err_t error) const {
  // Only FinishShutdown purges; a purge before it was librdkafka's own, after a failure of
  // the whole producer, and is refused like any other producer-wide error.
  return finished_ &&
         (error == RD_KAFKA_RESP_ERR__PURGE_QUEUE || error == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT);
}

void Relay::OnRefused(const DeliveryReport& report) {
  const std::string reason = report.description + ": " + DeliveryErrorText(report.error);
  if (!guarantee_->RefusalsFollowErrorPolicy()) {
    // The record's transaction cannot commit any more: it is aborted and replayed, and the
    // record with it, as after a lost connection.
    ++counters_.failed["produce"];
    tracker_.Acknowledge(report.ticket);
    inflight_info_.erase(report.ticket);
    // Not after a failure of the whole producer (a fence): the relay is stopping for that.
    if (state_ == RelayState::kStreaming && !stopping_ && final_status_.ok())
      OnStreamError(Status::Connection("Kafka did not accept " + reason));
    return;
  }
  const std::optional<DeliveryTracker::Source> source = tracker_.SourceOf(report.ticket);
  const bool dead_letter_failed =
      !settings_.dead_letter_topic.empty() && report.failed.topic == settings_.dead_letter_topic;
  Status outcome = Status::Kafka("Kafka did not accept " + reason);
  if (source && !dead_letter_failed && IsRecordSpecificError(report.error)) {
    FailureContext failure{"KAFKA_PRODUCE", "librdkafka", rd_kafka_err2name(report.error),
                           DeliveryErrorText(report.error), settings_.name, source->lsn,
                           source->table};
    const Lsn lsn = source->lsn;
    outcome = ApplyErrorPolicy(report.failed, failure, outcome, report.ticket);
    if (!outcome.ok()) outcome = StaysConfirmedBefore(lsn, "Kafka did not accept " + reason);
  } else {
    const std::optional<Lsn> lsn = source ? std::optional<Lsn>(source->lsn) : std::nullopt;
    ++counters_.failed["produce"];
    tracker_.Fail(report.ticket, reason);
    if (lsn) outcome = StaysConfirmedBefore(*lsn, "Kafka did not accept " + reason);
  }
  if (!tracker_.SourceOf(report.ticket)) inflight_info_.erase(report.ticket);
  if (!outcome.ok()) Fail(outcome);
}

Status Relay::StaysConfirmedBefore(Lsn row_lsn, const std::string& what) const {
  return Status::Kafka(what + "; the row is at LSN " + row_lsn.ToString() +
                       "; the slot stays confirmed at " + Confirmable().ToString() +
                       " so it is sent again after a restart");
}

void Relay::OnProducerFailure(const Status& failure) {
  // Recorded at once: the delivery reports served next in the same poll (records failed or
  // purged because of this failure) must not replace it as the reason the relay stops.
  RecordFailure(Status(failure.code(), failure.message() + SlotStaysConfirmed()));
  // Served inside librdkafka's poll: act from the loop, where stopping may poll again.
  boost::asio::post(io_, [this] {
    BeginShutdown();
    // No record in flight can be acknowledged through a refused producer: waiting
    // shutdown.timeout.ms for them would only delay the exit.
    FinishShutdown();
  });
}

std::string Relay::SlotStaysConfirmed() const {
  if (!tracker_initialised_) return "";
  return "; slot '" + settings_.slot_name + "' stays confirmed at LSN " +
         Confirmable().ToString() + ", only what Kafka acknowledged";
}

void Relay::SchedulePump() {
  if (pump_scheduled_ || finished_) return;
  // Records held back because librdkafka's queue was full go out as soon as a delivery report
  // made room, whatever else holds the stream (pause, a stop waiting for acknowledgements).
  if (held_.empty() && (state_ != RelayState::kStreaming || stopping_ || paused_ ||
                        socket_wait_armed_ || Backpressured())) {
    return;
  }
  pump_scheduled_ = true;
  boost::asio::post(io_, [this] { Pump(); });
}

// --- Operating: pause, resume, restart, observers -----------------------------------------

void Relay::Pause() {
  if (paused_ || stopping_) return;
  paused_ = true;
  spdlog::info("paused: not reading slot '{}' nor producing; {} records still in flight, the "
               "replication connection is kept alive",
               settings_.slot_name, tracker_.inflight_records());
}

void Relay::Resume() {
  if (!paused_) return;
  paused_ = false;
  spdlog::info("resumed streaming slot '{}'", settings_.slot_name);
  SchedulePump();
}

bool Relay::Restart() {
  if (stopping_) return false;
  spdlog::info("restart requested: reconnecting to slot '{}'", settings_.slot_name);
  // Its walsender lets go of the slot moments after the connection closes.
  if (conn_) restart_walsender_pid_ = conn_->backend_pid();
  connector_.Cancel();
  CloseConnection();
  connection_error_ = "restarting";
  state_ = RelayState::kConnecting;
  consecutive_failures_ = 0;
  ScheduleConnect(std::chrono::milliseconds(0));
  return true;
}

int Relay::kafka_queue_length() const { return producer_ ? producer_->OutstandingMessages() : 0; }

double Relay::ReplicationLagSeconds() const {
  if (state_ == RelayState::kStreaming && !paused_ && tracker_.idle()) return 0;
  if (last_acked_commit_ms_ == 0) return 0;
  return static_cast<double>(std::max<int64_t>(0, NowMillis() - last_acked_commit_ms_)) / 1000.0;
}

// --- Stopping ------------------------------------------------------------------------------

void Relay::RequestStop() {
  boost::asio::post(io_, [this] {
    if (!stopping_) spdlog::info("stop requested; waiting for Kafka to acknowledge in-flight records");
    BeginShutdown();
  });
}

// Slot health: a watch of its own (pg/slot_health.h); an invalidated slot stops the relay at
// once, whatever the replication connection is doing (paused, reconnecting, backpressured).
void Relay::StartSlotHealthWatch() {
  if (settings_.slot_health_interval_ms <= 0) return;
  SlotHealthOptions options;
  options.pg_params = settings_.pg_params;
  options.slot_name = settings_.slot_name;
  options.interval = std::chrono::milliseconds(settings_.slot_health_interval_ms);
  options.stall_warn = std::chrono::milliseconds(settings_.slot_stall_warn_ms);
  slot_health_ = SlotHealthWatch::Start(
      std::move(options), [this] { return confirmed_lsn(); },
      [this](Status status) { boost::asio::post(io_, [this, status] { Fail(status); }); });
}

SlotHealthSample Relay::slot_health() const {
  return slot_health_ ? slot_health_->Latest() : SlotHealthSample{};
}

void Relay::Fail(Status status) {
  RecordFailure(std::move(status));
  BeginShutdown();
}

void Relay::RecordFailure(Status status) {
  if (!final_status_.ok()) return;  // the first failure is the cause; later ones follow from it
  spdlog::error("{}", status.ToString());
  final_status_ = std::move(status);
}

void Relay::BeginShutdown() {
  if (stopping_ || finished_) return;
  // Before stopping_: delivery reports served while a commit flushes must not finish the stop
  // from inside it.
  if (guarantee_) {
    if (Status ended = AfterGuarantee(guarantee_->EndStream(held_.empty()));
        !ended.ok() && ended.code() != ErrorCode::kConnection) {
      RecordFailure(ended);
    }
  }
  stopping_ = true;
  state_ = RelayState::kStopping;
  connect_timer_.cancel();
  connector_.Cancel();
  receive_watch_.Stop();
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

void Relay::DropSlotOnStop() {
  // The slot is the only copy of the rows whose records Kafka has not acknowledged: dropping it
  // would lose them, where keeping it sends them again on the next start.
  if (tracker_.inflight_records() > 0) {
    spdlog::warn("slot.drop.on.stop: keeping replication slot '{}': {} records are still "
                 "unacknowledged by Kafka after shutdown.timeout.ms={}; it stays confirmed at LSN "
                 "{} so they are sent again on the next start (drop it by hand if they are not "
                 "needed)",
                 settings_.slot_name, tracker_.inflight_records(), settings_.shutdown_timeout_ms,
                 Confirmable().ToString());
    return;
  }
  if (Status st = conn_->DropSlot(settings_.slot_name); !st.ok()) {
    spdlog::warn("slot.drop.on.stop: {}", st.message());
  } else {
    spdlog::info("dropped replication slot '{}' (slot.drop.on.stop=true)", settings_.slot_name);
    // Dropped on purpose: the next start is a first start, not a slot gone missing.
    guarantee_->ForgetPosition();
  }
}

void Relay::FinishShutdown() {
  if (finished_) return;
  finished_ = true;
  if (conn_) {
    SendStatus();
    if (conn_) {
      if (Status st = conn_->EndStreaming(); !st.ok()) spdlog::warn("{}", st.message());
      if (final_status_.ok() && settings_.slot_drop_on_stop) DropSlotOnStop();
    }
  }
  if (tracker_initialised_) {
    spdlog::info("stopped; slot '{}' confirmed up to LSN {}", settings_.slot_name,
                 Confirmable().ToString());
  } else {
    spdlog::info("stopped before streaming slot '{}'", settings_.slot_name);
  }
  if (producer_ && producer_->OutstandingMessages() > 0) producer_->PurgeAll();
  boost::system::error_code ignored;
  status_timer_.cancel();
  poll_timer_.cancel();
  shutdown_timer_.cancel();
  connect_timer_.cancel();
  receive_watch_.Stop();
  progress_timer_.cancel();
  caught_up_timer_.cancel();
  boundary_timer_.cancel();
  kafka_events_.cancel(ignored);
  kafka_events_.close(ignored);
  CloseConnection();
  state_ = RelayState::kStopped;
  io_.stop();
}

}  // namespace walrelay
