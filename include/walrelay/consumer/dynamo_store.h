// walrelay's idempotent consumer: the DynamoDB store, conditional writes on one table
// (docs/consumer.md, "DynamoDB store").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "walrelay/consumer/store.h"

namespace walrelay::consumer {

struct DynamoStoreOptions {
  // "http://host:port" or "https://host[:port]"; "" = $AWS_ENDPOINT_URL_DYNAMODB, then
  // $AWS_ENDPOINT_URL, then https://dynamodb.<region>.amazonaws.com (.com.cn for cn-*).
  std::string endpoint;
  // "" = $AWS_REGION, then $AWS_DEFAULT_REGION, then the region in the endpoint's host
  // (dynamodb.<region>.amazonaws.com), then the profile's `region` in the AWS config file,
  // then "us-east-1".
  std::string region;
  // "" = AWS's default credential chain, first configured source wins: $AWS_ACCESS_KEY_ID /
  // $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN; web identity ($AWS_WEB_IDENTITY_TOKEN_FILE and
  // $AWS_ROLE_ARN, at STS); profile $AWS_PROFILE's keys in the shared credentials and config
  // files; container credentials ($AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI);
  // the instance metadata service (IMDSv2) unless $AWS_EC2_METADATA_DISABLED=true
  // (docs/consumer.md, "Credentials, region and endpoint"). Temporary credentials are fetched
  // again before they expire, and when DynamoDB refuses them as expired or unknown. The secret
  // and the session token never appear in errors or logs.
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  // The keys table: hash key `consumer`, range key `idempotency_key` (both strings), with
  // DynamoDB's TTL on the number attribute `expires_at` (CreateSchema makes it so).
  std::string table = "walrelay_consumer_keys";
  // Connect and each call; also each HTTP call fetching credentials (the instance metadata
  // service's at most 1 s).
  std::chrono::milliseconds timeout = std::chrono::seconds(5);
  // A PENDING key (attempts, last error) is kept this long after its lease ends.
  std::chrono::milliseconds pending_retention = std::chrono::hours(24);
  // As RedisStoreOptions::renew_leases: the running handler's lease is renewed every third of
  // the lease, on a connection of its own.
  bool renew_leases = true;
  // Refused lease renewals (RENEW), throttled calls sent again (THROTTLED), credentials
  // refused or a refresh outlived (CREDENTIALS), a clock correction (CLOCK), one line each.
  std::function<void(const std::string&)> log;
};

// DynamoStore: one item per key in a DynamoDB table; every change is one conditional write
// (ConditionExpression), so each is atomic on the server. DynamoDB has no server clock in
// expressions: a lease is an attribute holding its end in milliseconds, compared in the
// condition with the time the request carries, so members' clocks must agree to well within a
// lease (the fencing token, larger for every claim, guards the completion whatever the clocks
// say). Expired keys are removed by DynamoDB's TTL and treated as absent before that. Like
// RedisStore, handlers get no transaction: a crash after the effect and before the COMPLETED
// mark repeats the effect.
class DynamoStore final : public IdempotencyStore {
 public:
  // Checks the options and the credentials, and opens the connection.
  static Result<std::unique_ptr<DynamoStore>> Connect(const DynamoStoreOptions& options);
  ~DynamoStore() override;

  // Creates the table (on-demand capacity) if missing, waits until it is ACTIVE and enables
  // TTL on `expires_at` where the server supports it.
  Status CreateSchema();

  Result<Claim> Acquire(const std::string& consumer, const std::string& key,
                        const std::string& owner, std::chrono::milliseconds lease,
                        const Message& message) override;
  Result<RunOutcome> Run(const std::string& consumer, const std::string& key,
                         const std::string& owner, std::chrono::milliseconds completed_ttl,
                         const Message& message, int attempt, const Handler& handler) override;
  Status Release(const std::string& consumer, const std::string& key, const std::string& owner,
                 const std::string& error) override;
  Result<bool> MarkFailed(const std::string& consumer, const std::string& key,
                          const std::string& owner, int64_t fencing_token, const std::string& error,
                          std::chrono::milliseconds failed_ttl) override;
  // DynamoDB's TTL deletes expired items: always 0.
  Result<int64_t> CleanupBatch(int batch_size) override;
  // The batch's claims on up to eight connections at once (one conditional write per key).
  Result<std::vector<Claim>> AcquireBatch(const std::string& consumer,
                                          const std::vector<BatchRecord>& records,
                                          const std::string& owner,
                                          std::chrono::milliseconds lease) override;
  Status Unclaim(const std::string& consumer, const std::string& key,
                 const std::string& owner) override;

 private:
  struct Impl;
  explicit DynamoStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace walrelay::consumer
