// Region and endpoint resolution for DynamoStore (see aws_region.h).
#include "consumer/aws_region.h"

namespace walrelay::consumer {

std::string RegionOfDynamoEndpoint(const std::string& endpoint) {
  const size_t scheme = endpoint.find("://");
  std::string host = endpoint.substr(scheme == std::string::npos ? 0 : scheme + 3);
  host = host.substr(0, host.find_first_of(":/"));
  const std::string prefix = "dynamodb.";
  if (host.rfind(prefix, 0) != 0) return "";
  for (const std::string suffix : {".amazonaws.com", ".amazonaws.com.cn"}) {
    if (host.size() <= prefix.size() + suffix.size() ||
        host.compare(host.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string region =
        host.substr(prefix.size(), host.size() - prefix.size() - suffix.size());
    // One label: "dynamodb.fips.us-east-1..." or any deeper name is not a plain region.
    if (region.find('.') == std::string::npos) return region;
  }
  return "";
}

DynamoLocation ResolveDynamoLocation(const std::string& option_region,
                                     const std::string& option_endpoint, const EnvLookup& env,
                                     const std::string& profile_region) {
  DynamoLocation out;
  for (const auto& [value, source] :
       {std::pair<std::string, const char*>{option_endpoint, "DynamoStoreOptions.endpoint"},
        {env("AWS_ENDPOINT_URL_DYNAMODB"), "AWS_ENDPOINT_URL_DYNAMODB"},
        {env("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"}}) {
    if (value.empty()) continue;
    out.endpoint = value;
    out.endpoint_source = source;
    break;
  }
  for (const std::string& candidate : {option_region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"),
                                       RegionOfDynamoEndpoint(out.endpoint), profile_region}) {
    if (candidate.empty()) continue;
    out.region = candidate;
    break;
  }
  if (out.region.empty()) out.region = "us-east-1";
  if (out.endpoint.empty()) {
    const bool china = out.region.rfind("cn-", 0) == 0;
    out.endpoint = "https://dynamodb." + out.region + ".amazonaws.com" + (china ? ".cn" : "");
    out.endpoint_source = "the region's endpoint";
  }
  return out;
}

}  // namespace walrelay::consumer
