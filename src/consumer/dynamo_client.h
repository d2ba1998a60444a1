// DynamoClient: the few DynamoDB calls DynamoStore makes, over DynamoDB's HTTP JSON protocol
// (POST /, X-Amz-Target: DynamoDB_20120810.<Operation>, application/x-amz-json-1.0), each
// signed with SigV4.
//
// Contract: one HTTP/1.1 connection, kept alive between calls and reopened when the server
// closed it; plain TCP for http:// endpoints, TLS with certificate and host-name checks for
// https://. Every call is bounded by the timeout (connect, send and reply each). A reply with
// an error status is not a failed call: Call returns it with `error_type` set (the part of
// __type after '#', e.g. "ConditionalCheckFailedException"), so the store decides. Throttling
// and 5xx replies are sent again with backoff within the timeout. Transport failures are
// Status::Connection. The secret key and session token never appear in a Status or a log line.
//
// Credentials come from a CredentialProvider, asked before each request (it caches them and
// fetches temporary ones again before they expire). A refusal of the credentials
// (ExpiredTokenException, UnrecognizedClientException) makes the provider fetch them anew and
// the request go once more; refused again, the call is Status::Connection, so the caller
// waits and retries instead of giving up. A refusal for the request's time (a signature
// expired or not yet current, RequestTimeTooSkewed) takes the server's clock from the reply's
// Date header, keeps the difference for every later request, and sends the request once more
// signed with the corrected time.
//
// Thread-safety: none; use one client per thread. The provider and the clock offset may be
// shared by the clients of several threads.
#pragma once

#include <rapidjson/document.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "consumer/aws_credentials.h"
#include "consumer/sigv4.h"

namespace walrelay::consumer {

struct DynamoEndpoint {
  bool tls = true;
  std::string host;
  std::string port;  // "443", "80" or as given
};

// Parses "http://host:port" / "https://host[:port]" (a trailing '/' allowed).
Result<DynamoEndpoint> ParseDynamoEndpoint(const std::string& url);

// The member `name` of a JSON object, or nullptr (also when `object` is no object). Looked up
// on a const value: RapidJSON's mixed const/non-const iterator comparison is ambiguous in
// C++20 for clang.
inline const rapidjson::Value* JsonMember(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject()) return nullptr;
  const auto it = object.FindMember(name);
  return it == object.MemberEnd() ? nullptr : &it->value;
}

// True for a refusal that means the request's time is too far from the server's clock.
bool IsClockSkewRefusal(const std::string& error_type, const std::string& error_message);

// True for a refusal of the credentials that fetching them again may cure.
bool IsCredentialRefusal(const std::string& error_type);

// The server's clock minus `local_now`, from an HTTP Date header ("Wed, 02 Dec 2026 03:16:14
// GMT"); nullopt when the header is missing or malformed.
std::optional<std::chrono::milliseconds> ClockOffsetFromDate(
    const std::string& date_header, std::chrono::system_clock::time_point local_now);

struct DynamoReply {
  int http_status = 0;
  std::string error_type;     // "" on success
  std::string error_message;  // the server's message, on error
  std::string date;           // the reply's Date header ("" when it had none)
  rapidjson::Document body;   // the reply's JSON (an empty object when it had none)
};

class DynamoClient {
 public:
  struct Options {
    DynamoEndpoint endpoint;
    std::string region;
    // Used as they are when there is no provider.
    AwsCredentials credentials;
    std::shared_ptr<CredentialProvider> credential_provider;
    // The server's clock minus this host's, in milliseconds, learned from a refusal for the
    // request's time; shared by a store's clients (a new one at 0 when null).
    std::shared_ptr<std::atomic<int64_t>> clock_offset_ms;
    std::chrono::milliseconds timeout{5000};
    std::function<void(const std::string&)> log;
  };
  explicit DynamoClient(Options options);
  ~DynamoClient();
  DynamoClient(const DynamoClient&) = delete;
  DynamoClient& operator=(const DynamoClient&) = delete;

  // Sends one operation with its JSON request.
  Result<DynamoReply> Call(const std::string& operation, const std::string& json);

  // "DynamoDB at host:port", for messages.
  std::string where() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace walrelay::consumer
