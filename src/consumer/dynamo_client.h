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
// Thread-safety: none; use one client per thread.
#pragma once

#include <rapidjson/document.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
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

struct DynamoReply {
  int http_status = 0;
  std::string error_type;     // "" on success
  std::string error_message;  // the server's message, on error
  rapidjson::Document body;   // the reply's JSON (an empty object when it had none)
};

class DynamoClient {
 public:
  struct Options {
    DynamoEndpoint endpoint;
    std::string region;
    AwsCredentials credentials;
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
