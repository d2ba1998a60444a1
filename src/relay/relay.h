// Relay: streams a logical replication slot into Kafka and confirms to PostgreSQL only what
// Kafka has acknowledged.
//
// The relay is the loop around the record pipeline (delivery/record_pipeline.h), which turns
// decoded messages into Kafka records and decides which LSN may be confirmed. The relay
// connects (off the loop: relay/source_connector.h), reads the replication socket, decodes
// through the decoder seam (decode/decoder.h: pgoutput or wal2json), hands each decoded
// message to the pipeline, serves the producer's delivery reports, sends standby status
// updates with the pipeline's flush position, and stops.
//
// Everything runs on one Asio io_context thread: reading CopyData from libpq's socket,
// decoding, the pipeline, librdkafka's delivery reports (through its queue event fd) and the
// timers. A crash at any moment can repeat records but never lose one. When the pipeline is
// backpressured (records in flight at max.queue.size, or held for room in librdkafka's queue)
// the relay stops reading the socket, which applies TCP backpressure to the walsender, while
// the status timer keeps the connection alive. Nothing on the loop waits for a connect
// attempt: Restart() and a stop cancel the running one and go on at once; the next attempt, or
// the end of the stop, follows once the cancelled one has left the guarantee (polled every
// kAttemptEndCheck; relay/source_connector.h). Nor for a Kafka transaction's commit: a due
// commit holds the stream (the pipeline reads as backpressured) and the boundary timer's Tick
// starts it once Kafka is ready; nor for an abort, which the next connect attempt's worker
// completes. With exactly once the loop still waits for a due commit at the end of a stream
// (delivery/exactly_once.h).
//
// Faults: a lost or refused connection to PostgreSQL is retried with exponential backoff and
// jitter while Kafka deliveries go on; so is a connection on which nothing arrives for
// database.replication.receive.timeout.ms (relay/receive_watch.h). A slot held by another
// process makes this relay a standby that retries until the slot is free. A slot that
// disappeared after it was streamed from stops the relay (kSlotGone) unless
// slot.recreate.when.missing. A pipeline error of kind kConnection (an aborted Kafka
// transaction) is replayed by reconnecting; any other error stops the relay without
// confirming more.
//
// Operating it (the REST API): Pause() stops reading the stream while the status timer keeps
// the replication connection alive; Resume() picks up where it stopped. Restart() drops the
// replication connection and reconnects at once, as after a lost connection; records in
// flight stay tracked.
//
// Status updates go every status.update.interval.ms, and also as soon as the relay has caught
// up (nothing in flight) after the confirmable position moved. A progress line goes every
// log.progress.interval.ms (relay/progress_log.h).
//
// RequestStop() may be called from any thread (it posts to the loop); Run() returns after a
// graceful stop or the first fatal error. Everything else public must be called on the loop
// thread (the REST API's handlers run there), except the observers marked thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it

#include <boost/asio.hpp>

#include "common/lsn.h"
#include "common/status.h"
#include "common/thread_owner.h"
#include "config/relay_settings.h"
#include "decode/decoder.h"
#include "delivery/kafka_output.h"
#include "delivery/record_pipeline.h"
#include "pg/replication_connection.h"
#include "pg/slot_health.h"
#include "pg/source_catalog.h"
#include "relay/backoff.h"
#include "relay/progress_log.h"
#include "relay/receive_watch.h"
#include "relay/running_relay.h"
#include "relay/source_connector.h"
#include "status/metrics.h"

namespace walrelay {

class Relay final : public RunningRelay {
 public:
  // Builds the decoder, the producer, the delivery guarantee and the record pipeline; an error
  // names the configuration key that is wrong.
  static Result<std::unique_ptr<Relay>> Create(RelaySettings settings, boost::asio::io_context& io);
  ~Relay() override;
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Connects (retrying as configured) and runs the loop until stopped. Returns OK after a
  // graceful stop, or the error that stopped the relay.
  Status Run() override;
  // Graceful stop: stop reading, wait (bounded) for in-flight acks, send a final status.
  void RequestStop() override;

  // Observers, safe from any thread.
  Lsn confirmed_lsn() const override { return Lsn(confirmed_lsn_.load()); }
  bool streaming() const { return state_.load() == RelayState::kStreaming; }
  std::string StaysConfirmed() const override {
    return "slot '" + settings_.slot_name + "' stays confirmed at LSN " +
           confirmed_lsn().ToString();
  }
  RelayState state() const override { return state_.load(); }

  // Loop thread only.
  void Pause() override;
  void Resume() override;
  // False (and nothing happens) once the relay is stopping.
  bool Restart() override;
  bool paused() const override { return paused_; }
  // True while a replication connection is open (streaming, or paused while streaming).
  bool connected() const override { return conn_.has_value() && state_ == RelayState::kStreaming; }
  bool producer_ready() const override { return output_ != nullptr; }
  // The error that stopped the relay; OK while it runs or after a graceful stop.
  const Status& failure() const override { return final_status_; }
  // Why the last connection attempt failed or the connection was lost; "" once streaming.
  const std::string& connection_error() const override { return connection_error_; }
  const RelaySettings& settings() const override { return settings_; }
  const RelayCounters& counters() const override { return counters_; }
  const RecordPipeline& pipeline() const override { return *pipeline_; }
  const KafkaOutput& output() const override { return *output_; }
  Lsn received_lsn() const override { return received_lsn_; }
  // The slot as pg_replication_slots last showed it (read_ok false: not read yet, or off).
  SlotHealthSample slot_health() const override;
  uint64_t slot_stalls() const override { return slot_health_ ? slot_health_->stalls() : 0; }

