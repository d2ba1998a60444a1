// Dispatcher: hands records to the sink (delivery/record_sink.h) and keeps the ack ledger
// (delivery/delivery_tracker.h) in step with what the sink reports.
//
// Every record is registered in the ledger (Register) before it is sent, so nothing after it is
// confirmed until the sink acknowledged it. A record the sink has no room for (QUEUE_FULL) is
// held, still pending in the ledger, and SendHeld() sends the held records in stream order once
// delivery reports made room; while any is held, holding() is true and the relay reads no
// further. If nothing is outstanding in the sink, no report can make room: the record alone
// is too large, and Send fails.
//
// Refusals: a record the sink refuses at once (other than QUEUE_FULL), or refuses in its
// delivery report, goes to the refusal handler with its ticket still pending; the handler
// (the pipeline's error policy) sends a dead letter under the same ticket, acknowledges it as
// skipped (Settle), or fails it (Fail): then nothing at or after it is ever confirmed.
//
// Forget() drops every record in flight or held from the ledger (they will never be visible:
// an aborted Kafka transaction); reports for tickets it no longer tracks are ignored.
//
// Single-threaded: the relay's loop thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/lsn.h"
#include "common/status.h"
#include "delivery/delivery_tracker.h"
#include "delivery/producer.h"
#include "delivery/record_sink.h"
#include "status/metrics.h"
#include "transform/record.h"

namespace walrelay {

class Dispatcher {
 public:
  // A refused record, with the ticket it holds in the ledger. `sent` is true when Kafka refused
  // it in a delivery report, false when the sink refused it at once. Returns OK when the
  // record was dealt with (dead-lettered or skipped), or the error that stops the relay.
  struct Refusal {
    Record& record;
    uint64_t ticket;
    rd_kafka_resp_err_t code;
    Status error;
    bool sent;
  };
  using RefusalHandler = std::function<Status(Refusal&)>;

  Dispatcher(RecordSink& sink, RelayCounters& counters, RefusalHandler on_refused)
      : sink_(sink), counters_(counters), on_refused_(std::move(on_refused)) {}

  RecordSink& sink() { return sink_; }
  DeliveryTracker& ledger() { return ledger_; }
  const DeliveryTracker& ledger() const { return ledger_; }

  // A new ticket for `record` in the ledger, `bytes` counted against the in-flight bounds.
  uint64_t Register(const Record& record, size_t bytes);
  // The record under `ticket` now goes to another topic (a dead letter takes its place).
  void Retarget(uint64_t ticket, const std::string& topic);
  // Sends (or holds) a registered record; an error stops the relay.
  Status Send(Record& record, uint64_t ticket);
  // Sends what is held, oldest first: OK with holding() still true while the sink is full.
  Status SendHeld();
  bool holding() const { return !held_.empty(); }
  size_t held_records() const { return held_.size(); }

  // A delivery report from the sink. OK, or the error the refusal handler returned.
  Status OnDelivery(const DeliveryReport& report);
  // The record was dealt with without Kafka (skipped): it counts as settled.
  void Settle(uint64_t ticket);
  // Kafka will never acknowledge the record: nothing at or after it is confirmed.
  void Fail(uint64_t ticket, const std::string& why);
  void Forget();

  // The newest commit time among acknowledged records (0 before any).
  int64_t last_acked_commit_ms() const { return last_acked_commit_ms_; }
  // The oldest record still waiting for Kafka: its ticket, topic and origin, for the stall
  // warning.
  struct Waiting {
    uint64_t ticket;
    std::string topic;
    DeliveryTracker::Source source;
  };
  std::optional<Waiting> OldestWaiting() const;

 private:
  using TopicAcks = std::pair<const std::string, uint64_t>;  // an element of counters_.acked
  // Per record in flight: its topic's ack counter (std::map elements never move) and commit
  // time, for /metrics, the lag gauge and the stall warning.
  struct InFlight {
    uint64_t ticket;
    TopicAcks* topic;  // nullptr once the record left the ledger
    int64_t commit_time_ms;
  };
  struct Held {
    Record record;
    uint64_t ticket;
  };
  TopicAcks* AcksOf(const std::string& topic);
  // The record's slot in in_flight_, or nullptr when it is not in flight.
  const InFlight* FindInFlight(uint64_t ticket) const;
  InFlight* FindInFlight(uint64_t ticket) {
    return const_cast<InFlight*>(std::as_const(*this).FindInFlight(ticket));
  }
  // The record left the ledger (acknowledged, settled, failed).
  void LeftLedger(InFlight& slot);
  void EraseInFlight(uint64_t ticket) {
    if (InFlight* slot = FindInFlight(ticket)) LeftLedger(*slot);
  }
  void Hold(Held held);
  Status Refused(Record& record, uint64_t ticket, rd_kafka_resp_err_t code, Status error,
                 bool sent);

  RecordSink& sink_;
  RelayCounters& counters_;
  RefusalHandler on_refused_;
  DeliveryTracker ledger_;
  std::deque<Held> held_;
  // Records in flight in ticket order (the ledger's tickets increase). Kafka acknowledges
  // mostly in that order, so the record acknowledged is usually the front, and a settled
  // record's slot leaves once the ones before it have left. Settled slots behind an older
  // record are dropped when they outnumber the records in flight, so the queue holds
  // O(records in flight) slots however long one record waits.
  std::deque<InFlight> in_flight_;
  size_t in_flight_records_ = 0;
  TopicAcks* last_topic_ = nullptr;  // the previous record's, looked up once per run of a topic
  int64_t last_acked_commit_ms_ = 0;
};

}  // namespace walrelay
