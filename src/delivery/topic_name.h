// Kafka's rule for topic names, checked before a record reaches librdkafka: ASCII letters,
// digits, '.', '_' and '-', 1 to 249 characters, and neither "." nor "..". librdkafka sends any
// name it is given, so a forbidden one would otherwise fail only on a broker that checks it
// (the mock cluster accepts everything), late and differently per broker.
//
// Returns OK, or a Kafka error saying what is wrong with the name; the message shows the name
// with any byte outside printable ASCII as '?' and cut after 100 characters.
#pragma once

#include <string_view>

#include "common/status.h"

namespace walrelay {

Status CheckTopicName(std::string_view topic);

}  // namespace walrelay
