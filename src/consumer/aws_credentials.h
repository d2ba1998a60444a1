// Where DynamoStore's AWS credentials come from: AWS's default chain, in its order.
//
//   1. explicit options (DynamoStoreOptions access_key_id / secret_access_key / session_token)
//   2. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
//   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (AWS_ROLE_SESSION_NAME),
//      exchanged at STS (AssumeRoleWithWebIdentity; AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL or
//      https://sts.<region>.amazonaws.com)
//   4. the shared files: static keys of profile AWS_PROFILE ("default") in
//      AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials), then in AWS_CONFIG_FILE (~/.aws/config,
//      sections `[profile X]`)
//   5. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on http://169.254.170.2)
//      or AWS_CONTAINER_CREDENTIALS_FULL_URI, with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
//      AWS_CONTAINER_AUTHORIZATION_TOKEN as the Authorization header
//   6. the instance metadata service, IMDSv2 (AWS_EC2_METADATA_SERVICE_ENDPOINT, default
//      http://169.254.169.254; AWS_EC2_METADATA_DISABLED=true leaves it out)
//
// Contract: the first source that is configured is the one used (a half-configured source is a
// Status::Config naming the missing variable or key); only the instance metadata service is
// tried without any setting. Temporary credentials (those with an expiration) are fetched
// again before they expire: 5 minutes before, or at half their life when they live less than
// 10 minutes; a failed refresh keeps the current credentials while they are still valid. Every
// error names the source and the file, variable or URL involved, and never holds a key, a
// token or a secret.
//
// Thread-safety: the free functions are pure (given the lookups they are passed).
// CredentialProvider is shared by every DynamoClient of a store and safe to use from any
// thread: a fetch happens under its lock, so concurrent callers wait for one fetch.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "consumer/sigv4.h"

namespace walrelay::consumer {

// An environment variable's value, "" when unset. Tests pass a map instead of the process's
// environment.
using EnvLookup = std::function<std::string(const std::string& name)>;
// A whole file's text, or nullopt when it cannot be read.
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;

// The process's environment, read at each call (so rotated values are seen).
EnvLookup ProcessEnvironment();
// Reads files from the file system.
FileReader FileSystemReader();

// section -> key -> value, as in AWS's shared files: `[section]` lines, `key = value` lines,
// `#` and `;` comment lines; names and values trimmed, keys lower-cased.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;

// Parses the text of an AWS shared credentials or config file.
IniSections ParseIni(const std::string& text);

// What the shared files say about one profile.
struct AwsProfile {
  std::string name;              // AWS_PROFILE, or "default"
  std::string credentials_file;  // the paths read, for messages
  std::string config_file;
  AwsCredentials credentials;  // static keys, when the profile has them
  std::string keys_file;       // the file the keys were found in
  std::string region;          // the config file's `region` for the profile
  // Settings of the profile that select a source walrelay does not implement (role_arn,
  // credential_process, sso_*), named in the error when no other source is configured.
  std::vector<std::string> unsupported;
};

// Reads profile AWS_PROFILE from AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE (under $HOME
// by default). A missing file is an empty one.
AwsProfile LoadAwsProfile(const EnvLookup& env, const FileReader& read_file);

enum class CredentialSourceKind {
  kExplicit,
  kEnvironment,
  kWebIdentity,
  kSharedFiles,
  kContainer,
  kInstanceMetadata,
};

// "explicit options", "environment", ..., for messages.
const char* CredentialSourceName(CredentialSourceKind kind);

// The source the chain picked and what fetching from it needs.
struct CredentialPlan {
  CredentialSourceKind kind = CredentialSourceKind::kExplicit;
  std::string description;              // the source and where it points, never a secret
  AwsCredentials static_credentials;    // kExplicit, kEnvironment, kSharedFiles
  std::string web_identity_token_file;  // kWebIdentity
  std::string role_arn;
  std::string role_session_name;
  std::string sts_endpoint;
  std::string container_url;             // kContainer
  std::string authorization_token;       // kContainer: the header's value, or
  std::string authorization_token_file;  // the file holding it (read at each fetch)
  std::string metadata_endpoint;         // kInstanceMetadata
};

// Picks the source in the chain's order. `region` is the store's region (for the regional STS
// endpoint).
Result<CredentialPlan> PlanCredentials(const AwsCredentials& explicit_credentials,
                                       const EnvLookup& env, const AwsProfile& profile,
                                       const std::string& region);

// When credentials fetched at `fetched_at` and expiring at `expiration` are to be fetched
// again: 5 minutes before the expiration, or half-way when they live less than 10 minutes.
std::chrono::system_clock::time_point RefreshTime(std::chrono::system_clock::time_point fetched_at,
                                                  std::chrono::system_clock::time_point expiration);

// Parses an ISO 8601 UTC time as the credential sources write it ("2026-12-02T03:16:14Z",
// fractional seconds allowed).
std::optional<std::chrono::system_clock::time_point> ParseIso8601(const std::string& text);

// Credentials and, for temporary ones, when they expire.
struct TimedCredentials {
  AwsCredentials credentials;
  std::optional<std::chrono::system_clock::time_point> expiration;
};

// Hands out the current credentials of one plan, fetching them again when due.
class CredentialProvider {
 public:
  struct Options {
    CredentialPlan plan;
    std::chrono::milliseconds timeout{5000};  // each HTTP call of a fetch
    EnvLookup env;                            // for an AWS_PROFILE re-read after a refusal
    FileReader read_file;
    std::function<void(const std::string&)> log;  // refresh failures that were outlived
  };

  // Fetches the credentials once: a source that cannot deliver fails here.
  static Result<std::shared_ptr<CredentialProvider>> Create(Options options);

  // The credentials to sign the next request with; fetches them again first when the refresh
  // time has come or Invalidate() was called. Cheap while they are cached.
  Result<AwsCredentials> Current();

  // The server refused the credentials (expired or unknown): the next Current() fetches them
  // again (the shared files are read again; static keys stay as they are).
  void Invalidate();

  // The source's description, for messages.
  const std::string& source() const { return options_.plan.description; }

  // How many fetches succeeded, for tests and logs.
  int fetches() const;

 private:
  explicit CredentialProvider(Options options) : options_(std::move(options)) {}
  // One fetch from the plan's source.
  Result<TimedCredentials> Fetch() const;

  const Options options_;
  mutable std::mutex mu_;
  std::optional<TimedCredentials> current_;
  std::chrono::system_clock::time_point refresh_at_;
  bool invalidated_ = false;
  int fetches_ = 0;
};

}  // namespace walrelay::consumer
