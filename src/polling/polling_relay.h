// PollingRelay: source.mode=polling. Relays the outbox table by reading it with ordinary
// queries, for databases where logical replication is not available (docs/polling.md).
//
// The loop:
//   1. take the lease (polling/outbox_table.h): one relay polls a table at a time; the others
//      are standbys that ask again every polling.lease.retry.ms;
//   2. read the oldest unpublished rows (polling.order.column's order): polling.batch.size of
//      them at most, and no more bytes than max.queue.size.in.bytes leaves beside the records
//      in flight, so memory stays bounded however large the rows are;
//   3. hand them to the same record pipeline as the replication path (via polling/polled_rows.h,
//      so the records are byte for byte the same), which produces them to Kafka;
//   4. once the pipeline's ledger says every record of the batch is acknowledged (or
//      dead-lettered / skipped by errors.tolerance), mark the rows published (delete them, or
//      set polling.mark's column) and confirm the batch to the ledger;
//   5. read the next batch at once when this one was full (up to kBatchesInFlight batches are in
//      flight; a read leaves out the rows of those), else after polling.interval.ms.
// A row is never marked before Kafka acknowledged its record, so a crash at any instant
// repeats rows (they are read again) and never loses one. A record the error policy stops on
// stops the relay with its rows unmarked. A lost connection drops the lease: the batch in
// flight is not marked (its rows are read again, by this relay or a standby).
//
// Everything runs on one Asio io_context thread, Run()'s (debug builds abort when a connect,
// poll, delivery report or mark is handled on another); the table's statements block it
// briefly (bounded by database.query.timeout.ms). Exactly once is
// refused at configuration (config/relay_settings.h).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // Boost 1.74's Asio uses std::exchange without including it
#include <vector>

#include <boost/asio.hpp>

#include "common/thread_owner.h"
#include "delivery/kafka_output.h"
#include "delivery/record_pipeline.h"
#include "pg/source_catalog.h"
#include "polling/outbox_table.h"
#include "polling/polled_rows.h"
#include "polling/unread_inserts.h"
#include "relay/backoff.h"
#include "relay/progress_log.h"
#include "relay/running_relay.h"

namespace walrelay {

class PollingRelay final : public RunningRelay {
 public:
  // Builds the producer and the record pipeline; errors name the configuration key.
  static Result<std::unique_ptr<PollingRelay>> Create(RelaySettings settings,
                                                      boost::asio::io_context& io);
  ~PollingRelay() override;
  PollingRelay(const PollingRelay&) = delete;
  PollingRelay& operator=(const PollingRelay&) = delete;

  Status Run() override;
  void RequestStop() override;

  Lsn confirmed_lsn() const override { return Lsn(confirmed_position_.load()); }
  RelayState state() const override { return state_.load(); }
  std::string StaysConfirmed() const override;

  void Pause() override;
  void Resume() override;
  bool Restart() override;
  bool paused() const override { return paused_; }
  bool connected() const override { return table_ != nullptr && state_ == RelayState::kStreaming; }
  bool producer_ready() const override { return output_ != nullptr; }
  const Status& failure() const override { return final_status_; }
  const std::string& connection_error() const override { return connection_error_; }
  const RelaySettings& settings() const override { return settings_; }
  const RelayCounters& counters() const override { return counters_; }
  const RecordPipeline& pipeline() const override { return *pipeline_; }
  const KafkaOutput& output() const override { return *output_; }
  Lsn received_lsn() const override { return received_position_; }
  SlotHealthSample slot_health() const override { return {}; }
  uint64_t slot_stalls() const override { return 0; }

 private:
  PollingRelay(RelaySettings settings, boost::asio::io_context& io);
  Status Build();

  // Connecting and the lease.
  void Connect();
  void ScheduleConnect(std::chrono::milliseconds delay);
  void ConnectionLost(const Status& cause);

  // Polling.
  void Poll();
  void SchedulePoll(std::chrono::milliseconds delay);
  // Poll() as soon as the loop is free, once however often asked before it runs.
  void PollSoon();
  // After an empty read, when a window of polling.unread.check.ms ended: warns when rows were
  // inserted and removed before any poll read them (polling/unread_inserts.h).
  void CheckUnreadInserts();
  void OnDelivery(const DeliveryReport& report);
  // Marks the oldest batches in flight once all of each is acknowledged.
  void MarkWhenAcknowledged();
  // Applies the marks of unmarked_, when connected.
  void MarkAcknowledged();
  // A mark that failed: stops the relay when retrying cannot fix it or errors.max.retries is
  // spent, reconnects when the connection went, else sends the mark again after a backoff.
  void MarkFailed(const Status& cause);
  void OnPipelineFailure(Status status);

  // Stopping.
  void Fail(Status status);
  void RecordFailure(Status status);
  void OnProducerFailure(const Status& failure);
  void BeginShutdown();
  void FinishShutdown();

  // Rows read and not yet marked: up to kBatchesInFlight batches, oldest first. Waiting for
  // each batch's acknowledgements before reading the next left the relay idle most of the
  // time (bench/results/polling.md); a bound keeps the reads' exclusion list short.
  struct Batch {
    Lsn end;                    // confirmable once all its records are acknowledged
    std::vector<RowMark> rows;  // its rows, as a mark finds them
  };
  static constexpr size_t kBatchesInFlight = 4;

  RelaySettings settings_;
  boost::asio::io_context& io_;
  SourceCatalog catalog_{settings_};
  RelayCounters counters_;
  std::unique_ptr<KafkaOutput> output_;
  std::unique_ptr<RecordPipeline> pipeline_;
  std::unique_ptr<PolledRows> rows_;
  std::unique_ptr<OutboxTable> table_;
  std::deque<Batch> batches_;
  // Rows whose records Kafka acknowledged and whose mark has not been applied yet (it failed,
  // or the connection was down): marked again, never read again while this relay runs.
  std::vector<RowMark> unmarked_;
  Lsn unmarked_end_;               // the end of the latest batch in unmarked_
  bool last_read_full_ = false;    // the read stopped at its row or byte bound: more may wait
  bool waiting_for_room_ = false;  // a poll found kBatchesInFlight batches or backpressure
  bool poll_posted_ = false;
  UnreadInsertsWatch unread_inserts_{std::chrono::milliseconds(settings_.polling.unread_check_ms)};

  boost::asio::steady_timer poll_timer_;
  boost::asio::steady_timer connect_timer_;
  boost::asio::steady_timer shutdown_timer_;
  boost::asio::steady_timer mark_timer_;
  Backoff backoff_;
  Backoff mark_backoff_;  // failed marks since the last one applied
  ProgressLog progress_log_{io_, *this};
  bool standby_logged_ = false;
  bool announced_ = false;  // the first start's log line, with the settings
  bool paused_ = false;
  bool stopping_ = false;
  bool finished_ = false;
  Status final_status_;
  std::string connection_error_;
  Lsn received_position_;
  ThreadOwner loop_thread_;  // Run()'s
  std::atomic<uint64_t> confirmed_position_{0};
  std::atomic<RelayState> state_{RelayState::kConnecting};
};

}  // namespace walrelay
