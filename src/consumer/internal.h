// Pieces the stores and the consumer loop share, not part of the public API.
#pragma once

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "walrelay/consumer/consumer.h"

namespace walrelay::consumer {

// Calls the handler; an exception it throws becomes Retry("exception", what()).
HandlerResult CallHandler(const Handler& handler, HandlerContext& context);

// A query result's rows as text.
SqlRows RowsOf(PGresult* result);

// Copies a librdkafka message (topic, partition, offset, key, value, headers, timestamp).
Message MessageFromKafka(const rd_kafka_message_t* m);

}  // namespace walrelay::consumer
