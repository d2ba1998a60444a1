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

}  // namespace

// --- Building ------------------------------------------------------------------------------

Result<std::unique_ptr<Relay>> Relay::Create(RelaySettings settings, boost::asio::io_context& io) {
  std::unique_ptr<Relay> relay(new Relay(std::move(settings), io));
  WALRELAY_RETURN_IF_ERROR(relay->Build());
  return relay;
}

Relay::Relay(RelaySettings settings, boost::asio::io_context& io)
    : settings_(std::move(settings)),
      io_(io),
      connector_(settings_,
                 SourceConnector::Hooks{
                     [this](int server_version) {
                       return decoder_->StartReplicationOptions(server_version);
                     },
                     [this] { return pipeline_->guarantee().FinishLastStream(); },
                     [this](const SourceIdentity& server, bool slot_missing) {
                       return pipeline_->guarantee().StoredPosition(server, slot_missing);
                     },
                     [this](const SourceIdentity& server) {
                       return pipeline_->guarantee().SlotTaken(server);
                     },
                     [this](const SourceIdentity& server, Lsn start, bool own_position_stored) {
                       return pipeline_->guarantee().StreamStarts(server, start,
                                                                  own_position_stored);
                     }},
                 io),
      pg_socket_(io),
      status_timer_(io),
      shutdown_timer_(io),
      connect_timer_(io),
      receive_watch_(
          io, settings_.receive_timeout_ms, [this] { SendStatus(true); },
          [this](const Status& silent) { ConnectionLost(silent); }),
      caught_up_timer_(io),
      boundary_timer_(io),
      gather_timer_(io),
      attempt_end_timer_(io),
      backoff_(settings_.reconnect_backoff_initial_ms, settings_.reconnect_backoff_max_ms),
      progress_log_(io, *this) {}

Relay::~Relay() = default;

Status Relay::Build() {
  DecoderOptions options;
  options.publication_names = settings_.publication_name;
  options.wal2json_add_tables = settings_.Wal2JsonAddTables();
  options.catalog = catalog_.Lookups();
  auto decoder = MakeDecoder(settings_.plugin_name, options);
  if (!decoder.ok()) return decoder.status();
  decoder_ = std::move(decoder).value();
  auto output = KafkaOutput::Create(
      io_, settings_, [this](const DeliveryReport& report) { OnDelivery(report); },
      [this](const Status& failure) { OnProducerFailure(failure); });
  if (!output.ok()) return output.status();
  output_ = std::move(output).value();
  auto guarantee = MakeDeliveryGuarantee(settings_, *output_, counters_);
  if (!guarantee.ok()) return guarantee.status();
  auto pipeline =
      RecordPipeline::Create(settings_, *output_, std::move(guarantee).value(), counters_,
                             [this](Status failure) { OnPipelineFailure(failure); });
  if (!pipeline.ok()) return pipeline.status();
  pipeline_ = std::move(pipeline).value();
  for (const auto& key : settings_.properties.UnreadKeys()) {
    spdlog::warn("unknown configuration key '{}' is ignored", key);
  }
  // With a regex table.include.list (wal2json) or a publication of more tables (pgoutput) the
  // stream carries other tables: their rows are skipped before their columns are decoded, so
  // they cannot fail the relay.
  decoder_->SetTableFilter([this](std::string_view schema, std::string_view table) {
    return pipeline_->IncludesTable(schema, table);
  });
  return Status::Ok();
}

Status Relay::Run() {
  loop_thread_.Bind();
  if (Status watching = output_->Start(); !watching.ok()) {
    spdlog::error("{}", watching.ToString());
    return watching;
  }
  ArmStatusTimer();
  progress_log_.Start();
  StartSlotHealthWatch();
  TryConnect();
  io_.run();
  state_ = RelayState::kStopped;
  return final_status_;
}

// --- Connecting, reconnecting, standby -----------------------------------------------------

void Relay::TryConnect() {
  if (stopping_) return;
  // A cancelled attempt (Restart) may still be inside a hook on the connector's worker, using
  // the guarantee and the producers: the next one starts once it has ended, and the loop goes
  // on meanwhile.
  if (connector_.busy()) return ScheduleConnect(kAttemptEndCheck);
  // The next stream replays from what is confirmable: what the last one left open in Kafka is
  // committed if it holds whole source transactions, else dropped.
  if (Status ended = pipeline_->EndStream();
      !ended.ok() && ended.code() != ErrorCode::kConnection) {
    return Fail(ended);
  }
  ConnectPlan plan;
  plan.streamed_before = ever_streamed_;
  plan.last_confirmed = pipeline_->last_confirmed();
  plan.previous_walsender_pid = std::exchange(restart_walsender_pid_, std::nullopt);
  connector_.Start(std::move(plan),
                   [this](Result<SourceSession> attempt) { OnConnectAttempt(std::move(attempt)); });
}

