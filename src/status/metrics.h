// Metrics: the relay's counters and gauges, and their rendering in Prometheus' text exposition
// format (version 0.0.4) for GET /metrics.
//
// RelayCounters lives inside the relay and is touched from its event-loop thread, like
// everything the HTTP server reads, so it needs no atomics; the one exception,
// kafka_transactions, says why it has them. PrometheusText writes one family
// at a time: a `# HELP` and a `# TYPE` line, then one sample per label set.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace walrelay {

struct RelayCounters {
  std::map<std::string, uint64_t> source_records;  // by source table
  // pg_logical_emit_message() records by outcome: "relayed", "filtered" (prefix not
  // included), "non_transactional" (refused)
  std::map<std::string, uint64_t> logical_messages;
  std::map<std::string, uint64_t> acked;   // by Kafka topic (dead letters included)
  std::map<std::string, uint64_t> failed;  // by stage: "transform", "convert" or "produce"
  uint64_t dead_letters = 0;               // handed to the dead-letter topic
  uint64_t skipped = 0;                    // dropped by errors.tolerance=all, no DLQ
  uint64_t reconnects = 0;                 // replication connections re-established
  uint64_t queue_full = 0;       // records librdkafka's full queue refused, held and sent again
  uint64_t slots_recreated = 0;  // slot.recreate.when.missing: a vanished slot created again
  // exactly.once.support: Kafka transactions by outcome (split ones are counted as committed
  // too). Atomic: a commit or an abort that the loop leaves to the next connect attempt ends
  // on that attempt's worker thread (delivery/exactly_once.h) while GET /metrics reads these.
  struct KafkaTransactionCounts {
    std::atomic<uint64_t> committed{0};
    std::atomic<uint64_t> aborted{0};
    std::atomic<uint64_t> split{0};
  };
  KafkaTransactionCounts kafka_transactions;
  // exactly.once.support: changes of a split source transaction that a replay skipped, as a
  // committed Kafka transaction holds their records already
  uint64_t source_changes_held_in_kafka = 0;
  // Row changes of included tables not relayed because skipped.operations names their operation
  uint64_t source_changes_skipped = 0;
  // At least once: source positions written to offsets.storage.topic, "written" or "failed"
  std::map<std::string, uint64_t> offset_writes;
  // source.mode=polling: reads of the outbox table, the rows they returned, their time
  uint64_t polling_reads = 0;
  uint64_t polling_rows_read = 0;
  uint64_t polling_read_micros = 0;
};

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a metric family; `type` is "counter" or "gauge".
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the current family.
  void Sample(const Labels& labels, uint64_t value);
  void Sample(const Labels& labels, double value);
  // A family with one unlabelled sample.
  void Single(std::string_view name, std::string_view type, std::string_view help, uint64_t value);
  void Single(std::string_view name, std::string_view type, std::string_view help, double value);
  // A family with one sample per map entry, labelled `label`=key, and a 0 sample for each of
  // `known` that has none yet: a series that first appears with its first event hides that
  // event from rate() and increase(), and leaves alerts on it nothing to evaluate before.
  void PerLabel(std::string_view name, std::string_view type, std::string_view help,
                std::string_view label, const std::map<std::string, uint64_t>& values,
                const std::vector<std::string>& known = {});

  const std::string& text() const { return out_; }

 private:
  void SampleName(const Labels& labels);

  std::string out_;
  std::string family_;
};

// Label values escape backslash, double quote and newline, as the format requires.
std::string EscapeLabelValue(std::string_view value);

}  // namespace walrelay
