// Logging setup: spdlog's level and line format for the whole process.
//
// Two formats: "text" (the default: `2026-01-02T03:04:05.678 info message`, local time) and
// "json" (one JSON object per line, for log collectors). JSON field names are stable:
// {"time": UTC ISO 8601 with milliseconds and "Z", "level": spdlog's level name ("info",
// "warning", ...), "logger": "walrelay", "message": the line}. Messages are escaped, so any byte
// a message holds keeps every line valid JSON.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace walrelay {

// `format` is "text" or "json"; anything else is a configuration error naming log.format.
Status SetLogFormat(const std::string& format);
// `level`: trace, debug, info, warn, error, off; `key` names the setting in the error.
Status SetLogLevel(const std::string& key, const std::string& level);

// JSON string contents for `text` (no surrounding quotes); bytes that are not valid UTF-8
// become U+FFFD, so the output is always valid JSON.
std::string JsonEscape(std::string_view text);

}  // namespace walrelay
