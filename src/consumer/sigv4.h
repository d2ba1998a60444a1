// AWS Signature Version 4 for one HTTP request, as the DynamoDB store signs its calls.
//
// Contract: SignV4 is a pure function of the request, the credentials, the scope and the
// time stamp; it never logs and keeps no state. The canonical request and the string to sign
// are returned beside the signature so tests can compare every step with AWS's published test
// suite. Header names are lower-cased and their values trimmed (inner runs of spaces folded)
// as the specification says; the caller passes the query already canonical ("" for
// DynamoDB, whose calls are POSTs to "/"). The secret key appears only in the HMAC key chain,
// never in a returned string.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace walrelay::consumer {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials (STS); signed as x-amz-security-token
};

struct SigV4Request {
  std::string method = "POST";
  std::string path = "/";
  std::string canonical_query;
  // Every header to sign, host and x-amz-date included, in any order and case.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload;
};

struct SigV4Result {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // hex
  std::string authorization;  // the Authorization header's value
};

// `amz_date` is the request's X-Amz-Date, "YYYYMMDDTHHMMSSZ" (UTC); its first eight characters
// are the scope's date.
SigV4Result SignV4(const SigV4Request& request, const AwsCredentials& credentials,
                   const std::string& region, const std::string& service,
                   const std::string& amz_date);

// SHA-256 of `data` in lower-case hex.
std::string Sha256Hex(const std::string& data);

}  // namespace walrelay::consumer
