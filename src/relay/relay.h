// Relay: streams a logical replication slot through the transform chain into Kafka and
// confirms to PostgreSQL only what Kafka has acknowledged. It reads the slot through the
// decoder seam (decode/decoder.h) and does not know which plugin (plugin.name) it reads; the
// decoder's catalog lookups come from relay/source_catalog.h.
//
// Everything runs on one Asio io_context thread: reading CopyData from libpq's socket,
// decoding, transforms, producing, serving librdkafka's delivery reports (through its queue
// event fd) and the standby status timer. The flush LSN sent to the server is the delivery
// tracker's confirmable position, so a crash at any moment can repeat records but never lose
// one. In-flight records are bounded (max.queue.size, max.queue.size.in.bytes): when full the
// relay stops reading the socket, which applies TCP backpressure to the walsender, while the
// status timer keeps the connection alive. Nothing on the loop waits for Kafka: a record that
// librdkafka's own queue refuses (QUEUE_FULL) is held, unconfirmed, the stream pauses the same
// way, and the record goes out when a delivery report has made room.
//
// Connecting runs off the loop (relay/source_connector.h), so the REST API and delivery
// reports are served meanwhile.
//
// Faults: a lost or refused connection to PostgreSQL is retried with exponential backoff and
// jitter while Kafka deliveries go on; so is a connection on which nothing arrives for
// database.replication.receive.timeout.ms. A slot held by another process makes this relay a
// standby that retries until the slot is free. Once streamed, a slot that disappeared stops
// the relay (kSlotGone) unless slot.recreate.when.missing; on every reconnect the server's
// identity and the slot's position are compared with the relay's, and the ledger is re-based
// on the slot's position when they differ: no flush learnt elsewhere, or below the slot's
// position, is ever sent. A record that cannot be transformed or
// produced follows the error policy (stop without confirming it, dead-letter topic, or skip).
//
// Operating it (the REST API): Pause() stops reading the stream and producing while the status
// timer keeps the replication connection alive; Resume() picks up where it stopped. Restart()
// drops the replication connection and reconnects at once, as after a lost connection; records
// in flight stay tracked. The observers and counters below feed /metrics and /healthz.
//
// What counts as delivered is the guarantee's (relay/delivery_guarantee.h): at least once by
// default, exactly once (Kafka transactions, relay/exactly_once.h) with exactly.once.support.
// The relay calls it at each source transaction's begin and commit, before each record, when
// a stream ends and on its boundary timer; the flush LSN is the ledger's confirmable position
// as the guarantee caps it.
//
// Status updates go every status.update.interval.ms, and also as soon as the relay has caught
// up (nothing in flight) after the confirmable position moved.
//
// Every log.progress.interval.ms (default one minute) an info line sums up progress: records
// read and acknowledged per second, lag, confirmed LSN, records in flight and the state.
//
// RequestStop() may be called from any thread (it posts to the loop); Run() returns after a
// graceful stop or the first fatal error. Everything else public must be called on the loop
// thread (the REST API's handlers run there).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it
#include <boost/asio.hpp>

#include "common/log_limiter.h"
#include "common/lsn.h"
#include "common/status.h"
#include "config/relay_settings.h"
#include "convert/converters.h"
#include "decode/decoder.h"
#include "kafka/dead_letter.h"
#include "kafka/delivery_tracker.h"
#include "kafka/producer.h"
#include "pg/replication_connection.h"
#include "pg/slot_health.h"
#include "pg/source_catalog.h"
#include "relay/delivery_guarantee.h"
#include "relay/receive_watch.h"
#include "relay/source_connector.h"
#include "status/metrics.h"
#include "transform/chain.h"
#include "transform/change_event_source.h"
#include "transform/message_event.h"

namespace walrelay {

enum class RelayState { kConnecting, kStandby, kStreaming, kStopping, kStopped };
const char* RelayStateName(RelayState state);

class Relay {
 public:
  Relay(RelaySettings settings, boost::asio::io_context& io);
  ~Relay();

  // Builds the chain and producer, connects (retrying as configured) and runs the loop until
  // stopped. Returns OK after a graceful stop, or the error that stopped the relay.
  Status Run();
  // Graceful stop: stop reading, wait (bounded) for in-flight acks, send a final status.
  void RequestStop();

  // Observers, safe from any thread.
  Lsn confirmed_lsn() const { return Lsn(confirmed_lsn_.load()); }
  bool streaming() const { return state_.load() == RelayState::kStreaming; }
  RelayState state() const { return state_.load(); }

