// libFuzzer target for PgOutputDecoder: arbitrary bytes in place of the pgoutput messages a
// walsender streams.
//
// The input is a sequence of messages, each preceded by its length as 4 big-endian bytes (a
// length past the end takes what is left), as fuzz/corpus/pgoutput/ holds real streams
// (tests/data/capture_decoder_streams.sh). All go through one decoder, so its Relation and
// Type caches and the storage reuse between messages are exercised; a table filter refuses
// tables whose name starts with 'n', so excluded rows are too. Besides crashes and sanitizer
// reports, it enforces the decoder's contract with the relay: a failure is a kDecode status
// whose message names the position, and a failed Decode yields no message. Each logical
// decoding message's content also goes through DecodeMessageContent (the outbox without a
// table), whose contract is checked the same way: a kTransform error naming the LSN and no
// columns, or columns with distinct names.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/lsn.h"
#include "decode/pgoutput_decoder.h"
#include "transform/message_event.h"

namespace {

void Fail(const std::string& what, std::string_view message) {
  std::fprintf(stderr, "pgoutput_decoder_fuzz: %s\nmessage of %zu bytes\n", what.c_str(),
               message.size());
  std::abort();
}

size_t CheckMessageContent(const walrelay::LogicalMessage& message) {
  walrelay::RowChange row;
  const walrelay::Status status = walrelay::DecodeMessageContent(message, 7, 0, true, row);
  if (!status.ok()) {
    if (status.code() != walrelay::ErrorCode::kTransform)
      Fail("content error of class " + std::string(walrelay::ErrorCodeName(status.code())),
           message.content);
    if (status.message().find(message.lsn.ToString()) == std::string::npos)
      Fail("content error does not name the LSN: " + status.message(), message.content);
    if (!row.columns.empty()) Fail("failed content decoding left columns", message.content);
    return 0;
  }
  size_t bytes = 0;
  for (size_t i = 0; i < row.columns.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (row.columns[i].name == row.columns[j].name) Fail("repeated column name", message.content);
    bytes += row.columns[i].text.size();
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  walrelay::PgOutputDecoder decoder;
  decoder.SetTableFilter(
      [](std::string_view, std::string_view table) { return !table.starts_with('n'); });
  // Positions vary per message so a stale one in an error would show.
  uint64_t position = 0x16B3748;
  size_t seen = 0;
  while (input.size() >= 4) {
    size_t length = 0;
    for (int i = 0; i < 4; ++i) length = (length << 8) | static_cast<uint8_t>(input[i]);
    input.remove_prefix(4);
    const std::string_view message = input.substr(0, length);
    input.remove_prefix(message.size());
    const walrelay::Lsn at(position);
    const walrelay::Status status = decoder.Decode(message, at);
    if (!status.ok()) {
      if (status.code() != walrelay::ErrorCode::kDecode)
        Fail("error of class " + std::string(walrelay::ErrorCodeName(status.code())) +
                 ", expected decode: " + status.message(),
             message);
      if (status.message().find(at.ToString()) == std::string::npos)
        Fail("error does not name LSN " + at.ToString() + ": " + status.message(), message);
      if (decoder.Next() != nullptr) Fail("a failed Decode yielded a message", message);
    }
    // Read everything handed out, so the sanitizers see any stale or dangling storage.
    while (const walrelay::DecodedMessage* m = decoder.Next()) {
      for (const auto* columns : {&m->change.columns, &m->change.identity})
        for (const auto& c : *columns) seen += c.name.size() + c.type.size() + c.text.size();
      seen += m->change.schema.size() + m->change.table.size() + m->message.content.size();
      if (m->kind == walrelay::MessageKind::kMessage) seen += CheckMessageContent(m->message);
    }
    position += 0x28;
  }
  if (seen == SIZE_MAX) std::abort();  // keeps `seen` alive
  return 0;
}
