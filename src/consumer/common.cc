// The small value types of include/walrelay/consumer/ (handler.h, store.h) and
// HandlerContext's SQL helper.
#include <openssl/evp.h>

#include <algorithm>
#include <exception>

#include "consumer/internal.h"
#include "consumer/pg_exec.h"
#include "walrelay/consumer.h"

namespace walrelay::consumer {

const MessageHeader* Message::FindHeader(std::string_view name) const {
  for (const auto& h : headers)
    if (h.key == name) return &h;
  return nullptr;
}

HandlerResult HandlerResult::Done(std::string result) {
  HandlerResult r;
  r.kind = Kind::kDone;
  r.result = std::move(result);
  return r;
}

HandlerResult HandlerResult::Retry(std::string error_class, std::string message) {
  HandlerResult r;
  r.kind = Kind::kRetry;
  r.error_class = std::move(error_class);
  r.message = std::move(message);
  return r;
}

HandlerResult HandlerResult::Reject(std::string error_class, std::string message) {
  HandlerResult r = Retry(std::move(error_class), std::move(message));
  r.kind = Kind::kReject;
  return r;
}

Result<SqlRows> HandlerContext::Exec(const std::string& sql, const SqlParams& params) const {
  if (conn_ == nullptr)
    return Status::Precondition("HandlerContext::Exec: this store gives handlers no connection");
  if (prelude_ != nullptr) return prelude_->Exec(sql, params);
  auto res = ExecPg(conn_, sql, params);
  if (!res.ok()) return res.status();
  return RowsOf(res->get());
}

SqlRows RowsOf(PGresult* r) {
  SqlRows out;
  for (int i = 0; i < PQntuples(r); ++i) {
    std::vector<std::optional<std::string>> row;
    for (int j = 0; j < PQnfields(r); ++j) {
      if (PQgetisnull(r, i, j)) row.emplace_back(std::nullopt);
      else row.emplace_back(std::string(PQgetvalue(r, i, j), PQgetlength(r, i, j)));
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

HandlerResult HandlerContext::SqlFailure(const Status& status) {
  const std::string code = SqlStateOf(status);
  if (code.empty()) return HandlerResult::Retry("sql", status.message());
  // The message starts with "sqlstate:<code>: " (16 characters); keep the server's words.
  return HandlerResult::Retry("sqlstate:" + code, status.message().substr(16));
}

std::string PayloadHash(const Message& message) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  const std::string& value = message.value ? *message.value : std::string();
  if (EVP_Digest(value.data(), value.size(), digest, &size, EVP_sha256(), nullptr) != 1) return "";
  static const char* hex = "0123456789abcdef";
  std::string out = message.value ? "" : "null:";
  for (unsigned int i = 0; i < size; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

const char* ClaimStateName(Claim::State state) {
  switch (state) {
    case Claim::State::kAcquired: return "ACQUIRED";
    case Claim::State::kTakenOver: return "TAKEN_OVER";
    case Claim::State::kDuplicate: return "DUPLICATE";
    case Claim::State::kFailed: return "FAILED";
    case Claim::State::kConflict: return "CONFLICT";
  }
  return "?";
}

const char* RecordOutcomeName(RecordOutcome::Kind kind) {
  switch (kind) {
    case RecordOutcome::Kind::kCompleted: return "completed";
    case RecordOutcome::Kind::kDuplicate: return "duplicate";
    case RecordOutcome::Kind::kDeadLettered: return "dead-lettered";
    case RecordOutcome::Kind::kAlreadyFailed: return "already-failed";
  }
  return "?";
}

HandlerResult CallHandler(const Handler& handler, HandlerContext& context) {
  try {
    return handler(context);
  } catch (const std::exception& e) {
    return HandlerResult::Retry("exception", e.what());
  } catch (...) {
    return HandlerResult::Retry("exception", "unknown exception");
  }
}

Message MessageFromKafka(const rd_kafka_message_t* m) {
  Message out;
  out.topic = rd_kafka_topic_name(m->rkt);
  out.partition = m->partition;
  out.offset = m->offset;
  if (m->key != nullptr) out.key.emplace(static_cast<const char*>(m->key), m->key_len);
  if (m->payload != nullptr) out.value.emplace(static_cast<const char*>(m->payload), m->len);
  rd_kafka_headers_t* hdrs = nullptr;  // owned by the message
  if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name = nullptr;
    const void* value = nullptr;
    size_t size = 0;
    for (size_t i = 0;
         rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
         ++i) {
      MessageHeader h;
      h.key = name;
      if (value != nullptr) h.value.emplace(static_cast<const char*>(value), size);
      out.headers.push_back(std::move(h));
    }
  }
  rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
  const int64_t ts = rd_kafka_message_timestamp(m, &type);
  out.timestamp_ms = type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? -1 : ts;
  return out;
}

Result<std::vector<Claim>> IdempotencyStore::AcquireBatch(const std::string& consumer,
                                                          const std::vector<BatchRecord>& records,
                                                          const std::string& owner,
                                                          std::chrono::milliseconds lease) {
  std::vector<Claim> claims;
  claims.reserve(records.size());
  for (const BatchRecord& r : records) {
    auto c = Acquire(consumer, r.key, owner, lease, *r.message);
    if (!c.ok()) return c.status();
    claims.push_back(std::move(c).value());
  }
  return claims;
}

Result<std::vector<RunOutcome>> IdempotencyStore::RunBatch(const std::string& consumer,
                                                           const std::vector<BatchRecord>& records,
                                                           const std::string& owner,
                                                           std::chrono::milliseconds completed_ttl,
                                                           const Handler& handler) {
  std::vector<RunOutcome> out;
  for (size_t i = 0; i < records.size(); ++i) {
    const BatchRecord& r = records[i];
    auto run = Run(consumer, r.key, owner, completed_ttl, *r.message, r.claim.attempts, handler);
    // What is known so far stands; the caller claims the rest again.
    if (!run.ok()) return out.empty() ? Result<std::vector<RunOutcome>>(run.status()) : out;
    out.push_back(std::move(run).value());
    if (out.back().kind == RunOutcome::Kind::kFailed) {
      for (size_t j = i + 1; j < records.size(); ++j)
        (void)Unclaim(consumer, records[j].key, owner);
      break;
    }
  }
  return out;
}

Status IdempotencyStore::Unclaim(const std::string&, const std::string&, const std::string&) {
  return Status::Ok();
}

Result<BatchRun> IdempotencyStore::ClaimAndRunBatch(
    const std::string& consumer, const std::vector<BatchRecord>& records, const std::string& owner,
    std::chrono::milliseconds lease, std::chrono::milliseconds completed_ttl,
    const BatchAccept& accept, const Handler& handler) {
  auto claims = AcquireBatch(consumer, records, owner, lease);
  if (!claims.ok()) return claims.status();
  auto granted = [](const Claim& c) {
    return c.state == Claim::State::kAcquired || c.state == Claim::State::kTakenOver;
  };
  BatchRun out;
  std::vector<BatchRecord> runnable;
  size_t cut = 0;
  for (; cut < records.size(); ++cut) {
    const Claim& c = (*claims)[cut];
    if (!accept(records[cut], c)) break;
    if (!granted(c)) continue;
    runnable.push_back(records[cut]);
    runnable.back().claim = c;
  }
  out.claims.assign(claims->begin(), claims->begin() + static_cast<std::ptrdiff_t>(
                                                           std::min(cut + 1, records.size())));
  // The claims after the refused record are not used.
  for (size_t j = cut + 1; j < records.size(); ++j)
    if (granted((*claims)[j])) (void)Unclaim(consumer, records[j].key, owner);
  if (runnable.empty()) return out;
  auto run = RunBatch(consumer, runnable, owner, completed_ttl, handler);
  if (!run.ok()) return run.status();
  out.outcomes = std::move(run).value();
  out.one_by_one = out.outcomes.empty();
  return out;
}

Result<int64_t> Cleanup(IdempotencyStore& store, int batch_size) {
  if (batch_size < 1)
    return Status::Config("cleanup batch size must be at least 1, got " +
                          std::to_string(batch_size));
  int64_t total = 0;
  while (true) {
    auto n = store.CleanupBatch(batch_size);
    if (!n.ok()) return n.status();
    total += *n;
    if (*n < batch_size) return total;
  }
}

}  // namespace walrelay::consumer
