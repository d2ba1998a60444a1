#include "delivery/topic_name.h"

#include <string>

namespace walrelay {
namespace {

// Kafka's own limit (Topic.MAX_NAME_LENGTH): its log directories are named topic-partition.
constexpr size_t kMaxTopicNameLength = 249;

bool IsLegalChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

std::string Shown(std::string_view topic) {
  std::string out(topic.substr(0, 100));
  for (auto& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return topic.size() > 100 ? out + "..." : out;
}

}  // namespace

Status CheckTopicName(std::string_view topic) {
  std::string problem;
  if (topic.empty()) {
    problem = "it is empty";
  } else if (topic == "." || topic == "..") {
    problem = "'.' and '..' are not allowed as names";
  } else if (topic.size() > kMaxTopicNameLength) {
    problem = "it has " + std::to_string(topic.size()) + " characters, more than " +
              std::to_string(kMaxTopicNameLength);
  } else {
    for (size_t i = 0; i < topic.size(); ++i) {
      if (!IsLegalChar(topic[i])) {
        const unsigned char c = static_cast<unsigned char>(topic[i]);
        problem = "character " + std::to_string(i + 1) + " is " +
                  (c >= 0x20 && c <= 0x7e ? "'" + std::string(1, topic[i]) + "'"
                                          : "byte " + std::to_string(c));
        break;
      }
    }
  }
  if (problem.empty()) return Status::Ok();
  return Status::Kafka("Kafka refuses the topic name '" + Shown(topic) + "': " + problem +
                       " (only ASCII letters, digits, '.', '_' and '-', at most 249 characters)");
}

}  // namespace walrelay
