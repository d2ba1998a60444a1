// Status and Result<T>: explicit error values carried to where they can be handled.
//
// Every fallible function in walrelay returns one of these. A Status names a failure class
// (so callers can choose a policy and main() an exit code) and a message that already names
// the thing that is wrong: the config key, table, column, row id or LSN. Exceptions thrown by
// third-party libraries are converted at the call site. Messages must never contain secrets.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace walrelay {

enum class ErrorCode {
  kOk = 0,
  kConfig,        // bad or missing configuration value
  kConnection,    // cannot reach or lost PostgreSQL
  kProtocol,      // unexpected replication protocol message
  kDecode,        // wal2json output we cannot parse
  kTransform,     // a transform rejected a record
  kKafka,         // Kafka rejected a record or the producer failed
  kPrecondition,  // server-side setup is wrong (slot in another database, held elsewhere, ...)
  kInternal,
  // Setup problems each get their own class, so scripts can tell them apart by exit code.
  kWalLevel,               // wal_level is not logical
  kNoReplicationRole,      // the user lacks REPLICATION
  kTableMissing,           // an included table does not exist
  kSlotMissing,            // the slot does not exist and slot.create=false
  kSlotInvalidated,        // the slot's WAL is gone (wal_status lost)
  kSlotWrongPlugin,        // the slot uses another output plugin
  kAuthentication,         // PostgreSQL refused the login (password, pg_hba, unknown role/db)
  kSlotInUse,              // another process streams from the slot (a standby waits for it)
  kSlotGone,               // the slot this relay streamed from no longer exists
  kPublicationMissing,     // pgoutput: the publication does not exist and may not be created
  kPublicationLacksTable,  // pgoutput: the publication does not publish an included table
  kPublicationPrivilege,   // pgoutput: creating or changing the publication was refused
  // Kafka refusing the producer itself, not one record: retrying cannot cure these.
  kKafkaAuthentication,  // SASL authentication failed (mechanism, username, password)
  kKafkaTls,             // TLS handshake failed (untrusted certificate either way, bad key)
  // Exactly-once: another process initialised this relay's transactional.id and owns the slot.
  kKafkaFenced,
  // Exactly-once: the offsets topic holds a position of another server or slot.
  kOffsetMismatch,
  // The slot was invalidated because PostgreSQL removed WAL it needed (max_slot_wal_keep_size).
  kSlotWalRemoved,
};

const char* ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status Config(std::string m) { return {ErrorCode::kConfig, std::move(m)}; }
  static Status Connection(std::string m) { return {ErrorCode::kConnection, std::move(m)}; }
  static Status Protocol(std::string m) { return {ErrorCode::kProtocol, std::move(m)}; }
  static Status Decode(std::string m) { return {ErrorCode::kDecode, std::move(m)}; }
  static Status Transform(std::string m) { return {ErrorCode::kTransform, std::move(m)}; }
  static Status Kafka(std::string m) { return {ErrorCode::kKafka, std::move(m)}; }
  static Status Precondition(std::string m) { return {ErrorCode::kPrecondition, std::move(m)}; }
  static Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

  // True for failures that waiting and reconnecting can cure.
  bool IsRetriableConnection() const { return code_ == ErrorCode::kConnection; }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Returns a copy with `context` prepended ("context: message"), for adding the LSN, table
  // or key at the level that knows it.
  Status WithContext(const std::string& context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(data_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace walrelay

// Propagates a non-OK Status to the caller.
#define WALRELAY_RETURN_IF_ERROR(expr) \
  do {                                 \
    ::walrelay::Status _st = (expr);   \
    if (!_st.ok()) return _st;         \
  } while (0)
