#include "delivery/source_offsets.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace walrelay {

std::string SourceIdentity::ToString() const {
  return "system " + system_id + " timeline " + std::to_string(timeline);
}

namespace {

constexpr const char* kLsn = "lsn";
constexpr const char* kLsnCommit = "lsn_commit";
constexpr const char* kTxId = "txId";
constexpr const char* kTsUsec = "ts_usec";
constexpr const char* kSystemIdentifier = "walrelay_system_identifier";
constexpr const char* kTimeline = "walrelay_timeline";
constexpr const char* kSlot = "walrelay_slot";
constexpr const char* kTxnXid = "walrelay_txn_xid";
constexpr const char* kTxnFirstLsn = "walrelay_txn_first_lsn";
constexpr const char* kTxnLsn = "walrelay_txn_lsn";
constexpr const char* kTxnAtLsn = "walrelay_txn_at_lsn";

std::string ToJson(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

// Debezium writes LSNs as Java longs: the 64-bit position as a (non-negative) number.
Result<Lsn> ReadLsn(const rapidjson::Value& object, const char* name) {
  const auto it = object.FindMember(name);
  if (it == object.MemberEnd()) return Status::Decode(std::string("offset lacks \"") + name + "\"");
  if (!it->value.IsUint64())
    return Status::Decode(std::string("offset member \"") + name +
                          "\" is not a non-negative integer");
  return Lsn(it->value.GetUint64());
}

Result<int64_t> ReadOptionalInt(const rapidjson::Value& object, const char* name) {
  const auto it = object.FindMember(name);
  if (it == object.MemberEnd() || it->value.IsNull()) return int64_t{0};
  if (!it->value.IsInt64())
    return Status::Decode(std::string("offset member \"") + name + "\" is not an integer");
  return it->value.GetInt64();
}

}  // namespace

std::string SourceOffsetKey(const std::string& connector_name, const std::string& topic_prefix) {
  rapidjson::Document key(rapidjson::kArrayType);
  auto& alloc = key.GetAllocator();
  rapidjson::Value partition(rapidjson::kObjectType);
  partition.AddMember("server", rapidjson::Value(topic_prefix.c_str(), alloc), alloc);
  key.PushBack(rapidjson::Value(connector_name.c_str(), alloc), alloc);
  key.PushBack(partition, alloc);
  return ToJson(key);
}

std::string SerializeSourceOffset(const SourceOffset& offset) {
  rapidjson::Document value(rapidjson::kObjectType);
  auto& alloc = value.GetAllocator();
  value.AddMember(rapidjson::StringRef(kLsn), offset.lsn.value(), alloc);
  value.AddMember(rapidjson::StringRef(kLsnCommit), offset.lsn_commit.value(), alloc);
  value.AddMember(rapidjson::StringRef(kTxId), offset.tx_id, alloc);
  value.AddMember(rapidjson::StringRef(kTsUsec), offset.ts_usec, alloc);
  value.AddMember(rapidjson::StringRef(kSystemIdentifier),
                  rapidjson::Value(offset.system_identifier.c_str(), alloc), alloc);
  value.AddMember(rapidjson::StringRef(kTimeline), offset.timeline, alloc);
  value.AddMember(rapidjson::StringRef(kSlot), rapidjson::Value(offset.slot.c_str(), alloc), alloc);
  if (offset.inside) {
    value.AddMember(rapidjson::StringRef(kTxnXid), offset.inside->xid, alloc);
    value.AddMember(rapidjson::StringRef(kTxnFirstLsn), offset.inside->first_lsn.value(), alloc);
    value.AddMember(rapidjson::StringRef(kTxnLsn), offset.inside->lsn.value(), alloc);
    value.AddMember(rapidjson::StringRef(kTxnAtLsn), offset.inside->at_lsn, alloc);
  }
  return ToJson(value);
}

Result<SourceOffset> ParseSourceOffset(std::string_view json) {
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  if (doc.HasParseError())
    return Status::Decode(std::string("offset is not JSON: ") +
                          rapidjson::GetParseError_En(doc.GetParseError()) + " at character " +
                          std::to_string(doc.GetErrorOffset()));
  if (!doc.IsObject()) return Status::Decode("offset is not a JSON object");
  SourceOffset offset;
  auto lsn = ReadLsn(doc, kLsn);
  if (!lsn.ok()) return lsn.status();
  offset.lsn = *lsn;
  auto lsn_commit = ReadLsn(doc, kLsnCommit);
  if (!lsn_commit.ok()) return lsn_commit.status();
  offset.lsn_commit = *lsn_commit;
  auto tx_id = ReadOptionalInt(doc, kTxId);
  if (!tx_id.ok()) return tx_id.status();
  offset.tx_id = *tx_id;
  auto ts_usec = ReadOptionalInt(doc, kTsUsec);
  if (!ts_usec.ok()) return ts_usec.status();
  offset.ts_usec = *ts_usec;
  if (const auto it = doc.FindMember(kSystemIdentifier); it != doc.MemberEnd()) {
    if (!it->value.IsString())
      return Status::Decode(std::string("offset member \"") + kSystemIdentifier +
                            "\" is not a string");
    offset.system_identifier = it->value.GetString();
  }
  if (const auto it = doc.FindMember(kTimeline); it != doc.MemberEnd()) {
    if (!it->value.IsUint())
      return Status::Decode(std::string("offset member \"") + kTimeline +
                            "\" is not a timeline number");
    offset.timeline = it->value.GetUint();
  }
  if (const auto it = doc.FindMember(kSlot); it != doc.MemberEnd()) {
    if (!it->value.IsString())
      return Status::Decode(std::string("offset member \"") + kSlot + "\" is not a string");
    offset.slot = it->value.GetString();
  }
  // A position inside a source transaction: all four members, or none.
  const int inside_members = doc.HasMember(kTxnXid) + doc.HasMember(kTxnFirstLsn) +
                             doc.HasMember(kTxnLsn) + doc.HasMember(kTxnAtLsn);
  if (inside_members == 0) return offset;
  if (inside_members != 4)
    return Status::Decode(std::string("offset has only some of \"") + kTxnXid + "\", \"" +
                          kTxnFirstLsn + "\", \"" + kTxnLsn + "\" and \"" + kTxnAtLsn + "\"");
  InsideTransaction inside;
  const auto xid = doc.FindMember(kTxnXid);
  if (!xid->value.IsUint())
    return Status::Decode(std::string("offset member \"") + kTxnXid + "\" is not a transaction id");
  inside.xid = xid->value.GetUint();
  auto first_lsn = ReadLsn(doc, kTxnFirstLsn);
  if (!first_lsn.ok()) return first_lsn.status();
  inside.first_lsn = *first_lsn;
  auto change_lsn = ReadLsn(doc, kTxnLsn);
  if (!change_lsn.ok()) return change_lsn.status();
  inside.lsn = *change_lsn;
  const auto at_lsn = doc.FindMember(kTxnAtLsn);
  if (!at_lsn->value.IsUint64() || at_lsn->value.GetUint64() == 0)
    return Status::Decode(std::string("offset member \"") + kTxnAtLsn +
                          "\" is not a positive integer");
  inside.at_lsn = at_lsn->value.GetUint64();
  offset.inside = inside;
  return offset;
}

Status CheckOffsetOrigin(const SourceOffset& offset, const std::string& system_identifier,
                         const std::string& slot) {
  const std::string stored_server =
      offset.system_identifier.empty() ? "no system identifier" : offset.system_identifier;
  if (offset.system_identifier != system_identifier)
    return Status(ErrorCode::kOffsetMismatch,
                  "the stored offset (commit LSN " + offset.lsn_commit.ToString() +
                      ") is from server " + stored_server +
                      ", but this server's system identifier is " + system_identifier +
                      ": refusing to skip source transactions on another server's position");
  if (offset.slot != slot)
    return Status(ErrorCode::kOffsetMismatch,
                  "the stored offset (commit LSN " + offset.lsn_commit.ToString() +
                      ") is from slot '" + offset.slot + "', but this relay streams from slot '" +
                      slot + "': refusing to skip source transactions on another slot's position");
  return Status::Ok();
}

}  // namespace walrelay