  // Loop thread only.
  void Pause();
  void Resume();
  // False (and nothing happens) once the relay is stopping.
  bool Restart();
  bool paused() const { return paused_; }
  // True while a replication connection is open (streaming, or paused while streaming).
  bool connected() const { return conn_.has_value() && state_ == RelayState::kStreaming; }
  bool producer_ready() const { return producer_ != nullptr; }
  // The error that stopped the relay; OK while it runs or after a graceful stop.
  const Status& failure() const { return final_status_; }
  // Why the last connection attempt failed or the connection was lost; "" once streaming.
  const std::string& connection_error() const { return connection_error_; }
  const RelaySettings& settings() const { return settings_; }
  const RelayCounters& counters() const { return counters_; }
  Lsn received_lsn() const { return received_lsn_; }
  size_t inflight_records() const { return tracker_.inflight_records(); }
  size_t inflight_bytes() const { return tracker_.inflight_bytes(); }
  // Entries of the ack ledger and their memory, for /metrics.
  size_t ack_ledger_entries() const { return tracker_.entries(); }
  size_t ack_ledger_bytes() const { return tracker_.memory_bytes(); }
  // Records waiting for room in librdkafka's queue.
  size_t held_records() const { return held_.size(); }
  // Messages librdkafka holds (queued, in flight, or reports not yet served).
  int kafka_queue_length() const;
  // Now minus the commit time of the newest acknowledged record; 0 when idle and caught up.
  double ReplicationLagSeconds() const;
  // The slot as pg_replication_slots last showed it (read_ok false: not read yet, or off).
  SlotHealthSample slot_health() const;
  uint64_t slot_stalls() const { return slot_health_ ? slot_health_->stalls() : 0; }

 private:
  void TryConnect();
  void OnConnectAttempt(Result<SourceSession> attempt);
  void ConnectFailed(const Status& cause);
  // Sets up the ledger for a new stream: first stream, same slot, or a slot on another server,
  // timeline or position (then the ledger is re-based on the slot's position).
  void AdoptSlotPosition(const SourceSession& session);
  void ScheduleConnect(std::chrono::milliseconds delay);
  std::chrono::milliseconds NextBackoff();
  void ConnectionLost(const Status& cause);
  void OnStreamError(Status status);

  void Pump();
  void WaitForSocket();
  void WaitForKafkaEvents();
  void ArmStatusTimer();
  void ArmPollTimer();
  void ArmProgressTimer();
  void LogProgress();
  Status HandleMessage(std::string_view message);
  Status HandleDecoded(const DecodedMessage& decoded);
  Status HandleChange(const RowChange& change);
  // A pg_logical_emit_message() record: relayed when transactional and its prefix is
  // included (transform/message_event.h), refused with a warning when not transactional.
  Status HandleLogicalMessage(const LogicalMessage& message);
  // Runs `record` from `origin` (a table, or a message's origin label) through the chain and
  // produces what comes out; `original` rebuilds the untransformed record for the error
  // policy when the chain fails.
  Status RelayRecord(Record record, const std::string& origin,
                     const std::function<Record()>& original);
  // A change event's Connect shapes (its value and primary-key key), for the converters.
  void SetChangeEventShapes(Record& record) const;
  Status Produce(Record& record, const std::string& table);
  // Hands a record, registered in the ledger as `ticket`, to the producer; a record that does
  // not fit librdkafka's queue is held (OK is returned) and sent again by Pump.
  Status Send(Record& record, const std::string& table, uint64_t ticket);
  Status SendDeadLetter(Record& dead, const std::string& table, uint64_t ticket);
  struct HeldRecord {
    Record record;
    std::string table;
    uint64_t ticket;
    bool dead_letter;
  };
  // Keeps the record until librdkafka's queue has room; an error if the record can never fit.
  Status Hold(HeldRecord held);
  // Sends the held records, oldest first; false while librdkafka's queue is still full (or the
  // relay failed).
  bool SendHeld();
  // Applies errors.tolerance to a record that failed on its own (IsRecordSpecificError, or a
  // transform error); OK if it was dead-lettered or skipped.
  Status ApplyErrorPolicy(const Record& record, const FailureContext& failure, Status error,
                          std::optional<uint64_t> ticket);
  // The record is never confirmed; returns `error` for the relay to stop with.
  Status StopAt(std::optional<uint64_t> ticket, Status error);
  void OnDelivery(const DeliveryReport& report);
  void OnAcknowledged(uint64_t ticket);
  bool IsShutdownPurge(rd_kafka_resp_err_t error) const;
  // Kafka refused a record: the error policy for a failure of that record alone, a stop
  // without confirming it for anything wider.
  void OnRefused(const DeliveryReport& report);
  Status StaysConfirmedBefore(Lsn row_lsn, const std::string& what) const;
  // The producer as a whole was refused (login, TLS, fatal error): stop at once.
  void OnProducerFailure(const Status& failure);
  // Warns when the oldest record in flight has waited a whole progress interval.
  void WarnIfStalled();
  // What may be confirmed to the slot: the ledger's position as the guarantee caps it.
  Lsn Confirmable() const;
  // Passes a guarantee call's outcome on, after forgetting the records of a Kafka transaction
  // it aborted (DropAborted).
  Status AfterGuarantee(Status outcome);
  // The records of an aborted Kafka transaction never become visible: they leave the ledger,
  // which is rebased on what is confirmable, and the stream replays their source transactions.
  void DropAborted();
  // Commits an idle Kafka transaction when its boundary interval has passed.
  void ArmBoundaryTimer();
  void SendStatus(bool reply_requested = false);
  void ConfirmWhenCaughtUp();
  bool Backpressured() const;
  void Fail(Status status);
  void StartSlotHealthWatch();
  // Keeps the first failure as the relay's; logs it.
  void RecordFailure(Status status);
  std::string SlotStaysConfirmed() const;
  void BeginShutdown();
  void FinishShutdown();
  // slot.drop.on.stop, unless records are still unacknowledged.
  void DropSlotOnStop();
  void CloseConnection();
  void SchedulePump();

