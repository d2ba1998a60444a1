// Which region DynamoStore signs for and which endpoint it calls, from the options, the
// environment and the shared config file, in AWS's order.
//
//   region:   DynamoStoreOptions.region, $AWS_REGION, $AWS_DEFAULT_REGION, the region in a
//             configured endpoint's host (dynamodb.<region>.amazonaws.com[.cn]), the profile's
//             `region` in the config file, "us-east-1"
//   endpoint: DynamoStoreOptions.endpoint, $AWS_ENDPOINT_URL_DYNAMODB, $AWS_ENDPOINT_URL,
//             https://dynamodb.<region>.amazonaws.com (.amazonaws.com.cn for cn-* regions)
//
// Contract: a pure function of its inputs; it checks nothing (the endpoint is parsed where it
// is used).
#pragma once

#include <string>

#include "consumer/aws_credentials.h"

namespace walrelay::consumer {

struct DynamoLocation {
  std::string region;
  std::string endpoint;
  std::string endpoint_source;  // "DynamoStoreOptions.endpoint", "AWS_ENDPOINT_URL", ...
};

// The region in an AWS endpoint URL's host "dynamodb.<region>.amazonaws.com" (or .com.cn),
// "" for any other host.
std::string RegionOfDynamoEndpoint(const std::string& endpoint);

// Resolves the region and the endpoint; `profile_region` is the config file's `region` for
// the active profile ("" when none).
DynamoLocation ResolveDynamoLocation(const std::string& option_region,
                                     const std::string& option_endpoint, const EnvLookup& env,
                                     const std::string& profile_region);

}  // namespace walrelay::consumer
