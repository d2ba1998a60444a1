#include "polling/polling_relay.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "delivery/acknowledged_only.h"

namespace walrelay {

Result<std::unique_ptr<PollingRelay>> PollingRelay::Create(RelaySettings settings,
                                                           boost::asio::io_context& io) {
  std::unique_ptr<PollingRelay> relay(new PollingRelay(std::move(settings), io));
  WALRELAY_RETURN_IF_ERROR(relay->Build());
  return relay;
}

PollingRelay::PollingRelay(RelaySettings settings, boost::asio::io_context& io)
    : settings_(std::move(settings)),
      io_(io),
      poll_timer_(io),
      connect_timer_(io),
      shutdown_timer_(io),
      mark_timer_(io),
      backoff_(settings_.reconnect_backoff_initial_ms, settings_.reconnect_backoff_max_ms),
      mark_backoff_(settings_.reconnect_backoff_initial_ms, settings_.reconnect_backoff_max_ms) {}

PollingRelay::~PollingRelay() = default;

Status PollingRelay::Build() {
  auto output = KafkaOutput::Create(
      io_, settings_, [this](const DeliveryReport& report) { OnDelivery(report); },
      [this](const Status& failure) { OnProducerFailure(failure); });
  if (!output.ok()) return output.status();
  output_ = std::move(output).value();
  auto pipeline =
      RecordPipeline::Create(settings_, *output_, std::make_unique<AcknowledgedOnly>(), counters_,
                             [this](Status failure) { OnPipelineFailure(failure); });
  if (!pipeline.ok()) return pipeline.status();
  pipeline_ = std::move(pipeline).value();
  rows_ = std::make_unique<PolledRows>(catalog_.Lookups());
  for (const auto& key : settings_.properties.UnreadKeys()) {
    spdlog::warn("unknown configuration key '{}' is ignored", key);
  }
  return Status::Ok();
}

Status PollingRelay::Run() {
  loop_thread_.Bind();
  if (Status watching = output_->Start(); !watching.ok()) {
    spdlog::error("{}", watching.ToString());
    return watching;
  }
  progress_log_.Start();
  Connect();
  io_.run();
  state_ = RelayState::kStopped;
  return final_status_;
}

std::string PollingRelay::StaysConfirmed() const {
  return "rows of " + settings_.polling.schema + "." + settings_.polling.table +
         " not yet marked stay in the table and are relayed again";
}

// --- Connecting and the lease --------------------------------------------------------------

void PollingRelay::Connect() {
  WALRELAY_ASSERT_OWNER(loop_thread_, "PollingRelay::Connect");
  if (stopping_ || finished_) return;
  if (!table_) {
    auto opened = OutboxTable::Open(settings_);
    if (!opened.ok()) return ConnectionLost(opened.status());
    table_ = std::move(opened).value();
    // Keys, NOT NULL and type names as the slot's relay has them, so the records' bytes (the
    // Connect schemas' `optional`, enum arrays) and partitions are the same.
    catalog_.Adopt(table_->catalog());
  }
  auto lease = table_->TryTakeLease();
  if (!lease.ok()) return ConnectionLost(lease.status());
  if (!*lease) {
    if (!standby_logged_) {
      spdlog::info("another relay polls {}.{} (it holds the lease); waiting as a standby, asking "
                   "again every {} ms (polling.lease.retry.ms)",
                   settings_.polling.schema, settings_.polling.table,
                   settings_.polling.lease_retry_ms);
      standby_logged_ = true;
    }
    state_ = RelayState::kStandby;
    connection_error_.clear();
    backoff_.Succeeded();
    ScheduleConnect(std::chrono::milliseconds(settings_.polling.lease_retry_ms));
    return MarkAcknowledged();  // rows this relay published before it lost the lease
  }
  standby_logged_ = false;
  connection_error_.clear();
  state_ = RelayState::kStreaming;
  unread_inserts_.Restart(std::chrono::steady_clock::now());
  pipeline_->StreamStarted(StreamStart{
      SourceIdentity{"polling " + settings_.polling.schema + "." + settings_.polling.table, 1},
      rows_->start(), Lsn(), false, std::nullopt});
  if (!announced_) {
    announced_ = true;
    spdlog::info(
        "polling {}.{} in {} order (batches of {}, every {} ms when idle; rows are {} once "
        "Kafka acknowledged them{})",
        settings_.polling.schema, settings_.polling.table, settings_.polling.order_column,
        settings_.polling.batch_size, settings_.polling.interval_ms,
        settings_.polling.marks_by_delete() ? std::string("deleted")
                                            : "marked in column " + settings_.polling.mark_column,
        table_->commit_times_tracked()
            ? ""
            : "; track_commit_timestamp is off: record timestamps are read times");
  } else {
    spdlog::info("polling {}.{} again", settings_.polling.schema, settings_.polling.table);
  }
  MarkAcknowledged();  // rows acknowledged while the connection was down
  Poll();
}

void PollingRelay::ScheduleConnect(std::chrono::milliseconds delay) {
  connect_timer_.expires_after(delay);
  connect_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    Connect();
  });
}

