// libFuzzer target for Wal2JsonDecoder::Decode: arbitrary bytes in place of the wal2json
// messages a walsender streams.
//
// The input is split at '\n' and every line goes through one decoder into one reused
// DecodedMessage, as a replication stream does, so the decoder's commit-time cache and the
// storage reuse of `out` between calls are exercised too, and with a catalog column list, the
// filling of unchanged TOASTed values into updates. Besides crashes and sanitizer
// reports, it enforces the decoder's contract with the relay: a failure is a kDecode status
// whose message names the position (exit code 7 and "the message names the LSN" in
// docs/operations.md depend on that).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/lsn.h"
#include "decode/wal2json_decoder.h"

namespace {

void Fail(const std::string& what, std::string_view line) {
  std::fprintf(stderr, "wal2json_decoder_fuzz: %s\ninput line: %.*s\n", what.c_str(),
               static_cast<int>(line.size()), line.data());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // A catalog column list for every table, so updates go through the unchanged-TOAST fill.
  walrelay::DecoderOptions options;
  options.catalog.table_columns = [](std::string_view, std::string_view) {
    return std::optional<std::vector<walrelay::CatalogColumn>>(
        {{"id", "integer"}, {"big", "text"}, {"small", "integer"}, {"bin", "bytea"}});
  };
  walrelay::Wal2JsonDecoder decoder(options);
  walrelay::DecodedMessage out;
  // Positions vary per line so a stale one in a message would show.
  uint64_t position = 0x16B3748;
  size_t start = 0;
  while (start <= input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view line = input.substr(start, end - start);
    const walrelay::Lsn at(position);
    const walrelay::Status status = decoder.Decode(line, at, out);
    if (!status.ok()) {
      if (status.code() != walrelay::ErrorCode::kDecode)
        Fail("error of class " + std::string(walrelay::ErrorCodeName(status.code())) +
                 ", expected decode: " + status.message(),
             line);
      if (status.message().find(at.ToString()) == std::string::npos)
        Fail("error does not name LSN " + at.ToString() + ": " + status.message(), line);
    }
    position += 0x28;
    start = end + 1;
  }
  return 0;
}