void Relay::OnConnectAttempt(Result<SourceSession> attempt) {
  WALRELAY_ASSERT_OWNER(loop_thread_, "Relay::OnConnectAttempt");
  if (stopping_) return;
  if (!attempt.ok()) return ConnectFailed(attempt.status());
  SourceSession& session = *attempt;
  conn_.emplace(std::move(*session.connection));
  auto socket = DuplicateDescriptor(conn_->socket(),
                                    "replication socket");  // closing it never closes libpq's
  if (!socket.ok()) {
    CloseConnection();
    return Fail(socket.status());
  }
  pg_socket_.assign(*socket);
  if (session.slot_created && !session.slot_recreated) {
    spdlog::info("created replication slot '{}' (plugin {}) at LSN {}", settings_.slot_name,
                 decoder_->plugin_name(), session.slot_position.ToString());
  }
  pipeline_->StreamStarted(StreamStart{session.identity, session.slot_position,
                                       session.start_position, session.slot_recreated,
                                       session.stored});
  catalog_.Adopt(session.catalog);
  const std::string add_tables = settings_.Wal2JsonAddTables();
  spdlog::info("streaming slot '{}' ({}) of database '{}' (tables: {}) from LSN {} to Kafka at {}",
               settings_.slot_name, decoder_->plugin_name(), settings_.dbname,
               add_tables.empty() ? "filtered by regex" : add_tables,
               session.slot_position.ToString(), settings_.kafka["bootstrap.servers"]);
  const RelayState before = state_.load();
  backoff_.Succeeded();
  state_ = RelayState::kStreaming;
  connection_error_.clear();
  if (ever_streamed_) ++counters_.reconnects;
  ever_streamed_ = true;
  if (paused_) spdlog::info("connected while paused; streaming starts on resume");
  confirmed_lsn_ = pipeline_->FlushPosition().value();
  if (before == RelayState::kStandby) spdlog::info("took over slot '{}'", settings_.slot_name);
  receive_watch_.Start(conn_->socket());
  Pump();
}

void Relay::ConnectFailed(const Status& st) {
  const RelayState before = state_.load();
  CloseConnection();
  connection_error_ = st.message();
  if (st.code() == ErrorCode::kSlotInUse) {
    pipeline_->guarantee().SlotHeldElsewhere();
    if (before != RelayState::kStandby) {
      spdlog::info("standby: {}; checking again every {} ms (slot.retry.delay.ms) and taking over "
                   "when it is released",
                   st.message(), settings_.standby_retry_ms);
    }
    state_ = RelayState::kStandby;
    return ScheduleConnect(std::chrono::milliseconds(settings_.standby_retry_ms));
  }
  if (!st.IsRetriableConnection()) return Fail(st);
  const std::chrono::milliseconds delay = backoff_.Failed();
  if (settings_.errors_max_retries >= 0 && backoff_.failures() > settings_.errors_max_retries) {
    return Fail(st.WithContext("giving up after " + std::to_string(settings_.errors_max_retries) +
                               " retries (errors.max.retries)"));
  }
  if (backoff_.failures() == 1) {
    spdlog::warn("{}; retrying with backoff up to {} ms", st.message(),
                 settings_.reconnect_backoff_max_ms);
  } else {
    spdlog::debug("reconnect attempt {} failed: {}", backoff_.failures(), st.message());
  }
  state_ = RelayState::kConnecting;
  ScheduleConnect(delay);
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
  gather_timer_.cancel();
  receive_watch_.Stop();
  conn_.reset();
}

void Relay::ConnectionLost(const Status& cause) {
  WALRELAY_ASSERT_OWNER(loop_thread_, "Relay::ConnectionLost");
  spdlog::warn("lost the replication connection: {}; reconnecting with backoff, {} records "
               "still in flight to Kafka",
               cause.message(), pipeline_->inflight_records());
  CloseConnection();
  connection_error_ = "lost the replication connection: " + cause.message();
  state_ = RelayState::kConnecting;
  backoff_.Succeeded();  // the connection worked until now: start the backoff from the bottom
  ScheduleConnect(backoff_.Failed());
}

