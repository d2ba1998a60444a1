// decoder_compare_bench: walrelay's decoding cost for wal2json and for pgoutput on the same
// captured workload (tests/data/decoder_parity_*.tsv, one SQL workload read through both
// plugins). Prints rows/s and MB/s of payload for each plugin, for the whole workload (every
// message: begins, commits, rows of all column types, TOASTed values, messages) and for its
// outbox inserts alone, fastest of several rounds.
//
//   build/bench/decoder_compare_bench [wal2json.tsv pgoutput.tsv] [rounds]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "decode/pgoutput_decoder.h"
#include "decode/wal2json_decoder.h"

namespace {

struct Message {
  walrelay::Lsn lsn;
  std::string payload;
};

std::vector<Message> Load(const std::string& path, bool hex) {
  std::ifstream in(path);
  std::vector<Message> out;
  for (std::string line; std::getline(in, line);) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    auto lsn = walrelay::Lsn::Parse(line.substr(0, tab));
    std::string payload = line.substr(tab + 1);
    if (hex) {
      std::string bytes;
      for (size_t i = 0; i + 1 < payload.size(); i += 2)
        bytes += static_cast<char>(std::stoi(payload.substr(i, 2), nullptr, 16));
      payload = std::move(bytes);
    }
    out.push_back({lsn.ok() ? *lsn : walrelay::Lsn(1), std::move(payload)});
  }
  return out;
}

struct Result {
  double rows_per_s = 0;
  double mb_per_s = 0;
};

// Decodes `timed` over and over (after `setup` once), fastest of `rounds`.
Result Measure(walrelay::Decoder& decoder, const std::vector<Message>& setup,
               const std::vector<Message>& timed, int rounds) {
  for (const auto& m : setup) {
    if (!decoder.Decode(m.payload, m.lsn).ok()) std::exit(1);
    while (decoder.Next()) {
    }
  }
  size_t bytes = 0;
  for (const auto& m : timed) bytes += m.payload.size();
  const size_t passes = std::max<size_t>(1, 400000 / timed.size());
  Result best;
  for (int round = 0; round < rounds; ++round) {
    size_t rows = 0;
    const auto start = std::chrono::steady_clock::now();
    for (size_t pass = 0; pass < passes; ++pass) {
      for (const auto& m : timed) {
        if (!decoder.Decode(m.payload, m.lsn).ok()) {
          std::fprintf(stderr, "a message at %s does not decode\n", m.lsn.ToString().c_str());
          std::exit(1);
        }
        while (const walrelay::DecodedMessage* d = decoder.Next())
          rows += d->kind == walrelay::MessageKind::kChange;
      }
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rows / s > best.rows_per_s) best = {rows / s, bytes * passes / s / 1e6};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string data = std::string(WALRELAY_SOURCE_DIR) + "/tests/data/";
  auto wal2json = Load(argc > 2 ? argv[1] : data + "decoder_parity_wal2json.tsv", false);
  // wal2json writes invalid JSON for a type name that needs quoting (docs/architecture.md);
  // the workload has one such row, which the wal2json path cannot decode at all.
  {
    walrelay::Wal2JsonDecoder probe;
    std::erase_if(wal2json, [&](const Message& m) { return !probe.Decode(m.payload, m.lsn).ok(); });
  }
  const auto pgoutput = Load(argc > 2 ? argv[2] : data + "decoder_parity_pgoutput.tsv", true);
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  if (wal2json.empty() || pgoutput.empty()) {
    std::fprintf(stderr, "no captured streams\n");
    return 2;
  }

  // The outbox inserts alone: wal2json's "I" messages of table outbox; pgoutput's Inserts
  // of the outbox relation, whose Relation message is decoded once beforehand.
  std::vector<Message> wal2json_outbox, pgoutput_setup, pgoutput_outbox;
  for (const auto& m : wal2json)
    if (m.payload.starts_with("{\"action\":\"I\"") &&
        m.payload.find("\"table\":\"outbox\"") != std::string::npos)
      wal2json_outbox.push_back(m);
  std::string outbox_id;
  for (const auto& m : pgoutput) {
    if (m.payload[0] == 'R' && m.payload.find(std::string("public\0outbox\0", 14)) == 5) {
      outbox_id = m.payload.substr(1, 4);
      pgoutput_setup = {m};
    }
  }
  for (const auto& m : pgoutput)
    if (m.payload[0] == 'I' && m.payload.substr(1, 4) == outbox_id) pgoutput_outbox.push_back(m);

  walrelay::Wal2JsonDecoder w;
  walrelay::PgOutputDecoder p;
  const Result w_all = Measure(w, {}, wal2json, rounds);
  const Result p_all = Measure(p, {}, pgoutput, rounds);
  const Result w_outbox = Measure(w, {}, wal2json_outbox, rounds);
  const Result p_outbox = Measure(p, pgoutput_setup, pgoutput_outbox, rounds);
  std::printf("workload              plugin     rows/s        MB/s\n");
  auto line = [](const char* workload, size_t messages, const char* plugin, const Result& r) {
    std::printf("%-15s (%3zu)   %-8s  %10.0f  %8.1f\n", workload, messages, plugin, r.rows_per_s,
                r.mb_per_s);
  };
  line("captured, all", wal2json.size(), "wal2json", w_all);
  line("captured, all", pgoutput.size(), "pgoutput", p_all);
  line("outbox inserts", wal2json_outbox.size(), "wal2json", w_outbox);
  line("outbox inserts", pgoutput_outbox.size(), "pgoutput", p_outbox);
  return 0;
}
