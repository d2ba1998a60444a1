#include "delivery/record_pipeline.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "transform/message_event.h"

namespace walrelay {
namespace {

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

size_t RecordBytes(const Record& record) {
  return record.topic.size() + (record.key ? record.key->size() : 0) +
         (record.value ? record.value->size() : 0);
}

}  // namespace

Result<std::unique_ptr<RecordPipeline>> RecordPipeline::Create(
    const RelaySettings& settings, RecordSink& sink, std::unique_ptr<DeliveryGuarantee> guarantee,
    RelayCounters& counters, FailureHandler on_failure) {
  auto converters = Converters::Build(settings.properties);
  if (!converters.ok()) return converters.status();
  std::unique_ptr<RecordPipeline> pipeline(new RecordPipeline(settings, sink, std::move(guarantee),
                                                              counters, std::move(on_failure),
                                                              std::move(converters).value()));
  auto chain = TransformChain::Build(settings.properties, pipeline->source_context_);
  if (!chain.ok()) return chain.status();
  pipeline->chain_.emplace(std::move(chain).value());
  if (pipeline->chain_->SkipsSourceTopicAndKey())
    pipeline->source_topic_and_key_ = SourceTopicAndKey::kLeaveUnset;
  return pipeline;
}

RecordPipeline::RecordPipeline(const RelaySettings& settings, RecordSink& sink,
                               std::unique_ptr<DeliveryGuarantee> guarantee,
                               RelayCounters& counters, FailureHandler on_failure,
                               Converters converters)
    : settings_(settings),
      counters_(counters),
      guarantee_(std::move(guarantee)),
      on_failure_(std::move(on_failure)),
      converters_(std::move(converters)),
      dispatcher_(sink, counters,
                  [this](Dispatcher::Refusal& refusal) { return OnRefused(refusal); }) {
  source_context_.topic_prefix = settings_.topic_prefix;
  source_context_.database = settings_.dbname;
  source_context_.connector_name = settings_.name;
  source_context_.modes = settings_.column_modes;
  converters_.KeepNumberText(settings_.column_modes.decimal == DecimalMode::kNative);
  guarantee_->OnRecordsDiscarded([this] { ForgetInFlight(); });
}

// --- The stream ----------------------------------------------------------------------------

void RecordPipeline::StreamStarted(const StreamStart& stream) {
  WALRELAY_ASSERT_OWNER(owner_, "RecordPipeline::StreamStarted");
  DeliveryTracker& ledger = dispatcher_.ledger();
  // Past the slot's position when the guarantee skips what Kafka holds already.
  const Lsn slot = std::max(stream.slot_position, stream.start_position);
  // The last position known delivered: this process's, or the stored one for a new process.
  Lsn last_delivered = last_confirmed();
  if (!started_ && stream.stored) last_delivered = stream.stored->lsn_commit;
  // The server never streams below the slot: a flush below it would only be stale.
  slot_floor_ = slot;
  if (stream.slot_recreated) {
    spdlog::error("replication slot '{}' was missing and has been created again "
                  "(slot.recreate.when.missing=true): rows committed between LSN {} (the last "
                  "{}) and LSN {} (the new slot's start) may be missing from Kafka; "
                  "republish them from the outbox table or the source of truth",
                  settings_.slot_name, last_delivered.ToString(),
                  started_ ? "confirmed" : "stored position", slot.ToString());
    ++counters_.slots_recreated;
  }
  if (!started_) {
    ledger = DeliveryTracker(slot);
    started_ = true;
  } else if (stream.slot_recreated) {
    ledger.Rebase(slot);
  } else if (server_ && !(*server_ == stream.server)) {
    spdlog::warn("PostgreSQL is not the server streamed from before ({}, now {}: a failover or a "
                 "promoted standby); slot '{}' is at LSN {}, the relay continues from there and "
                 "confirms no position learnt from the previous server",
                 server_->ToString(), stream.server.ToString(), settings_.slot_name,
                 slot.ToString());
    ledger.Rebase(slot);
  } else if (slot > ledger.confirmable()) {
    if (stream.start_position <= stream.slot_position) {
      spdlog::warn("replication slot '{}' is at LSN {}, past LSN {} this relay can confirm "
                   "(moved by another process); the relay continues from the slot's position",
                   settings_.slot_name, slot.ToString(), ledger.confirmable().ToString());
    }
    ledger.Rebase(slot);
  } else {
    // Records still in flight stay tracked; the server replays from the slot's position, so
    // a transaction that was open when the connection broke is sent again from its start.
    ledger.StreamRestarted();
  }
  server_ = stream.server;
  held_inside_.reset();
  if (stream.stored && stream.stored->inside &&
      stream.stored->system_identifier == stream.server.system_id &&
      stream.stored->timeline == static_cast<uint32_t>(stream.server.timeline) &&
      stream.stored->slot == settings_.slot_name) {
    held_inside_ = stream.stored->inside;
    spdlog::info("Kafka holds source transaction {} up to LSN {} (change {} there) already: "
                 "the stream skips those changes when it replays it",
                 held_inside_->xid, held_inside_->lsn.ToString(), held_inside_->at_lsn);
  }
}

bool RecordPipeline::HeldAlready(const InsideTransaction& at) {
  if (!held_inside_ || !KafkaHolds(*held_inside_, at)) return false;
  ++counters_.source_changes_held_in_kafka;
  return true;
}

Status RecordPipeline::Handle(const DecodedMessage& decoded) {
  WALRELAY_ASSERT_OWNER(owner_, "RecordPipeline::Handle");
  switch (decoded.kind) {
    case MessageKind::kBegin:
      dispatcher_.ledger().BeginTransaction();
      guarantee_->SourceBegan();
      current_txn_ = decoded.begin;
      changes_.Begin(decoded.begin.xid, decoded.begin.first_lsn);
      return Status::Ok();
    case MessageKind::kCommit:
      // The split transaction is behind the stream now.
      if (held_inside_ && held_inside_->xid == current_txn_.xid &&
          held_inside_->first_lsn == current_txn_.first_lsn) {
        held_inside_.reset();
      }
      dispatcher_.ledger().CommitTransaction(decoded.commit.end_lsn);
      return guarantee_->SourceCommitted(decoded.commit, !dispatcher_.holding());
    case MessageKind::kMessage: {
      if (!decoded.message.transactional) return HandleLogicalMessage(decoded.message);
      const InsideTransaction at = changes_.Next(decoded.message.lsn);
      if (HeldAlready(at)) return Status::Ok();
      WALRELAY_RETURN_IF_ERROR(HandleLogicalMessage(decoded.message));
      return guarantee_->ChangeHandled(at, !dispatcher_.holding());
    }
    case MessageKind::kChange: {
      const InsideTransaction at = changes_.Next(decoded.change.lsn);
      if (HeldAlready(at)) return Status::Ok();
      WALRELAY_RETURN_IF_ERROR(HandleChange(decoded.change));
      return guarantee_->ChangeHandled(at, !dispatcher_.holding());
    }
    case MessageKind::kExcludedChange: return Status::Ok();
  }
  return Status::Ok();
}

void RecordPipeline::ServerPosition(Lsn wal_end) {
  WALRELAY_ASSERT_OWNER(owner_, "RecordPipeline::ServerPosition");
  dispatcher_.ledger().ServerPosition(wal_end);
  guarantee_->ServerPosition(wal_end);
}

Status RecordPipeline::Tick() {
  WALRELAY_ASSERT_OWNER(owner_, "RecordPipeline::Tick");
  return guarantee_->Tick(!dispatcher_.holding());
}

std::optional<std::chrono::steady_clock::time_point> RecordPipeline::TickDeadline() const {
  return guarantee_->TickDeadline();
}

Status RecordPipeline::EndStream() {
  WALRELAY_ASSERT_OWNER(owner_, "RecordPipeline::EndStream");
  return guarantee_->EndStream(!dispatcher_.holding());
}

bool RecordPipeline::IncludesTable(std::string_view schema, std::string_view table) {
  return LookupTable(schema, table).included;
}

const RecordPipeline::SourceTable& RecordPipeline::LookupTable(std::string_view schema,
                                                               std::string_view table) {
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

Status RecordPipeline::HandleChange(const RowChange& change) {
  const SourceTable& source = LookupTable(change.schema, change.table);
  if (!source.included) return Status::Ok();
  // skipped.operations: as in Debezium, not emitted at all (truncates by default).
  if (settings_.skipped_operations.Skips(static_cast<char>(change.op))) {
    ++counters_.source_changes_skipped;
    return Status::Ok();
  }
  ++*source.read_counter;
  Status relayed = Relay(MakeSourceRecord(change, source_context_, source_topic_and_key_), [&] {
    // The dead letter carries the row as the change event it came in as.
    Record original = MakeSourceRecord(change, source_context_);
    original.value = SerializeChangeEvent(change, source_context_, NowMillis());
    return original;
  });
  if (!relayed.ok() || change.op != ChangeOp::kDelete || !settings_.tombstones_on_delete)
    return relayed;
  return Relay(MakeTombstoneRecord(change, source_context_, source_topic_and_key_),
               [&] { return MakeTombstoneRecord(change, source_context_); });
}

Status RecordPipeline::HandleLogicalMessage(const LogicalMessage& message) {
  // Other prefixes belong to other consumers of the WAL, transactional or not: no warning.
  if (!settings_.IncludesMessagePrefix(message.prefix)) {
    ++counters_.logical_messages["filtered"];
    return Status::Ok();
  }
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
  ++counters_.logical_messages["relayed"];
  auto make = [&] {
    return MakeMessageRecord(message, current_txn_.xid, current_txn_.commit_time_ms,
                             source_context_, NowMillis());
  };
  return Relay(make(), make);
}

// --- Transform, convert, produce -----------------------------------------------------------

Status RecordPipeline::Relay(Record record, const std::function<Record()>& original) {
  auto outcome = chain_->Apply(record);
  if (!outcome.ok()) {
    const Header* id = record.FindHeader("id");
    const std::string event = id && id->value ? " (event id " + *id->value + ")" : "";
    FailureContext failure{"TRANSFORMATION",           "transform chain", "walrelay.TransformError",
                           outcome.status().message(), settings_.name,    record.source.lsn,
                           OriginLabel(record.source)};
    return ApplyErrorPolicy(original(), failure,
                            outcome.status().WithContext(DescribeOrigin(record.source) + event +
                                                         " at LSN " + record.source.lsn.ToString()),
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
  if (auto failure = converters_.Apply(record)) {
    // The dead letter keeps walrelay's own bytes: the record as it was before conversion.
    FailureContext context{failure->stage,
                           failure->class_name,
                           "org.apache.kafka.connect.errors.DataException",
                           failure->status.message(),
                           settings_.name,
                           record.source.lsn,
                           OriginLabel(record.source)};
    return ApplyErrorPolicy(record, context, failure->status, std::nullopt);
  }
  return Produce(record);
}

void RecordPipeline::SetChangeEventShapes(Record& record) const {
  // Structs, described by Debezium's schemas; a tombstone has none. The schemas are only
  // built when a converter writes them: otherwise only their absence matters (a null key).
  const bool schemas = converters_.WritesSchemas();
  record.key_shape =
      ConnectShape{ConnectType::kStruct,
                   schemas ? ChangeEventKeySchemaJson(*record.change, source_context_) : ""};
  record.value_shape = ConnectShape{ConnectType::kStruct,
                                    schemas && !record.source.tombstone
                                        ? ChangeEventSchemaJson(*record.change, source_context_)
                                        : ""};
}

Status RecordPipeline::Produce(Record& record) {
  const size_t bytes = RecordBytes(record);
  WALRELAY_RETURN_IF_ERROR(guarantee_->BeforeRecord(bytes));
  return dispatcher_.Send(record, dispatcher_.Register(record, bytes));
}

// --- Failures ------------------------------------------------------------------------------

Status RecordPipeline::ApplyErrorPolicy(const Record& record, const FailureContext& failure,
                                        Status error, std::optional<uint64_t> ticket) {
  ++counters_.failed[FailedStageLabel(failure.stage)];
  if (!settings_.errors_tolerance_all) {
    if (ticket) dispatcher_.Fail(*ticket, error.message());
    return error;
  }
  if (settings_.dead_letter_topic.empty()) {
    // Kafka Connect's errors.tolerance=all without a dead-letter queue: log and skip.
    spdlog::warn("skipping {} (errors.tolerance=all, no dead-letter topic): {}",
                 DescribeRecord(record), error.message());
    ++counters_.skipped;
    if (ticket) dispatcher_.Settle(*ticket);
    return Status::Ok();
  }
  Record dead = MakeDeadLetterRecord(record, failure, settings_.dead_letter_topic,
                                     settings_.dead_letter_context_headers,
                                     dispatcher_.sink().MaxValueBytes());
  spdlog::warn("sending {} to dead-letter topic '{}': {}", DescribeRecord(record),
               settings_.dead_letter_topic, error.message());
  ++counters_.dead_letters;
  // The dead letter takes the failed record's place in the ledger, so the row's LSN is
  // confirmed only once the dead letter is acknowledged.
  if (ticket) {
    dispatcher_.Retarget(*ticket, settings_.dead_letter_topic);
    return dispatcher_.Send(dead, *ticket);
  }
  return Produce(dead);
}

Status RecordPipeline::OnRefused(Dispatcher::Refusal& refusal) {
  const std::optional<DeliveryTracker::Source> source = ledger().SourceOf(refusal.ticket);
  const Lsn lsn = source ? source->lsn : refusal.record.source.lsn;
  const bool dead_letter =
      !settings_.dead_letter_topic.empty() && refusal.record.topic == settings_.dead_letter_topic;
  if (!refusal.sent && dead_letter) {
    dispatcher_.Fail(refusal.ticket, refusal.error.message());
    return refusal.error.WithContext("dead-letter topic '" + settings_.dead_letter_topic + "'");
  }
  if (refusal.sent || refusal.code == RD_KAFKA_RESP_ERR__FATAL) {
    // Its Kafka transaction may not commit any more (or the producer is gone: fenced): then
    // the stream is replayed from the last commit, the record with it, as after a lost
    // connection.
    if (Status fate = guarantee_->RecordRefused(refusal.error.message()); !fate.ok()) {
      dispatcher_.Settle(refusal.ticket);
      return fate;
    }
  }
  if (dead_letter || !IsRecordSpecificError(refusal.code)) {
    // The producer, a broker or a whole topic cannot take records: skipping this one would
    // skip, and confirm, every record after it.
    ++counters_.failed["produce"];
    dispatcher_.Fail(refusal.ticket, refusal.error.message());
    if (!refusal.sent) {
      return refusal.error.WithContext(DescribeOrigin(refusal.record.source) + " at LSN " +
                                       lsn.ToString());
    }
    return Status::Kafka(refusal.error.message() + StaysConfirmed(lsn));
  }
  FailureContext failure{"KAFKA_PRODUCE",
                         "librdkafka",
                         rd_kafka_err2name(refusal.code),
                         refusal.sent ? DeliveryErrorText(refusal.code) : refusal.error.message(),
                         settings_.name,
                         lsn,
                         source ? source->table : OriginLabel(refusal.record.source)};
  Status context = refusal.sent ? refusal.error
                                : refusal.error.WithContext(DescribeOrigin(refusal.record.source) +
                                                            " at LSN " + lsn.ToString());
  Status outcome = ApplyErrorPolicy(refusal.record, failure, context, refusal.ticket);
  if (!outcome.ok() && refusal.sent) {
    return Status::Kafka(refusal.error.message() + StaysConfirmed(lsn));
  }
  return outcome;
}

std::string RecordPipeline::StaysConfirmed(Lsn row_lsn) const {
  return "; the row is at LSN " + row_lsn.ToString() + "; the slot stays confirmed at " +
         Confirmable().ToString() + " so it is sent again after a restart";
}

void RecordPipeline::ForgetInFlight() {
  dispatcher_.Forget();
  dispatcher_.ledger().Rebase(Confirmable());
}

// --- Kafka ---------------------------------------------------------------------------------

Status RecordPipeline::OnDelivery(const DeliveryReport& report) {
  WALRELAY_ASSERT_OWNER(owner_, "RecordPipeline::OnDelivery");
  if (stopping_ && (report.error == RD_KAFKA_RESP_ERR__PURGE_QUEUE ||
                    report.error == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)) {
    // Purged by the relay's own stop: never confirmed, sent again after a restart.
    dispatcher_.Fail(report.ticket, "purged at shutdown");
    return Status::Ok();
  }
  return dispatcher_.OnDelivery(report);
}

bool RecordPipeline::Backpressured() const {
  if (dispatcher_.holding() || guarantee_->Holding()) return true;
  if (static_cast<int64_t>(inflight_records()) >= settings_.max_queue_size) return true;
  return settings_.max_queue_size_bytes > 0 &&
         static_cast<int64_t>(inflight_bytes()) >= settings_.max_queue_size_bytes;
}

// --- Positions -----------------------------------------------------------------------------

Lsn RecordPipeline::Confirmable() const { return guarantee_->Confirmable(ledger().confirmable()); }

Lsn RecordPipeline::FlushPosition() const {
  // Never below the slot's position as read at connect: the server has that already, and a
  // lower value would come from an older ledger (a standby that lost a race, another server).
  return std::max(Confirmable(), slot_floor_);
}

void RecordPipeline::Confirmed(Lsn position) {
  WALRELAY_ASSERT_OWNER(owner_, "RecordPipeline::Confirmed");
  if (position == last_confirmed_) return;
  last_confirmed_ = position;
  guarantee_->Confirmed(position);
}

}  // namespace walrelay