void PollingRelay::ConnectionLost(const Status& cause) {
  WALRELAY_ASSERT_OWNER(loop_thread_, "PollingRelay::ConnectionLost");
  if (stopping_ || finished_) return;
  // A table or column that is not there, or a privilege missing: retrying won't help.
  if (cause.code() == ErrorCode::kConfig) return Fail(cause);
  // The lease ends with the connection: the batch in flight is not marked by this connection
  // (its rows are read again), and a standby may take over.
  table_.reset();
  poll_timer_.cancel();
  connection_error_ = cause.message();
  state_ = RelayState::kConnecting;
  if (settings_.errors_max_retries >= 0 && backoff_.failures() >= settings_.errors_max_retries) {
    return Fail(Status(cause.code(), cause.message() + " (after " +
                                         std::to_string(backoff_.failures()) +
                                         " retries, errors.max.retries)"));
  }
  const auto delay = backoff_.Failed();
  spdlog::warn("{}; connecting again in {} ms", cause.message(), delay.count());
  ScheduleConnect(delay);
}

// --- Polling -------------------------------------------------------------------------------

void PollingRelay::SchedulePoll(std::chrono::milliseconds delay) {
  poll_timer_.expires_after(delay);  // replaces a wait already armed
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    Poll();
  });
}

void PollingRelay::PollSoon() {
  if (poll_posted_) return;
  poll_posted_ = true;
  boost::asio::post(io_, [this] {
    poll_posted_ = false;
    Poll();
  });
}

void PollingRelay::Poll() {
  WALRELAY_ASSERT_OWNER(loop_thread_, "PollingRelay::Poll");
  // Only with the lease: a standby keeps its connection (to ask for the lease, and to mark
  // batches it relayed before it lost it), and a read posted before then must not run there.
  if (stopping_ || finished_ || paused_ || !table_ || state_ != RelayState::kStreaming) return;
  if (batches_.size() >= kBatchesInFlight || pipeline_->Backpressured()) {
    // The next batch marked asks again (MarkWhenAcknowledged), whatever the last read found.
    waiting_for_room_ = true;
    return;
  }
  waiting_for_room_ = false;
  std::vector<std::string> in_flight;
  for (const auto& batch : batches_)
    for (const RowMark& row : batch.rows) in_flight.push_back(row.order_value);
  for (const RowMark& row : unmarked_) in_flight.push_back(row.order_value);
  // The records in flight and the rows read stay within max.queue.size.in.bytes together, as
  // on the replication path (a row larger than the bound is still read, alone).
  int64_t room = 0;  // no byte bound
  if (settings_.max_queue_size_bytes > 0) {
    room = std::max<int64_t>(
        1, settings_.max_queue_size_bytes - static_cast<int64_t>(pipeline_->inflight_bytes()));
  }
  const auto read_start = std::chrono::steady_clock::now();
  auto read = table_->ReadNext(settings_.polling.batch_size, room, in_flight);
  if (!read.ok()) return ConnectionLost(read.status());
  backoff_.Succeeded();  // a read that worked: the connection is good again
  counters_.polling_reads += 1;
  counters_.polling_rows_read += static_cast<uint64_t>(read->rows);
  counters_.polling_read_micros +=
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                std::chrono::steady_clock::now() - read_start)
                                .count());
  unread_inserts_.RowsRead(read->rows);
  last_read_full_ = read->more_may_wait;
  if (read->rows == 0) {
    if (unread_inserts_.Due(std::chrono::steady_clock::now())) CheckUnreadInserts();
    return SchedulePoll(std::chrono::milliseconds(settings_.polling.interval_ms));
  }
  Batch batch;
  batch.rows.reserve(static_cast<size_t>(read->rows));
  for (int row = 0; row < read->rows; ++row) {
    batch.rows.push_back(
        {read->value(row, read->order_field()), read->value(row, read->xid_field())});
  }
  auto end = rows_->Decode(table_->shape(), *read, [this](const DecodedMessage& decoded) {
    return pipeline_->Handle(decoded);
  });
  if (!end.ok()) return Fail(end.status());
  batch.end = *end;
  received_position_ = *end;
  batches_.push_back(std::move(batch));
  // More rows are likely waiting after a full batch: read them while this one is in flight.
  if (last_read_full_) {
    PollSoon();
  } else {
    SchedulePoll(std::chrono::milliseconds(settings_.polling.interval_ms));
  }
  MarkWhenAcknowledged();  // a batch whose records were all skipped is settled already
}

