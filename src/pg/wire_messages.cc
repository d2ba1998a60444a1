#include "pg/wire_messages.h"

namespace walrelay {
namespace {

uint64_t ReadBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

void AppendBigEndian64(std::string& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (i * 8)) & 0xff));
}

}  // namespace

Result<XLogData> ParseXLogData(std::string_view m) {
  constexpr size_t kHeader = 1 + 8 + 8 + 8;
  if (m.size() < kHeader || m[0] != 'w') {
    return Status::Protocol("malformed XLogData message of " + std::to_string(m.size()) + " bytes");
  }
  XLogData out;
  out.data_start = Lsn(ReadBigEndian64(m.data() + 1));
  out.wal_end = Lsn(ReadBigEndian64(m.data() + 9));
  out.payload = m.substr(kHeader);
  return out;
}

Result<PrimaryKeepalive> ParseKeepalive(std::string_view m) {
  constexpr size_t kSize = 1 + 8 + 8 + 1;
  if (m.size() < kSize || m[0] != 'k') {
    return Status::Protocol("malformed keepalive message of " + std::to_string(m.size()) +
                            " bytes");
  }
  PrimaryKeepalive out;
  out.wal_end = Lsn(ReadBigEndian64(m.data() + 1));
  out.reply_requested = m[17] != 0;
  return out;
}

std::string EncodeStandbyStatus(Lsn write, Lsn flush, Lsn apply, int64_t client_time_pg_micros,
                                bool reply_requested) {
  std::string out;
  out.reserve(34);
  out.push_back('r');
  AppendBigEndian64(out, write.value());
  AppendBigEndian64(out, flush.value());
  AppendBigEndian64(out, apply.value());
  AppendBigEndian64(out, static_cast<uint64_t>(client_time_pg_micros));
  out.push_back(reply_requested ? 1 : 0);
  return out;
}

}  // namespace walrelay
