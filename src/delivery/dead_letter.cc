#include "delivery/dead_letter.h"

namespace walrelay {

Record MakeDeadLetterRecord(const Record& original, const FailureContext& failure,
                            const std::string& dead_letter_topic, bool context_headers,
                            size_t max_value_bytes) {
  Record out;
  out.topic = dead_letter_topic;
  out.key = original.key;
  out.timestamp_ms = original.timestamp_ms;
  out.source = original.source;
  out.headers = original.headers;
  std::string event_id;
  if (const Header* id = original.FindHeader("id"); id && id->value) event_id = *id->value;

  const bool too_large = original.value && original.value->size() > max_value_bytes;
  if (too_large) {
    out.value = std::string();
  } else {
    out.value = original.value;
  }
  if (context_headers) {
    auto add = [&out](const char* key, std::string value) {
      out.headers.push_back(Header{key, std::move(value)});
    };
    add("__connect.errors.topic", original.topic);
    add("__connect.errors.partition",
        std::to_string(original.partition == kAnyPartition ? -1 : original.partition));
    add("__connect.errors.connector.name", failure.connector_name);
    add("__connect.errors.task.id", "0");
    add("__connect.errors.stage", failure.stage);
    add("__connect.errors.class.name", failure.class_name);
    add("__connect.errors.exception.class.name", failure.exception_class);
    add("__connect.errors.exception.message", failure.message);
    add("__walrelay.errors.lsn", failure.lsn.ToString());
    add("__walrelay.errors.table", failure.table);
    if (!event_id.empty()) add("__walrelay.errors.event.id", event_id);
    if (too_large) {
      add("__walrelay.errors.value.truncated",
          "value of " + std::to_string(original.value->size()) +
              " bytes removed: larger than the dead-letter limit of " +
              std::to_string(max_value_bytes) + " bytes");
    }
  }
  return out;
}

}  // namespace walrelay