void Relay::OnStreamError(Status status) {
  if (status.IsRetriableConnection() && !stopping_) return ConnectionLost(status);
  Fail(std::move(status));
}

void Relay::OnPipelineFailure(Status status) {
  if (status.code() != ErrorCode::kConnection) return Fail(std::move(status));
  // A replay: only while streaming. During a stop, or after a failure of the whole producer
  // (a fence), the relay is stopping for another reason already.
  if (state_ == RelayState::kStreaming && !stopping_ && final_status_.ok())
    OnStreamError(std::move(status));
}

// --- Streaming -----------------------------------------------------------------------------

void Relay::Pump() {
  WALRELAY_ASSERT_OWNER(loop_thread_, "Relay::Pump");
  pump_scheduled_ = false;
  if (finished_) return;
  if (Status sent = pipeline_->SendHeld(); !sent.ok()) return Fail(sent);
  if (pipeline_->holding()) return;
  // A keepalive alone waits for the periodic update: only streamed data is worth an early one.
  bool streamed = false;
  size_t bytes = 0;
  for (int handled = 0; handled < kMessagesPerTurn; ++handled) {
    if (stopping_ || paused_ || state_ != RelayState::kStreaming || pipeline_->Backpressured())
      break;
    std::string_view message;
    auto read = conn_->ReadMessage(message);
    if (!read.ok()) return OnStreamError(read.status());
    if (*read == ReplicationConnection::ReadStatus::kEnded) {
      return OnStreamError(Status::Connection("the server ended the replication stream"));
    }
    if (*read == ReplicationConnection::ReadStatus::kWouldBlock) {
      GatherOrWait(handled, bytes);
      break;
    }
    bytes += message.size();
    // kConnection: an aborted Kafka transaction, replayed by reconnecting.
    if (Status st = HandleMessage(message); !st.ok()) return OnStreamError(st);
    streamed = streamed || message[0] == 'w';
    if (handled + 1 == kMessagesPerTurn) {
      output_->Poll();
      pump_scheduled_ = true;
      boost::asio::post(io_, [this] { Pump(); });
    }
  }
  ArmBoundaryTimer();  // a Kafka transaction left open is due by its interval
  if (streamed) ConfirmWhenCaughtUp();
}

void Relay::GatherOrWait(int handled, size_t bytes) {
  if (handled > 0) receive_watch_.Received();
  // A relay faster than its walsender would otherwise wake for nearly every message (a few
  // microseconds of CPU each): after a short turn, let a millisecond of messages gather first.
  // An idle stream, or one that keeps the loop busy anyway, waits on the socket.
  if (handled == 0 || handled >= kGatherBelow || bytes >= kGatherBelowBytes) return WaitForSocket();
  gather_timer_.expires_after(kGatherDelay);
  gather_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_ || stopping_ || !conn_) return;
    if (Status st = conn_->ConsumeInput(); !st.ok()) return OnStreamError(st);
    Pump();
  });
}

void Relay::SchedulePump() {
  if (pump_scheduled_ || finished_) return;
  // Records held back because librdkafka's queue was full go out as soon as a delivery report
  // made room, whatever else holds the stream (pause, a stop waiting for acknowledgements).
  if (!pipeline_->holding() && (state_ != RelayState::kStreaming || stopping_ || paused_ ||
                                socket_wait_armed_ || pipeline_->Backpressured())) {
    return;
  }
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

Status Relay::HandleMessage(std::string_view message) {
  if (message.empty()) return Status::Protocol("empty CopyData message");
  if (message[0] == 'k') {
    auto keepalive = ParseKeepalive(message);
    if (!keepalive.ok()) return keepalive.status();
    // Everything committed before walEnd has been streamed already; while nothing is in flight
    // that position is safe to confirm, so an idle outbox does not pin WAL.
    pipeline_->ServerPosition(keepalive->wal_end);
    if (keepalive->reply_requested) SendStatus();
    return Status::Ok();
  }
  if (message[0] != 'w') {
    return Status::Protocol(std::string("unexpected replication message type '") + message[0] +
                            "'");
  }
  auto xlog = ParseXLogData(message);
  if (!xlog.ok()) return xlog.status();
  if (xlog->data_start > received_lsn_) received_lsn_ = xlog->data_start;
  WALRELAY_RETURN_IF_ERROR(decoder_->Decode(xlog->payload, xlog->data_start));
  while (const DecodedMessage* decoded = decoder_->Next()) {
    WALRELAY_RETURN_IF_ERROR(pipeline_->Handle(*decoded));
  }
  return Status::Ok();
}

void Relay::OnDelivery(const DeliveryReport& report) {
  WALRELAY_ASSERT_OWNER(loop_thread_, "Relay::OnDelivery");
  if (Status handled = pipeline_->OnDelivery(report); !handled.ok()) OnPipelineFailure(handled);
  if (stopping_ && pipeline_->inflight_records() == 0) return FinishShutdown();
  ConfirmWhenCaughtUp();
  SchedulePump();
}

// --- Confirming ----------------------------------------------------------------------------

void Relay::ArmStatusTimer() {
  status_timer_.expires_after(std::chrono::milliseconds(settings_.status_update_interval_ms));
  status_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    if (state_ == RelayState::kStreaming || (stopping_ && conn_)) SendStatus();
    ArmStatusTimer();
  });
}