void PollingRelay::CheckUnreadInserts() {
  auto inserted = table_->InsertedRows();
  if (!inserted.ok()) {
    // Only a warning depends on it; a connection that went shows at the next read.
    spdlog::debug("reading the insert counter of {}.{}: {}", settings_.polling.schema,
                  settings_.polling.table, inserted.status().message());
    return;
  }
  const auto vanished = unread_inserts_.Close(*inserted, std::chrono::steady_clock::now());
  if (!vanished) return;
  const double seconds = static_cast<double>(settings_.polling.unread_check_ms) / 1000.0;
  spdlog::warn("{} rows were inserted into {}.{} in the last {} s and this relay read none of "
               "them, nor any row in the {} s before: they were deleted before a poll could read "
               "them (or rolled back). In polling mode an outbox row must stay until the relay "
               "marks it; an application that deletes its rows right after inserting them loses "
               "those events here (docs/polling.md, \"Remove-after-insert loses events here\")",
               vanished->inserted, settings_.polling.schema, settings_.polling.table, seconds,
               seconds);
}

void PollingRelay::OnDelivery(const DeliveryReport& report) {
  WALRELAY_ASSERT_OWNER(loop_thread_, "PollingRelay::OnDelivery");
  if (Status handled = pipeline_->OnDelivery(report); !handled.ok()) OnPipelineFailure(handled);
  if (pipeline_->holding()) {
    if (Status sent = pipeline_->SendHeld(); !sent.ok()) return Fail(sent);
  }
  MarkWhenAcknowledged();
  if (stopping_ && pipeline_->inflight_records() == 0) FinishShutdown();
}

void PollingRelay::MarkWhenAcknowledged() {
  // A record the error policy stopped on is never acknowledged, so a batch that gets here was
  // delivered in full; a failure elsewhere (the producer) still marks nothing more.
  if (!final_status_.ok()) return;
  // The ledger confirms in order: the batches it passed are the oldest ones, all delivered.
  const Lsn confirmable = pipeline_->Confirmable();
  bool acknowledged = false;
  while (!batches_.empty() && batches_.front().end <= confirmable) {
    Batch& batch = batches_.front();
    unmarked_.insert(unmarked_.end(), std::make_move_iterator(batch.rows.begin()),
                     std::make_move_iterator(batch.rows.end()));
    unmarked_end_ = batch.end;
    batches_.pop_front();
    acknowledged = true;
  }
  if (!acknowledged) return;
  pipeline_->Confirmed(unmarked_end_);
  // A mark already failing waits for its timer: these rows go with it.
  if (mark_backoff_.failures() == 0) MarkAcknowledged();
}

void PollingRelay::MarkAcknowledged() {
  WALRELAY_ASSERT_OWNER(loop_thread_, "PollingRelay::MarkAcknowledged");
  if (unmarked_.empty() || !final_status_.ok()) return;
  if (!table_) {
    // The connection (and maybe the lease) went: marked once connected again. A relay that
    // takes the lease meanwhile relays these rows again (a duplicate, never a loss).
    spdlog::info("{} rows acknowledged while the connection to PostgreSQL was down are marked "
                 "once it is back",
                 unmarked_.size());
    return;
  }
  auto marked = table_->MarkPublished(unmarked_);
  if (!marked.ok()) return MarkFailed(marked.status());
  if (mark_backoff_.failures() > 0) {
    spdlog::info("marked {} rows of {}.{} after {} failed tries", unmarked_.size(),
                 settings_.polling.schema, settings_.polling.table, mark_backoff_.failures());
  }
  mark_backoff_.Succeeded();
  if (*marked < static_cast<int64_t>(unmarked_.size())) {
    const size_t missed = unmarked_.size() - static_cast<size_t>(*marked);
    if (state_ == RelayState::kStandby) {
      // The usual end of a takeover: the relay holding the lease now read these rows again
      // (they were unmarked), relayed and marked them.
      spdlog::info("{} of {} rows this relay relayed from {}.{} before it lost the lease were "
                   "marked by the relay that holds it now (which relayed them too)",
                   missed, unmarked_.size(), settings_.polling.schema, settings_.polling.table);
    } else {
      spdlog::warn("{} of {} rows relayed from {}.{} were gone, marked, or updated when this "
                   "relay marked them: an updated row is relayed again in its new version; a row "
                   "deleted or marked by someone else (by hand, or a process polling without "
                   "the lease) is not",
                   missed, unmarked_.size(), settings_.polling.schema, settings_.polling.table);
    }
  }
  unmarked_.clear();
  confirmed_position_ = unmarked_end_.value();
  // More rows are likely waiting, or a read found no room: read now. Otherwise the timer armed
  // after the last, short read reads next.
  if (last_read_full_ || waiting_for_room_) PollSoon();
}