  RelaySettings settings_;
  boost::asio::io_context& io_;
  std::optional<ReplicationConnection> conn_;
  SourceCatalog catalog_{settings_};
  // For plugin.name; null (and decoder_status_ says why) only for a plugin MakeDecoder refused.
  Status decoder_status_;
  std::unique_ptr<Decoder> decoder_;
  SourceConnector connector_;
  // Which server and timeline the relay streamed from last; nullopt before the first stream.
  std::optional<SourceIdentity> source_identity_;
  // The slot's position at the last connect: no flush below it is ever sent.
  Lsn slot_floor_;
  // The walsender of the connection Restart() closed, which may hold the slot a moment longer.
  std::optional<int> restart_walsender_pid_;
  std::unique_ptr<KafkaProducer> producer_;
  std::unique_ptr<DeliveryGuarantee> guarantee_;  // set with producer_
  std::optional<TransformChain> chain_;
  std::optional<Converters> converters_;  // after the chain, before Produce
  SourceContext source_context_;
  DeliveryTracker tracker_;
  // Records librdkafka refused with QUEUE_FULL, in stream order; while any is held the relay
  // reads nothing more (Backpressured()).
  std::deque<HeldRecord> held_;
  bool tracker_initialised_ = false;

  boost::asio::posix::stream_descriptor pg_socket_;
  boost::asio::posix::stream_descriptor kafka_events_;
  boost::asio::steady_timer status_timer_;
  boost::asio::steady_timer poll_timer_;
  boost::asio::steady_timer shutdown_timer_;
  boost::asio::steady_timer connect_timer_;
  ReceiveWatch receive_watch_;
  boost::asio::steady_timer progress_timer_;
  boost::asio::steady_timer caught_up_timer_;
  boost::asio::steady_timer boundary_timer_;
  bool boundary_timer_armed_ = false;
  bool caught_up_armed_ = false;
  static constexpr int kCaughtUpStatusDelayMs = 2;

  int consecutive_failures_ = 0;
  std::minstd_rand jitter_{std::random_device{}()};
  Lsn received_lsn_;
  Lsn last_sent_flush_;
  bool socket_wait_armed_ = false;
  bool pump_scheduled_ = false;
  bool stopping_ = false;
  bool finished_ = false;
  Status final_status_;
  bool paused_ = false;
  bool ever_streamed_ = false;
  std::string connection_error_;
  RelayCounters counters_;
  // A topic's name and acknowledged count: an element of counters_.acked (std::map: its
  // elements never move).
  using TopicAcks = std::pair<const std::string, uint64_t>;
  // Per record in flight: its topic and commit time, for /metrics, the lag gauge and the
  // stall warning.
  struct InflightInfo {
    TopicAcks* topic;
    int64_t commit_time_ms;
  };
  // What HandleChange needs to know about a source table, looked up once per table rather
  // than per row (the include list is a set of regexes).
  struct SourceTable {
    std::string qualified;  // "schema.table"
    bool included = false;
    uint64_t* read_counter = nullptr;  // in counters_.source_records, when included
  };
  const SourceTable& LookupTable(std::string_view schema, std::string_view table);
  std::vector<SourceTable> tables_;
  // One refusal line per prefix and minute: a writer can emit thousands a second.
  LogLimiter non_transactional_warnings_{std::chrono::minutes(1)};
  TxnBegin current_txn_;  // the transaction being streamed: its messages carry its xid and time
  size_t last_table_ = 0;
  std::unordered_map<uint64_t, InflightInfo> inflight_info_;
  TopicAcks* last_topic_ = nullptr;  // the previous record's
  int64_t last_acked_commit_ms_ = 0;
  // What the previous progress line reported, for its rates.
  uint64_t progress_last_read_ = 0;
  uint64_t progress_last_acked_ = 0;
  std::chrono::steady_clock::time_point progress_last_time_;
  // The oldest record in flight at the previous progress line, and since when it was seen.
  std::optional<uint64_t> stall_ticket_;
  std::chrono::steady_clock::time_point stall_since_;
  std::atomic<uint64_t> confirmed_lsn_{0};
  std::atomic<RelayState> state_{RelayState::kConnecting};
  // Declared last so it stops (and joins its thread) before anything it reports on goes.
  std::unique_ptr<SlotHealthWatch> slot_health_;
};

}  // namespace walrelay
