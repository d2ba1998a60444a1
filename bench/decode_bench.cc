// decode_bench: the cost of decoding one wal2json message, walrelay's per-row parsing work,
// apart from PostgreSQL and Kafka. Decodes a stream of wal2json format-version 2 messages
// (one per line; default: outbox rows shaped like bench/run.sh's) many times over and prints
// the fastest of several rounds in nanoseconds per message.
//
//   build/bench/decode_bench [messages.jsonl] [rounds]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "decode/wal2json_decoder.h"

namespace {

// An outbox row as wal2json streams it for bench/run.sh's payloads (about 300 bytes of JSON).
std::string OutboxRow(int seq) {
  const std::string note(220, static_cast<char>('a' + seq % 26));
  return R"j({"action":"I","xid":1001,"timestamp":"2026-11-21 21:00:00.123456+00","lsn":"0/15C4A28",)j"
         R"j("schema":"public","table":"outbox","columns":[)j"
         R"j({"name":"id","type":"uuid","value":"10278639-abd1-4065-b9cd-4b55da59b546"},)j"
         R"j({"name":"aggregatetype","type":"character varying(255)","value":"order"},)j"
         R"j({"name":"aggregateid","type":"character varying(255)","value":"order-)j" +
         std::to_string(seq) +
         R"j("},)j"
         R"j({"name":"type","type":"character varying(255)","value":"OrderCreated"},)j"
         R"j({"name":"payload","type":"jsonb","value":"{\"seq\": )j" +
         std::to_string(seq) + R"j(, \"note\": \")j" + note +
         R"j(\", \"amount\": 19.99, \"customer\": \"customer-7\"}"}],)j"
         R"j("pk":[{"name":"id","type":"uuid"}]})j";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> messages;
  if (argc > 1) {
    std::ifstream in(argv[1]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) messages.push_back(line);
    if (messages.empty()) {
      std::fprintf(stderr, "no messages in %s\n", argv[1]);
      return 2;
    }
  } else {
    for (int i = 0; i < 100; ++i) messages.push_back(OutboxRow(i));
  }
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 8;
  const size_t per_round = 200000;

  walrelay::Wal2JsonDecoder decoder;
  walrelay::DecodedMessage out;
  double best_ns = 0;
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < per_round; ++i) {
      if (!decoder.Decode(messages[i % messages.size()], walrelay::Lsn(1), out).ok()) {
        std::fprintf(stderr, "message %zu does not decode\n", i % messages.size());
        return 1;
      }
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
        per_round;
    if (round == 0 || ns < best_ns) best_ns = ns;
  }
  std::printf("%zu-message stream, %zu messages a round, fastest of %d rounds: %.0f ns/message\n",
              messages.size(), per_round, rounds, best_ns);
  return 0;
}
