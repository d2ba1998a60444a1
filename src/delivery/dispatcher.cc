#include "delivery/dispatcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace walrelay {

Dispatcher::TopicAcks* Dispatcher::AcksOf(const std::string& topic) {
  if (!last_topic_ || topic != last_topic_->first)
    last_topic_ = &*counters_.acked.try_emplace(topic).first;
  return last_topic_;
}

namespace {

// Settled slots the in-flight queue may hold beyond one per record in flight before they are
// dropped: each slot is dropped at most once, so the cost per record stays constant.
constexpr size_t kSettledSlack = 64;

}  // namespace

const Dispatcher::InFlight* Dispatcher::FindInFlight(uint64_t ticket) const {
  if (in_flight_.empty()) return nullptr;
  const InFlight* slot = &in_flight_.front();
  if (slot->ticket != ticket) {
    auto it = std::lower_bound(in_flight_.begin(), in_flight_.end(), ticket,
                               [](const InFlight& f, uint64_t t) { return f.ticket < t; });
    if (it == in_flight_.end() || it->ticket != ticket) return nullptr;
    slot = &*it;
  }
  return slot->topic != nullptr ? slot : nullptr;
}

void Dispatcher::LeftLedger(InFlight& slot) {
  slot.topic = nullptr;
  --in_flight_records_;
  while (!in_flight_.empty() && in_flight_.front().topic == nullptr) in_flight_.pop_front();
  if (in_flight_.size() >= 2 * in_flight_records_ + kSettledSlack) {
    in_flight_.erase(std::remove_if(in_flight_.begin(), in_flight_.end(),
                                    [](const InFlight& f) { return f.topic == nullptr; }),
                     in_flight_.end());
  }
}

uint64_t Dispatcher::Register(const Record& record, size_t bytes) {
  // A row's label is its table's name, which the record holds already: no string per record.
  const uint64_t ticket =
      record.source.table.empty()
          ? ledger_.AddRecord(record.source.lsn, bytes, OriginLabel(record.source))
          : ledger_.AddRecord(record.source.lsn, bytes, record.source.table);
  in_flight_.push_back(InFlight{ticket, AcksOf(record.topic), record.source.commit_time_ms});
  ++in_flight_records_;
  return ticket;
}

void Dispatcher::Retarget(uint64_t ticket, const std::string& topic) {
  if (InFlight* slot = FindInFlight(ticket)) slot->topic = AcksOf(topic);
}

Status Dispatcher::Send(Record& record, uint64_t ticket) {
  rd_kafka_resp_err_t code = RD_KAFKA_RESP_ERR_NO_ERROR;
  Status produced = sink_.Produce(record, ticket, &code);
  if (produced.ok()) return produced;
  if (code != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
    return Refused(record, ticket, code, std::move(produced), /*sent=*/false);
  }
  // librdkafka's own queue (queue.buffering.max.messages or .max.kbytes) is full. Waiting for
  // room here would block the loop: no status updates, REST or delivery reports. The record
  // stays pending in the ledger, so nothing after it is confirmed, and the relay stops reading
  // until a delivery report has made room.
  if (sink_.OutstandingMessages() == 0) {
    Status error = Status::Kafka(
        "cannot produce " + DescribeRecord(record) + " (" + DescribeOrigin(record.source) +
        "): it does not fit librdkafka's empty queue; raise 'kafka.queue.buffering.max.kbytes' "
        "(or remove the override)");
    Fail(ticket, error.message());
    return error;
  }
  if (held_.empty()) {
    spdlog::debug("librdkafka's queue is full ({} messages); holding the record for topic '{}' "
                  "and reading no further until Kafka acknowledges some",
                  sink_.OutstandingMessages(), record.topic);
  }
  ++counters_.queue_full;
  held_.push_back(Held{std::move(record), ticket});
  return Status::Ok();
}

Status Dispatcher::SendHeld() {
  while (!held_.empty()) {
    Held held = std::move(held_.front());
    held_.pop_front();
    const size_t before = held_.size();
    WALRELAY_RETURN_IF_ERROR(Send(held.record, held.ticket));
    if (held_.size() > before) {
      // Still full: back in front, in its order.
      held_.push_front(std::move(held_.back()));
      held_.pop_back();
      return Status::Ok();
    }
  }
  return Status::Ok();
}

Status Dispatcher::OnDelivery(const DeliveryReport& report) {
  InFlight* slot = FindInFlight(report.ticket);
  if (slot == nullptr) return Status::Ok();  // forgotten: an aborted transaction's
  if (report.error == RD_KAFKA_RESP_ERR_NO_ERROR) {
    ledger_.Acknowledge(report.ticket);
    ++slot->topic->second;
    last_acked_commit_ms_ = std::max(last_acked_commit_ms_, slot->commit_time_ms);
    LeftLedger(*slot);
    return Status::Ok();
  }
  Record failed = report.failed;
  return Refused(failed, report.ticket, report.error,
                 Status::Kafka("Kafka did not accept " + report.description + ": " +
                               DeliveryErrorText(report.error)),
                 /*sent=*/true);
}

Status Dispatcher::Refused(Record& record, uint64_t ticket, rd_kafka_resp_err_t code, Status error,
                           bool sent) {
  Refusal refusal{record, ticket, code, std::move(error), sent};
  Status outcome = on_refused_(refusal);
  // Dealt with or failed, a record that left the ledger is no longer in flight.
  if (!ledger_.SourceOf(ticket)) EraseInFlight(ticket);
  return outcome;
}

void Dispatcher::Settle(uint64_t ticket) {
  ledger_.Acknowledge(ticket);
  EraseInFlight(ticket);
}

void Dispatcher::Fail(uint64_t ticket, const std::string& why) {
  ledger_.Fail(ticket, why);
  EraseInFlight(ticket);
}

void Dispatcher::Forget() {
  for (const Held& held : held_) ledger_.Acknowledge(held.ticket);
  held_.clear();
  for (const InFlight& slot : in_flight_)
    if (slot.topic != nullptr) ledger_.Acknowledge(slot.ticket);
  in_flight_.clear();
  in_flight_records_ = 0;
}

std::optional<Dispatcher::Waiting> Dispatcher::OldestWaiting() const {
  const std::optional<uint64_t> oldest = ledger_.OldestPending();
  if (!oldest) return std::nullopt;
  const std::optional<DeliveryTracker::Source> source = ledger_.SourceOf(*oldest);
  if (!source) return std::nullopt;
  const InFlight* slot = FindInFlight(*oldest);
  return Waiting{*oldest, slot != nullptr ? slot->topic->first : "?", *source};
}

}  // namespace walrelay
