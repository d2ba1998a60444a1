// Trace context as Debezium's EventRouter propagates it with OpenTelemetry enabled: the
// java.util.Properties text of the context column, and the W3C headers of the child span.
#include "transform/trace_context.h"

#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <utility>
#include <vector>

using namespace walrelay;

namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

TEST_CASE("java.util.Properties text is read as Properties.load reads it") {
  CHECK(ParseJavaProperties("#Mon Jan 01 00:00:00 UTC 2024\ntraceparent=00-abc-01\n") ==
        Pairs{{"traceparent", "00-abc-01"}});
  // Separators, white space, comments, CRLF, escapes, continuation lines, repeated keys.
  CHECK(ParseJavaProperties("  a = 1\r\n! note\r\nb:2\nc 3\n\nd\n") ==
        Pairs{{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", ""}});
  CHECK(ParseJavaProperties("k\\=ey=v\\u00e9\\tx\nlong=ab\\\n    cd\na=1\na=2") ==
        Pairs{{"k=ey", "v\xc3\xa9\tx"}, {"long", "abcd"}, {"a", "2"}});
  CHECK(ParseJavaProperties("").empty());
  CHECK(ParseJavaProperties("# only a comment").empty());
}

TEST_CASE("the child context keeps the trace, takes a new span id and the sampled flag") {
  TraceContinuer t;
  const std::regex shape("00-[0-9a-f]{32}-[0-9a-f]{16}-0[013]");
  const std::string trace = "0af7651916cd43dd8448eb211c80319c";
  const std::string parent = "traceparent=00-" + trace + "-b7ad6b7169203331-01\n";

  TraceHeaders sampled = t.Continue(parent + "tracestate=congo=t61rcWkgMzE, rojo=00f067aa0ba902b7");
  CHECK(std::regex_match(sampled.traceparent, shape));
  CHECK(sampled.traceparent.substr(3, 32) == trace);
  CHECK(sampled.traceparent.substr(36, 16) != "b7ad6b7169203331");
  CHECK(sampled.traceparent.substr(53) == "01");
  REQUIRE(sampled.tracestate.has_value());
  CHECK(*sampled.tracestate == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  CHECK(t.Continue(parent).traceparent.substr(36, 16) != sampled.traceparent.substr(36, 16));

  TraceHeaders unsampled = t.Continue("traceparent=00-" + trace + "-b7ad6b7169203331-00");
  CHECK(unsampled.traceparent.substr(3, 32) == trace);
  CHECK(unsampled.traceparent.substr(53) == "00");
  CHECK_FALSE(unsampled.tracestate.has_value());

  // Flags beyond sampled: the random-trace-id bit is kept, the other bits dropped.
  // (No structured binding: clang 14 cannot capture one in doctest's message lambda.)
  for (const auto& flags : std::vector<std::pair<std::string, std::string>>{
           {"ff", "03"}, {"02", "02"}, {"03", "03"}, {"fe", "02"}, {"81", "01"}}) {
    TraceHeaders child = t.Continue("traceparent=00-" + trace + "-b7ad6b7169203331-" + flags.first);
    CHECK(child.traceparent.substr(3, 32) == trace);
    CHECK_MESSAGE(child.traceparent.substr(53) == flags.second, "parent flags " << flags.first);
  }

  // An invalid tracestate is dropped, the parent kept.
  TraceHeaders bad_state = t.Continue(parent + "tracestate=Not Valid");
  CHECK(bad_state.traceparent.substr(3, 32) == trace);
  CHECK_FALSE(bad_state.tracestate.has_value());

  // No parent, or an invalid one: a new sampled trace.
  for (const std::optional<std::string>& context :
       {std::optional<std::string>(), std::optional<std::string>("no=context"),
        std::optional<std::string>("traceparent=00-" + std::string(32, '0') +
                                   "-b7ad6b7169203331-01"),
        std::optional<std::string>("traceparent=00-" + trace + "-0000000000000000-01"),
        std::optional<std::string>("traceparent=ff-" + trace + "-b7ad6b7169203331-01"),
        std::optional<std::string>("traceparent=00-" + trace + "-B7AD6B7169203331-01")}) {
    TraceHeaders root = t.Continue(context);
    CHECK(std::regex_match(root.traceparent, shape));
    CHECK(root.traceparent.substr(3, 32) != trace);
    CHECK(root.traceparent.substr(53) == "03");
  }
}

}  // namespace
