// SigV4 against AWS's published test suite ("get-vanilla": the canonical request, the string
// to sign and the signature), and the DynamoDB endpoint parser.
#include <doctest/doctest.h>

#include "consumer/dynamo_client.h"
#include "consumer/sigv4.h"

namespace walrelay::consumer {
namespace {

TEST_CASE("SignV4: AWS's get-vanilla test vector, step by step") {
  SigV4Request request;
  request.method = "GET";
  request.path = "/";
  request.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  const AwsCredentials credentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  const SigV4Result r = SignV4(request, credentials, "us-east-1", "service", "20150830T123600Z");
  CHECK(r.canonical_request ==
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(r.string_to_sign ==
        "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  CHECK(r.signature == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  CHECK(r.authorization ==
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=host;x-amz-date, "
        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  // The secret is only a key: nothing returned holds it.
  for (const std::string* s : {&r.canonical_request, &r.string_to_sign, &r.authorization})
    CHECK(s->find("wJalrXUtnFEMI") == std::string::npos);
}

TEST_CASE("SignV4: header order and case do not change the signature; the body does") {
  const AwsCredentials credentials{"AKIDEXAMPLE", "secret", ""};
  SigV4Request a;
  a.headers = {{"X-Amz-Date", "20150830T123600Z"}, {"Host", "h"}, {"X-Amz-Target", "  a   b "}};
  a.payload = "{}";
  SigV4Request b = a;
  b.headers = {{"host", "h"}, {"x-amz-target", "a b"}, {"x-amz-date", "20150830T123600Z"}};
  const std::string sig_a = SignV4(a, credentials, "r", "dynamodb", "20150830T123600Z").signature;
  CHECK(sig_a == SignV4(b, credentials, "r", "dynamodb", "20150830T123600Z").signature);
  b.payload = "{ }";
  CHECK(sig_a != SignV4(b, credentials, "r", "dynamodb", "20150830T123600Z").signature);
}

TEST_CASE("ParseDynamoEndpoint: scheme, host and port; defaults by scheme; bad ones named") {
  auto local = ParseDynamoEndpoint("http://127.0.0.1:8000/");
  REQUIRE(local.ok());
  CHECK_FALSE(local->tls);
  CHECK(local->host == "127.0.0.1");
  CHECK(local->port == "8000");
  auto aws = ParseDynamoEndpoint("https://dynamodb.eu-west-1.amazonaws.com");
  REQUIRE(aws.ok());
  CHECK(aws->tls);
  CHECK(aws->port == "443");
  CHECK(ParseDynamoEndpoint("dynamodb.local:8000").status().code() == ErrorCode::kConfig);
  CHECK(ParseDynamoEndpoint("http://h:x").status().code() == ErrorCode::kConfig);
  CHECK(ParseDynamoEndpoint("http://h/path").status().code() == ErrorCode::kConfig);
}

}  // namespace
}  // namespace walrelay::consumer
