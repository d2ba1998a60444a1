// RecordSink: where the record pipeline (delivery/record_pipeline.h) hands its records.
//
// KafkaProducer (delivery/producer.h) is the sink in production; tests pass a fake that
// acknowledges or refuses records when told to, so the ledger's rules are checked without a
// broker. Delivery reports do not come through this interface: whoever serves them (the
// relay polls the producer) passes them to RecordPipeline::OnDelivery.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "transform/record.h"

namespace walrelay {

class RecordSink {
 public:
  virtual ~RecordSink() = default;
  // Takes a copy of the record, tagged with `ticket` for its delivery report. Never waits:
  // with no room right now it fails with RD_KAFKA_RESP_ERR__QUEUE_FULL in `error_code`, the
  // code that classifies any other refusal too (IsRecordSpecificError).
  virtual Status Produce(const Record& record, uint64_t ticket,
                         rd_kafka_resp_err_t* error_code = nullptr) = 0;
  // Records taken and not yet reported on: room is made only while this is above zero.
  virtual int OutstandingMessages() const = 0;
  // The largest value a dead letter may carry.
  virtual size_t MaxValueBytes() const = 0;
};

}  // namespace walrelay