void PollingRelay::MarkFailed(const Status& cause) {
  const std::string table = settings_.polling.schema + "." + settings_.polling.table;
  // Retrying cannot fix it: re-reading the rows would publish them again without end.
  if (cause.code() != ErrorCode::kConnection)
    return Fail(Status(cause.code(), "outbox table " + table + ": " + cause.message()));
  if (settings_.errors_max_retries >= 0 &&
      mark_backoff_.failures() >= settings_.errors_max_retries) {
    return Fail(Status(cause.code(), "outbox table " + table + ": " + cause.message() + " (after " +
                                         std::to_string(mark_backoff_.failures()) +
                                         " retries, errors.max.retries)"));
  }
  const auto delay = mark_backoff_.Failed();
  // The connection went with the statement: reconnecting marks them (Connect).
  if (!table_->connected()) return ConnectionLost(cause);
  spdlog::warn("{}; marking them again in {} ms (their records are acknowledged: they are not "
               "read again)",
               cause.message(), delay.count());
  mark_timer_.expires_after(delay);
  mark_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    MarkAcknowledged();
  });
}

void PollingRelay::OnPipelineFailure(Status status) { Fail(std::move(status)); }

// --- Operating -----------------------------------------------------------------------------

void PollingRelay::Pause() {
  if (paused_) return;
  paused_ = true;
  poll_timer_.cancel();
  spdlog::info("paused polling {}.{}", settings_.polling.schema, settings_.polling.table);
}

void PollingRelay::Resume() {
  if (!paused_) return;
  paused_ = false;
  unread_inserts_.Restart(std::chrono::steady_clock::now());  // nothing was read while paused
  spdlog::info("resumed polling {}.{}", settings_.polling.schema, settings_.polling.table);
  PollSoon();
}

bool PollingRelay::Restart() {
  if (stopping_) return false;
  spdlog::info("restart requested: reconnecting to poll {}.{}", settings_.polling.schema,
               settings_.polling.table);
  table_.reset();
  poll_timer_.cancel();
  connection_error_ = "restarting";
  state_ = RelayState::kConnecting;
  backoff_.Succeeded();
  ScheduleConnect(std::chrono::milliseconds(0));
  return true;
}

// --- Stopping ------------------------------------------------------------------------------

void PollingRelay::RequestStop() {
  boost::asio::post(io_, [this] {
    if (!stopping_)
      spdlog::info("stop requested; waiting for Kafka to acknowledge in-flight records");
    BeginShutdown();
  });
}

void PollingRelay::Fail(Status status) {
  RecordFailure(std::move(status));
  BeginShutdown();
}

void PollingRelay::RecordFailure(Status status) {
  if (!final_status_.ok()) return;  // the first failure is the cause; later ones follow from it
  spdlog::error("{}; {}", status.ToString(), StaysConfirmed());
  final_status_ = std::move(status);
}

void PollingRelay::OnProducerFailure(const Status& failure) {
  RecordFailure(failure);
  boost::asio::post(io_, [this] {
    BeginShutdown();
    FinishShutdown();
  });
}

void PollingRelay::BeginShutdown() {
  if (stopping_ || finished_) return;
  stopping_ = true;
  state_ = RelayState::kStopping;
  poll_timer_.cancel();
  connect_timer_.cancel();
  if (pipeline_->inflight_records() == 0) return FinishShutdown();
  shutdown_timer_.expires_after(std::chrono::milliseconds(settings_.shutdown_timeout_ms));
  shutdown_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || finished_) return;
    spdlog::warn("{} records still unacknowledged after shutdown.timeout.ms={}; exiting without "
                 "marking their rows (they are relayed again on restart)",
                 pipeline_->inflight_records(), settings_.shutdown_timeout_ms);
    FinishShutdown();
  });
}

void PollingRelay::FinishShutdown() {
  if (finished_) return;
  finished_ = true;
  spdlog::info("stopped polling {}.{}", settings_.polling.schema, settings_.polling.table);
  pipeline_->Stopping();
  output_->PurgeAll();
  for (auto* timer : {&poll_timer_, &connect_timer_, &shutdown_timer_, &mark_timer_})
    timer->cancel();
  output_->Stop();
  progress_log_.Stop();
  table_.reset();
  state_ = RelayState::kStopped;
  io_.stop();
}

}  // namespace walrelay
