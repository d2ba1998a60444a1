#include <doctest/doctest.h>

#include <string>

#include "delivery/topic_name.h"

using namespace walrelay;

TEST_CASE("topic names Kafka accepts pass") {
  for (const std::string& ok : std::initializer_list<std::string>{
           "outbox.event.Order", "a", "A-Z_a-z.0-9", "...", ".a", "__dlq", std::string(249, 'x')}) {
    Status st = CheckTopicName(ok);
    CHECK_MESSAGE(st.ok(), ok << ": " << st.ToString());
  }
}

TEST_CASE("topic names Kafka forbids are refused with the reason") {
  struct Case {
    std::string topic;
    const char* reason;
  };
  for (const Case& c :
       std::initializer_list<Case>{{"", "empty"},
                                   {".", "'.' and '..'"},
                                   {"..", "'.' and '..'"},
                                   {std::string(250, 'x'), "250 characters, more than 249"},
                                   {"outbox.event.Bad Name", "character 17 is ' '"},
                                   {"outbox/event", "character 7 is '/'"},
                                   {"a:b", "is ':'"},
                                   {"ünï", "character 1 is byte 195"},
                                   {std::string("a\nb"), "byte 10"},
                                   {std::string("a\0b", 3), "byte 0"}}) {
    Status st = CheckTopicName(c.topic);
    REQUIRE_MESSAGE(!st.ok(), c.topic);
    CHECK(st.code() == ErrorCode::kKafka);
    CHECK_MESSAGE(st.message().find(c.reason) != std::string::npos, st.message());
    CHECK(st.message().find("Kafka refuses the topic name") == 0);
  }
  // The name is shown printable and bounded.
  Status st = CheckTopicName(std::string(300, 'y') + "\n");
  CHECK(st.message().find(std::string(100, 'y') + "...'") != std::string::npos);
  CHECK(st.message().find(std::string(101, 'y')) == std::string::npos);
  CHECK(CheckTopicName("bad\x01name").message().find("'bad?name'") != std::string::npos);
}
