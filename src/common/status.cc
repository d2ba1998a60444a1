#include "common/status.h"

namespace walrelay {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kConfig: return "config error";
    case ErrorCode::kConnection: return "connection error";
    case ErrorCode::kProtocol: return "protocol error";
    case ErrorCode::kDecode: return "decode error";
    case ErrorCode::kTransform: return "transform error";
    case ErrorCode::kKafka: return "kafka error";
    case ErrorCode::kPrecondition: return "setup error";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kWalLevel:
    case ErrorCode::kNoReplicationRole:
    case ErrorCode::kTableMissing:
    case ErrorCode::kSlotMissing:
    case ErrorCode::kSlotInvalidated:
    case ErrorCode::kSlotWrongPlugin:
    case ErrorCode::kSlotInUse:
    case ErrorCode::kPublicationMissing:
    case ErrorCode::kPublicationLacksTable:
    case ErrorCode::kPublicationPrivilege: return "setup error";
    case ErrorCode::kSlotGone: return "slot lost";
    case ErrorCode::kAuthentication: return "authentication error";
    case ErrorCode::kKafkaAuthentication: return "kafka authentication error";
    case ErrorCode::kKafkaTls: return "kafka TLS error";
    case ErrorCode::kKafkaFenced: return "fenced";
    case ErrorCode::kOffsetMismatch: return "stored offset mismatch";
    case ErrorCode::kSlotWalRemoved: return "slot WAL removed";
  }
  return "error";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(ErrorCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace walrelay