 private:
  Relay(RelaySettings settings, boost::asio::io_context& io);
  // The decoder, producer, guarantee and pipeline, in that order (Create).
  Status Build();

  // Connecting, reconnecting, standby.
  void TryConnect();
  void OnConnectAttempt(Result<SourceSession> attempt);
  void ConnectFailed(const Status& cause);
  void ScheduleConnect(std::chrono::milliseconds delay);
  void ConnectionLost(const Status& cause);
  void OnStreamError(Status status);
  // A delivery report stopped the stream (RecordPipeline::FailureHandler).
  void OnPipelineFailure(Status status);
  void CloseConnection();

  // Streaming.
  void Pump();
  void SchedulePump();
  void WaitForSocket();
  // After a turn that ended on an empty socket: wait for the socket, or a moment (kGatherDelay)
  // when the turn handled only a few messages (kGatherBelow) of few bytes (kGatherBelowBytes).
  void GatherOrWait(int handled, size_t bytes);
  Status HandleMessage(std::string_view message);
  void OnDelivery(const DeliveryReport& report);

  // Confirming.
  void ArmStatusTimer();
  void SendStatus(bool reply_requested = false);
  void ConfirmWhenCaughtUp();
  // Commits an idle Kafka transaction when its boundary interval has passed.
  void ArmBoundaryTimer();

  // Stopping.
  void StartSlotHealthWatch();
  void Fail(Status status);
  // Keeps the first failure as the relay's; logs it.
  void RecordFailure(Status status);
  // The producer as a whole was refused (login, TLS, fatal error): stop at once.
  void OnProducerFailure(const Status& failure);
  std::string SlotStaysConfirmed() const;
  void BeginShutdown();
  void FinishShutdown();
  // slot.drop.on.stop, unless records are still unacknowledged.
  void DropSlotOnStop();

  RelaySettings settings_;
  boost::asio::io_context& io_;
  SourceCatalog catalog_{settings_};
  std::unique_ptr<Decoder> decoder_;
  RelayCounters counters_;
  std::unique_ptr<KafkaOutput> output_;
  std::unique_ptr<RecordPipeline> pipeline_;
  SourceConnector connector_;
  std::optional<ReplicationConnection> conn_;
  // The walsender of the connection Restart() closed, which may hold the slot a moment longer.
  std::optional<int> restart_walsender_pid_;

  boost::asio::posix::stream_descriptor pg_socket_;
  boost::asio::steady_timer status_timer_;
  boost::asio::steady_timer shutdown_timer_;
  boost::asio::steady_timer connect_timer_;
  ReceiveWatch receive_watch_;
  boost::asio::steady_timer caught_up_timer_;
  boost::asio::steady_timer boundary_timer_;
  boost::asio::steady_timer gather_timer_;
  // How often the loop looks whether a cancelled connect attempt has ended (TryConnect and
  // FinishShutdown wait for it on this timer, never by joining the worker).
  static constexpr std::chrono::milliseconds kAttemptEndCheck{10};
  boost::asio::steady_timer attempt_end_timer_;
  bool attempt_end_armed_ = false;
  static constexpr int kGatherBelow = 32;
  // A turn reads what one read from the socket brought (libpq reads at most its free buffer
  // space, 8-16 kB at first): a turn of that size means the walsender is ahead, not behind,
  // whatever the number of messages. Gathering after it would cap the relay at one buffer
  // per kGatherDelay (wal2json's larger rows: about 30 per millisecond).
  static constexpr size_t kGatherBelowBytes = 4096;
  static constexpr std::chrono::milliseconds kGatherDelay{1};
  bool boundary_timer_armed_ = false;
  bool caught_up_armed_ = false;
  static constexpr int kCaughtUpStatusDelayMs = 2;

  Backoff backoff_;
  ProgressLog progress_log_;
  Lsn received_lsn_;
  bool socket_wait_armed_ = false;
  bool pump_scheduled_ = false;
  bool stopping_ = false;
  bool finished_ = false;
  Status final_status_;
  bool paused_ = false;
  bool ever_streamed_ = false;
  std::string connection_error_;
  std::atomic<uint64_t> confirmed_lsn_{0};
  std::atomic<RelayState> state_{RelayState::kConnecting};
  // Run()'s thread; the handlers that are loop thread only check it (debug builds).
  ThreadOwner loop_thread_;
  // Declared last so it stops (and joins its thread) before anything it reports on goes.
  std::unique_ptr<SlotHealthWatch> slot_health_;
};

}  // namespace walrelay
