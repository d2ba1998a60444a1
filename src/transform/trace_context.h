// Trace context as Debezium's outbox EventRouter propagates it with OpenTelemetry enabled
// (io.debezium.transforms.tracing.ActivateTracingSpan, W3C trace context propagation).
//
// The outbox row carries the writer's span context as a java.util.Properties text (the
// `tracing.span.context.field` column, e.g. "traceparent=00-<trace id>-<span id>-01"). Debezium
// starts a span that is a child of that context and injects the child's context into the
// record's headers; so does ContinueTrace(), without creating or exporting any span:
//   - a valid `traceparent` in the properties: the same trace id, a new random span id, and
//     the parent's sampled flag (OpenTelemetry's default sampler, parentbased_always_on);
//     its `tracestate`, when valid and not empty, is passed on as `tracestate`;
//   - none or an invalid one: a new trace (random trace and span ids), sampled, with the
//     W3C random-trace-id flag: flags 03.
// Baggage (a `baggage` property) is not propagated.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace walrelay {

// java.util.Properties.load() of `text`: key/value pairs in the order of their first
// appearance, a repeated key keeping its last value. Comment lines (# or !), blank lines,
// separators '=', ':' or white space, backslash escapes (\t \n \r \f \uXXXX, any other char
// as itself) and line continuations are read as Java reads them.
std::vector<std::pair<std::string, std::string>> ParseJavaProperties(std::string_view text);

// The headers Debezium's OpenTelemetry propagation writes, in its order.
struct TraceHeaders {
  std::string traceparent;
  std::optional<std::string> tracestate;
};

class TraceContinuer {
 public:
  TraceContinuer();

  // The child context of the serialized parent context `properties` (nullopt: no parent).
  TraceHeaders Continue(const std::optional<std::string>& properties);

 private:
  std::string RandomHex(size_t bytes);

  std::mt19937_64 random_;
};

}  // namespace walrelay