void Relay::SendStatus(bool reply_requested) {
  if (!conn_) return;
  const Lsn flush = pipeline_->FlushPosition();
  const Lsn write = std::max(received_lsn_, flush);
  if (Status st = conn_->SendStandbyStatus(write, flush, reply_requested); !st.ok()) {
    return OnStreamError(st);
  }
  if (flush != pipeline_->last_confirmed()) {
    spdlog::debug("confirmed LSN {} to the server", flush.ToString());
  }
  pipeline_->Confirmed(flush);
  ArmBoundaryTimer();
  confirmed_lsn_ = flush.value();
}

void Relay::ConfirmWhenCaughtUp() {
  // With nothing in flight the confirmable position is final until new rows arrive: tell the
  // server now rather than at the next periodic update (10 s by default), so the slot, and
  // monitoring of it, is current whenever the relay has caught up. A short delay folds a
  // run of small transactions into one status update.
  if (caught_up_armed_ || pipeline_->inflight_records() != 0 || !conn_ ||
      pipeline_->FlushPosition() == pipeline_->last_confirmed()) {
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

void Relay::ArmBoundaryTimer() {
  // Only while streaming: between streams the guarantee belongs to EndStream and to the connect
  // attempt's worker (FinishLastStream), and nothing is to be committed on the loop.
  if (boundary_timer_armed_ || finished_ || state_ != RelayState::kStreaming) return;
  const auto deadline = pipeline_->TickDeadline();
  if (!deadline) return;
  boundary_timer_armed_ = true;
  // Not sooner than a few milliseconds: a due transaction may have to wait for the end of its
  // source transaction or for held records, and the timer must not spin meanwhile.
  boundary_timer_.expires_at(
      std::max(*deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(5)));
  boundary_timer_.async_wait([this](const boost::system::error_code& ec) {
    boundary_timer_armed_ = false;
    if (ec || finished_ || stopping_ || state_ != RelayState::kStreaming) return;
    if (Status ticked = pipeline_->Tick(); !ticked.ok()) return OnStreamError(ticked);
    ConfirmWhenCaughtUp();
    ArmBoundaryTimer();
    SchedulePump();  // a commit the stream was held for has started
  });
}

// --- Operating: pause, resume, restart, observers -----------------------------------------

void Relay::Pause() {
  if (paused_ || stopping_) return;
  paused_ = true;
  spdlog::info("paused: not reading slot '{}' nor producing; {} records still in flight, the "
               "replication connection is kept alive",
               settings_.slot_name, pipeline_->inflight_records());
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
  backoff_.Succeeded();
  ScheduleConnect(std::chrono::milliseconds(0));
  return true;
}

SlotHealthSample Relay::slot_health() const {
  return slot_health_ ? slot_health_->Latest() : SlotHealthSample{};
}

// --- Stopping ------------------------------------------------------------------------------

void Relay::RequestStop() {
  boost::asio::post(io_, [this] {
    if (!stopping_)
      spdlog::info("stop requested; waiting for Kafka to acknowledge in-flight records");
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

void Relay::Fail(Status status) {
  RecordFailure(std::move(status));
  BeginShutdown();
}

void Relay::RecordFailure(Status status) {
  if (!final_status_.ok()) return;  // the first failure is the cause; later ones follow from it
  spdlog::error("{}", status.ToString());
  final_status_ = std::move(status);
}

void Relay::OnProducerFailure(const Status& failure) {
  if (failure.code() == ErrorCode::kKafkaFenced && settings_.exactly_once.enabled()) {
    // Another process of this connector took the slot and initialised the transactional ids:
    // the guarantee drops what was open and renews the producers before the next stream
    // (delivery/exactly_once.h), and this relay waits as a standby while the other streams.
    return boost::asio::post(
        io_, [this, failure] { OnPipelineFailure(Status::Connection(failure.message())); });
  }
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
  if (!pipeline_->started()) return "";
  return "; slot '" + settings_.slot_name + "' stays confirmed at LSN " +
         pipeline_->Confirmable().ToString() + ", only what Kafka acknowledged";
}

void Relay::BeginShutdown() {
  if (stopping_ || finished_) return;
  // Before stopping_: delivery reports served while a commit flushes must not finish the stop
  // from inside it. While a connect attempt runs nothing was streamed since TryConnect's
  // EndStream, and the attempt's hooks own the guarantee until it ends.
  if (!connector_.busy()) {
    if (Status ended = pipeline_->EndStream();
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
  if (pipeline_->inflight_records() == 0) return FinishShutdown();
  shutdown_timer_.expires_after(std::chrono::milliseconds(settings_.shutdown_timeout_ms));
  shutdown_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    spdlog::warn("{} records still unacknowledged after shutdown.timeout.ms={}; exiting without "
                 "confirming them (they are sent again on restart)",
                 pipeline_->inflight_records(), settings_.shutdown_timeout_ms);
    FinishShutdown();
  });
}

void Relay::DropSlotOnStop() {
  // The slot is the only copy of the rows whose records Kafka has not acknowledged: dropping it
  // would lose them, where keeping it sends them again on the next start.
  if (pipeline_->inflight_records() > 0) {
    spdlog::warn("slot.drop.on.stop: keeping replication slot '{}': {} records are still "
                 "unacknowledged by Kafka after shutdown.timeout.ms={}; it stays confirmed at LSN "
                 "{} so they are sent again on the next start (drop it by hand if they are not "
                 "needed)",
                 settings_.slot_name, pipeline_->inflight_records(), settings_.shutdown_timeout_ms,
                 pipeline_->Confirmable().ToString());
    return;
  }
  if (Status st = conn_->DropSlot(settings_.slot_name); !st.ok()) {
    spdlog::warn("slot.drop.on.stop: {}", st.message());
  } else {
    spdlog::info("dropped replication slot '{}' (slot.drop.on.stop=true)", settings_.slot_name);
    // Dropped on purpose: the next start is a first start, not a slot gone missing.
    pipeline_->ForgetPosition();
  }
}

void Relay::FinishShutdown() {
  if (finished_) return;
  // The connect attempt cancelled by BeginShutdown may still be inside a hook that uses the
  // guarantee and the producers: they are stopped once it has ended (its resumable Kafka waits
  // give up within Cancellation::kSlice). The loop goes on serving meanwhile.
  if (connector_.busy()) {
    if (attempt_end_armed_) return;
    attempt_end_armed_ = true;
    attempt_end_timer_.expires_after(kAttemptEndCheck);
    attempt_end_timer_.async_wait([this](const boost::system::error_code& ec) {
      attempt_end_armed_ = false;
      if (!ec) FinishShutdown();
    });
    return;
  }
  finished_ = true;
  // Before the slot may be dropped (ForgetPosition commits through the same producers).
  if (Status done = pipeline_->guarantee().FinishBeforeExit(); !done.ok())
    spdlog::warn("stopping: {}", done.message());
  if (conn_) {
    SendStatus();
    if (conn_) {
      if (Status st = conn_->EndStreaming(); !st.ok()) spdlog::warn("{}", st.message());
      if (final_status_.ok() && settings_.slot_drop_on_stop) DropSlotOnStop();
    }
  }
  if (pipeline_->started()) {
    spdlog::info("stopped; slot '{}' confirmed up to LSN {}", settings_.slot_name,
                 pipeline_->Confirmable().ToString());
  } else {
    spdlog::info("stopped before streaming slot '{}'", settings_.slot_name);
  }
  pipeline_->Stopping();
  output_->PurgeAll();
  for (auto* timer : {&status_timer_, &shutdown_timer_, &connect_timer_, &caught_up_timer_,
                      &boundary_timer_, &gather_timer_, &attempt_end_timer_}) {
    timer->cancel();
  }
  receive_watch_.Stop();
  progress_log_.Stop();
  output_->Stop();
  CloseConnection();
  state_ = RelayState::kStopped;
  io_.stop();
}

}  // namespace walrelay
