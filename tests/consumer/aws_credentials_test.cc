// The pure parts of DynamoStore's AWS setup: the shared files' INI and profiles, the order of
// the credential chain, when temporary credentials are fetched again, the region and endpoint
// resolution, and the clock offset taken from a refusal for the request's time.
#include <doctest/doctest.h>

#include <map>

#include "consumer/aws_credentials.h"
#include "consumer/aws_http.h"
#include "consumer/aws_region.h"
#include "consumer/dynamo_client.h"

namespace walrelay::consumer {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;

EnvLookup EnvOf(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

FileReader FilesOf(std::map<std::string, std::string> files) {
  return [files = std::move(files)](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

TEST_CASE("ParseIni: sections, comments, trimmed names and values, nested settings skipped") {
  const IniSections ini = ParseIni("# a comment\n"
                                   "[default]\n"
                                   "aws_access_key_id = AKIDDEFAULT\n"
                                   "  AWS_Secret_Access_Key=secret-default  \r\n"
                                   "; another comment\n"
                                   "[profile dev]\n"
                                   "region = eu-west-1\n"
                                   "s3 =\n"
                                   "  max_concurrent_requests = 20\n"
                                   "output = json\n"
                                   "[ spaced ]\n"
                                   "key=a=b\n"
                                   "orphan line\n");
  CHECK(ini.at("default").at("aws_access_key_id") == "AKIDDEFAULT");
  CHECK(ini.at("default").at("aws_secret_access_key") == "secret-default");
  CHECK(ini.at("profile dev").at("region") == "eu-west-1");
  CHECK(ini.at("profile dev").count("max_concurrent_requests") == 0);
  CHECK(ini.at("profile dev").count("s3") == 0);
  CHECK(ini.at("profile dev").at("output") == "json");
  CHECK(ini.at("spaced").at("key") == "a=b");
  CHECK(ParseIni("key = before any section\n").empty());
}

TEST_CASE("LoadAwsProfile: the credentials file first, [profile X] in the config file") {
  const std::map<std::string, std::string> files = {
      {"/home/u/.aws/credentials",
       "[default]\naws_access_key_id=AKIDCRED\naws_secret_access_key=s1\n"
       "[dev]\naws_access_key_id=AKIDDEV\naws_secret_access_key=s2\naws_session_token=t2\n"},
      {"/home/u/.aws/config",
       "[default]\nregion=us-west-2\n"
       "[profile dev]\nregion=eu-central-1\naws_access_key_id=AKIDIGNORED\n"
       "aws_secret_access_key=ignored\n"
       "[profile cfg]\nregion=ap-south-1\naws_access_key_id=AKIDCFG\naws_secret_access_key=s3\n"
       "[profile role]\nrole_arn=arn:aws:iam::1:role/r\nsource_profile=default\n"},
      {"/etc/creds", "[default]\naws_access_key_id=AKIDOTHER\naws_secret_access_key=s4\n"},
  };
  SUBCASE("the default profile") {
    const AwsProfile p = LoadAwsProfile(EnvOf({{"HOME", "/home/u"}}), FilesOf(files));
    CHECK(p.name == "default");
    CHECK(p.credentials.access_key_id == "AKIDCRED");
    CHECK(p.keys_file == "/home/u/.aws/credentials");
    CHECK(p.region == "us-west-2");
  }
  SUBCASE("AWS_PROFILE: keys from the credentials file win over the config file's") {
    const AwsProfile p =
        LoadAwsProfile(EnvOf({{"HOME", "/home/u"}, {"AWS_PROFILE", "dev"}}), FilesOf(files));
    CHECK(p.credentials.access_key_id == "AKIDDEV");
    CHECK(p.credentials.session_token == "t2");
    CHECK(p.region == "eu-central-1");
  }
  SUBCASE("keys only in the config file") {
    const AwsProfile p =
        LoadAwsProfile(EnvOf({{"HOME", "/home/u"}, {"AWS_PROFILE", "cfg"}}), FilesOf(files));
    CHECK(p.credentials.access_key_id == "AKIDCFG");
    CHECK(p.keys_file == "/home/u/.aws/config");
    CHECK(p.region == "ap-south-1");
  }
  SUBCASE("a profile with a role is reported, not used") {
    const AwsProfile p =
        LoadAwsProfile(EnvOf({{"HOME", "/home/u"}, {"AWS_PROFILE", "role"}}), FilesOf(files));
    CHECK(p.keys_file.empty());
    CHECK(p.unsupported == std::vector<std::string>{"role_arn"});
  }
  SUBCASE("AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE, ~ expanded") {
    const AwsProfile p = LoadAwsProfile(EnvOf({{"HOME", "/home/u"},
                                               {"AWS_SHARED_CREDENTIALS_FILE", "/etc/creds"},
                                               {"AWS_CONFIG_FILE", "~/.aws/config"}}),
                                        FilesOf(files));
    CHECK(p.credentials.access_key_id == "AKIDOTHER");
    CHECK(p.config_file == "/home/u/.aws/config");
    CHECK(p.region == "us-west-2");
  }
  SUBCASE("no files: an empty profile") {
    const AwsProfile p = LoadAwsProfile(EnvOf({{"HOME", "/nowhere"}}), FilesOf({}));
    CHECK(p.keys_file.empty());
    CHECK(p.region.empty());
  }
}

TEST_CASE("PlanCredentials: the first configured source in AWS's order") {
  const AwsCredentials none;
  const AwsCredentials given{"AKIDOPT", "opt-secret", ""};
  AwsProfile with_keys;
  with_keys.name = "default";
  with_keys.keys_file = "/home/u/.aws/credentials";
  with_keys.credentials = {"AKIDFILE", "file-secret", ""};
  const AwsProfile empty_profile;
  const std::map<std::string, std::string> env_keys = {{"AWS_ACCESS_KEY_ID", "AKIDENV"},
                                                       {"AWS_SECRET_ACCESS_KEY", "env-secret"},
                                                       {"AWS_SESSION_TOKEN", "env-token"}};
  const std::map<std::string, std::string> web = {{"AWS_WEB_IDENTITY_TOKEN_FILE", "/var/token"},
                                                  {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"}};
  const std::map<std::string, std::string> container = {
      {"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc"}};
  auto merged = [](std::initializer_list<std::map<std::string, std::string>> parts) {
    std::map<std::string, std::string> all;
    for (const auto& p : parts) all.insert(p.begin(), p.end());
    return all;
  };
  struct Row {
    const char* name;
    const AwsCredentials& options;
    std::map<std::string, std::string> env;
    const AwsProfile& profile;
    CredentialSourceKind expected;
  };
  const Row rows[] = {
      {"options over everything", given, merged({env_keys, web, container}), with_keys,
       CredentialSourceKind::kExplicit},
      {"environment over web identity", none, merged({env_keys, web, container}), with_keys,
       CredentialSourceKind::kEnvironment},
      {"web identity over the files", none, merged({web, container}), with_keys,
       CredentialSourceKind::kWebIdentity},
      {"files over the container", none, container, with_keys, CredentialSourceKind::kSharedFiles},
      {"container over the metadata service", none, container, empty_profile,
       CredentialSourceKind::kContainer},
      {"the metadata service last",
       none,
       {},
       empty_profile,
       CredentialSourceKind::kInstanceMetadata},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    auto plan = PlanCredentials(row.options, EnvOf(row.env), row.profile, "eu-west-1");
    REQUIRE_MESSAGE(plan.ok(), plan.status().ToString());
    CHECK(plan->kind == row.expected);
    CHECK(plan->description.find("secret") == std::string::npos);
  }

  SUBCASE("what each source carries") {
    auto env_plan = PlanCredentials(none, EnvOf(env_keys), empty_profile, "eu-west-1");
    CHECK(env_plan->static_credentials.session_token == "env-token");
    auto web_plan = PlanCredentials(none, EnvOf(web), empty_profile, "eu-west-1");
    CHECK(web_plan->sts_endpoint == "https://sts.eu-west-1.amazonaws.com");
    CHECK(web_plan->role_session_name == "walrelay-consumer");
    auto sts_override =
        PlanCredentials(none,
                        EnvOf(merged({web,
                                      {{"AWS_ENDPOINT_URL", "http://127.0.0.1:1"},
                                       {"AWS_ENDPOINT_URL_STS", "http://127.0.0.1:2/"},
                                       {"AWS_ROLE_SESSION_NAME", "me"}}})),
                        empty_profile, "cn-north-1");
    CHECK(sts_override->sts_endpoint == "http://127.0.0.1:2");
    CHECK(sts_override->role_session_name == "me");
    auto global =
        PlanCredentials(none, EnvOf(merged({web, {{"AWS_ENDPOINT_URL", "http://127.0.0.1:1"}}})),
                        empty_profile, "cn-north-1");
    CHECK(global->sts_endpoint == "http://127.0.0.1:1");
    auto china = PlanCredentials(none, EnvOf(web), empty_profile, "cn-north-1");
    CHECK(china->sts_endpoint == "https://sts.cn-north-1.amazonaws.com.cn");

    auto relative = PlanCredentials(
        none, EnvOf(merged({container, {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://x/y"}}})),
        empty_profile, "eu-west-1");
    CHECK(relative->container_url == "http://169.254.170.2/v2/credentials/abc");
    auto full =
        PlanCredentials(none,
                        EnvOf({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"},
                               {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "tok"},
                               {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/tokfile"}}),
                        empty_profile, "eu-west-1");
    CHECK(full->container_url == "http://127.0.0.1:9/creds");
    CHECK(full->authorization_token_file == "/var/tokfile");  // the file wins, as in the SDKs
    CHECK(full->authorization_token.empty());
    CHECK(full->description.find("tok") == std::string::npos);

    auto imds =
        PlanCredentials(none, EnvOf({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:8/"}}),
                        empty_profile, "eu-west-1");
    CHECK(imds->metadata_endpoint == "http://127.0.0.1:8");
    auto imds_default = PlanCredentials(none, EnvOf({}), empty_profile, "eu-west-1");
    CHECK(imds_default->metadata_endpoint == "http://169.254.169.254");
  }
}

TEST_CASE("PlanCredentials: a half-configured source names what is missing, no secret") {
  const AwsProfile empty_profile;
  struct Row {
    AwsCredentials options;
    std::map<std::string, std::string> env;
    const char* expected;
  };
  const Row rows[] = {
      {{"AKIDOPT", "", ""}, {}, "secret_access_key is empty"},
      {{"", "opt-secret", ""}, {}, "access_key_id is empty"},
      {{}, {{"AWS_ACCESS_KEY_ID", "AKIDENV"}}, "AWS_SECRET_ACCESS_KEY is not"},
      {{}, {{"AWS_SECRET_ACCESS_KEY", "env-secret"}}, "AWS_ACCESS_KEY_ID is not"},
      {{}, {{"AWS_WEB_IDENTITY_TOKEN_FILE", "/var/token"}}, "AWS_ROLE_ARN is not"},
      {{},
       {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "ftp://x"}},
       "AWS_CONTAINER_CREDENTIALS_FULL_URI"},
      {{}, {{"AWS_EC2_METADATA_DISABLED", "TRUE"}}, "AWS_EC2_METADATA_DISABLED=true"},
  };
  for (const Row& row : rows) {
    auto plan = PlanCredentials(row.options, EnvOf(row.env), empty_profile, "us-east-1");
    REQUIRE(!plan.ok());
    CAPTURE(plan.status().message());
    CHECK(plan.status().code() == ErrorCode::kConfig);
    CHECK(plan.status().message().find(row.expected) != std::string::npos);
    CHECK(plan.status().message().find("opt-secret") == std::string::npos);
    CHECK(plan.status().message().find("env-secret") == std::string::npos);
  }

  AwsProfile half;
  half.name = "dev";
  half.keys_file = "/home/u/.aws/credentials";
  half.credentials = {"AKIDFILE", "", ""};
  auto plan = PlanCredentials({}, EnvOf({}), half, "us-east-1");
  REQUIRE(!plan.ok());
  CHECK(plan.status().message() ==
        "profile 'dev' in /home/u/.aws/credentials has aws_access_key_id but no "
        "aws_secret_access_key");

  AwsProfile role;
  role.name = "role";
  role.unsupported = {"role_arn", "credential_process"};
  plan = PlanCredentials({}, EnvOf({}), role, "us-east-1");
  REQUIRE(!plan.ok());
  CHECK(plan.status().message().find("sets role_arn, credential_process") != std::string::npos);
}

TEST_CASE("RefreshTime: 5 minutes early, or half-way for credentials living under 10 minutes") {
  const Clock::time_point t0 = Clock::from_time_t(1'800'000'000);
  struct Row {
    std::chrono::milliseconds life;
    std::chrono::milliseconds refresh_after;
  };
  const Row rows[] = {
      {6h, 6h - 5min}, {1h, 55min}, {15min, 10min}, {10min, 5min},
      {9min, 270s},    {10s, 5s},   {1s, 500ms},    {0ms, 0ms},
  };
  for (const Row& row : rows) {
    CAPTURE(row.life.count());
    CHECK(RefreshTime(t0, t0 + row.life) - t0 == row.refresh_after);
  }
}

TEST_CASE("ParseIso8601: the forms the credential sources write") {
  CHECK(ParseIso8601("2026-12-02T03:16:14Z") == Clock::from_time_t(1796181374));
  CHECK(ParseIso8601("2026-12-02T03:16:14.250Z") ==
        Clock::from_time_t(1796181374) + std::chrono::milliseconds(250));
  CHECK(ParseIso8601("2026-12-02T03:16:14+00:00") == Clock::from_time_t(1796181374));
  CHECK_FALSE(ParseIso8601("2026-12-02 03:16:14"));
  CHECK_FALSE(ParseIso8601("2026-12-02T03:16:14+02:00"));
  CHECK_FALSE(ParseIso8601("2026-13-02T03:16:14Z"));
  CHECK_FALSE(ParseIso8601(""));
}

TEST_CASE("ResolveDynamoLocation: region and endpoint in AWS's order") {
  struct Row {
    const char* name;
    std::string option_region;
    std::string option_endpoint;
    std::map<std::string, std::string> env;
    std::string profile_region;
    std::string region;
    std::string endpoint;
  };
  const std::map<std::string, std::string> all_env = {
      {"AWS_REGION", "eu-west-1"},
      {"AWS_DEFAULT_REGION", "eu-west-2"},
      {"AWS_ENDPOINT_URL_DYNAMODB", "https://dynamodb.ap-south-1.amazonaws.com"},
      {"AWS_ENDPOINT_URL", "http://127.0.0.1:4566"}};
  const Row rows[] = {
      {"nothing: us-east-1",
       "",
       "",
       {},
       "",
       "us-east-1",
       "https://dynamodb.us-east-1.amazonaws.com"},
      {"options win", "sa-east-1", "http://127.0.0.1:8000", all_env, "ca-central-1", "sa-east-1",
       "http://127.0.0.1:8000"},
      {"AWS_REGION over AWS_DEFAULT_REGION",
       "",
       "",
       {{"AWS_REGION", "eu-west-1"}, {"AWS_DEFAULT_REGION", "eu-west-2"}},
       "ca-central-1",
       "eu-west-1",
       "https://dynamodb.eu-west-1.amazonaws.com"},
      {"AWS_DEFAULT_REGION over the profile",
       "",
       "",
       {{"AWS_DEFAULT_REGION", "eu-west-2"}},
       "ca-central-1",
       "eu-west-2",
       "https://dynamodb.eu-west-2.amazonaws.com"},
      {"the profile's region",
       "",
       "",
       {},
       "ca-central-1",
       "ca-central-1",
       "https://dynamodb.ca-central-1.amazonaws.com"},
      {"a China region's domain",
       "cn-north-1",
       "",
       {},
       "",
       "cn-north-1",
       "https://dynamodb.cn-north-1.amazonaws.com.cn"},
      {"the option endpoint's region over the profile's",
       "",
       "https://dynamodb.us-west-2.amazonaws.com",
       {},
       "ca-central-1",
       "us-west-2",
       "https://dynamodb.us-west-2.amazonaws.com"},
      {"AWS_REGION over the endpoint's region",
       "",
       "https://dynamodb.us-west-2.amazonaws.com",
       {{"AWS_REGION", "eu-west-1"}},
       "",
       "eu-west-1",
       "https://dynamodb.us-west-2.amazonaws.com"},
      {"a China endpoint's region",
       "",
       "https://dynamodb.cn-northwest-1.amazonaws.com.cn/",
       {},
       "",
       "cn-northwest-1",
       "https://dynamodb.cn-northwest-1.amazonaws.com.cn/"},
      {"AWS_ENDPOINT_URL_DYNAMODB over AWS_ENDPOINT_URL, its region used",
       "",
       "",
       {{"AWS_ENDPOINT_URL_DYNAMODB", "https://dynamodb.ap-south-1.amazonaws.com"},
        {"AWS_ENDPOINT_URL", "http://127.0.0.1:4566"}},
       "",
       "ap-south-1",
       "https://dynamodb.ap-south-1.amazonaws.com"},
      {"AWS_ENDPOINT_URL, a local server: the profile's region",
       "",
       "",
       {{"AWS_ENDPOINT_URL", "http://127.0.0.1:4566"}},
       "ca-central-1",
       "ca-central-1",
       "http://127.0.0.1:4566"},
      {"a local endpoint and nothing else: us-east-1",
       "",
       "http://localhost:8000",
       {},
       "",
       "us-east-1",
       "http://localhost:8000"},
  };
  for (const Row& row : rows) {
    CAPTURE(row.name);
    const DynamoLocation l = ResolveDynamoLocation(row.option_region, row.option_endpoint,
                                                   EnvOf(row.env), row.profile_region);
    CHECK(l.region == row.region);
    CHECK(l.endpoint == row.endpoint);
  }
}

TEST_CASE("RegionOfDynamoEndpoint: only dynamodb.<region>.amazonaws.com[.cn]") {
  CHECK(RegionOfDynamoEndpoint("https://dynamodb.eu-west-1.amazonaws.com") == "eu-west-1");
  CHECK(RegionOfDynamoEndpoint("https://dynamodb.eu-west-1.amazonaws.com:443/") == "eu-west-1");
  CHECK(RegionOfDynamoEndpoint("https://dynamodb.cn-north-1.amazonaws.com.cn") == "cn-north-1");
  CHECK(RegionOfDynamoEndpoint("http://127.0.0.1:8000").empty());
  CHECK(RegionOfDynamoEndpoint("https://dynamodb.amazonaws.com").empty());
  CHECK(RegionOfDynamoEndpoint("https://dynamodb.a.b.amazonaws.com").empty());
  CHECK(RegionOfDynamoEndpoint("https://sts.eu-west-1.amazonaws.com").empty());
  CHECK(RegionOfDynamoEndpoint("https://dynamodb.eu-west-1.amazonaws.com.evil.example").empty());
}

TEST_CASE("ClockOffsetFromDate and the refusals that call for it") {
  const Clock::time_point local = Clock::from_time_t(1796181374);  // Wed, 02 Dec 2026 03:16:14
  CHECK(ClockOffsetFromDate("Wed, 02 Dec 2026 03:16:14 GMT", local) == 0ms);
  CHECK(ClockOffsetFromDate("Wed, 02 Dec 2026 04:16:15 GMT", local) == 3'601'000ms);
  CHECK(ClockOffsetFromDate("Tue, 01 Dec 2026 03:16:14 GMT", local) == -86'400'000ms);
  CHECK(ClockOffsetFromDate("Wed, 02 Dec 2026 03:16:14 GMT", local + 400ms) == -400ms);
  CHECK_FALSE(ClockOffsetFromDate("", local));
  CHECK_FALSE(ClockOffsetFromDate("Wed, 02 Foo 2026 03:16:14 GMT", local));
  CHECK_FALSE(ClockOffsetFromDate("Wed, 02 Dec 2026 03:16:14 CET", local));

  CHECK(IsClockSkewRefusal("InvalidSignatureException",
                           "Signature expired: 20261202T031614Z is now earlier than "
                           "20261202T041114Z (20261202T042614Z - 15 min.)"));
  CHECK(IsClockSkewRefusal("InvalidSignatureException", "Signature not yet current: ..."));
  CHECK(IsClockSkewRefusal("RequestTimeTooSkewed", ""));
  CHECK_FALSE(IsClockSkewRefusal("InvalidSignatureException",
                                 "The request signature we calculated does not match"));
  CHECK(IsCredentialRefusal("ExpiredTokenException"));
  CHECK(IsCredentialRefusal("UnrecognizedClientException"));
  CHECK_FALSE(IsCredentialRefusal("AccessDeniedException"));
}

TEST_CASE("CredentialProvider: static keys are fetched once; shared files again when refused") {
  CredentialProvider::Options o;
  o.plan.kind = CredentialSourceKind::kExplicit;
  o.plan.static_credentials = {"AKIDOPT", "opt-secret", ""};
  auto provider = CredentialProvider::Create(o);
  REQUIRE(provider.ok());
  for (int i = 0; i < 3; ++i) CHECK((*provider)->Current()->access_key_id == "AKIDOPT");
  CHECK((*provider)->fetches() == 1);

  auto files = std::make_shared<std::map<std::string, std::string>>();
  (*files)["/c"] = "[default]\naws_access_key_id=AKIDOLD\naws_secret_access_key=old\n";
  CredentialProvider::Options f;
  f.plan.kind = CredentialSourceKind::kSharedFiles;
  f.env = EnvOf({{"AWS_SHARED_CREDENTIALS_FILE", "/c"}, {"AWS_CONFIG_FILE", "/none"}});
  f.read_file = [files](const std::string& path) -> std::optional<std::string> {
    auto it = files->find(path);
    if (it == files->end()) return std::nullopt;
    return it->second;
  };
  auto from_files = CredentialProvider::Create(f);
  REQUIRE(from_files.ok());
  CHECK((*from_files)->Current()->access_key_id == "AKIDOLD");
  (*files)["/c"] = "[default]\naws_access_key_id=AKIDNEW\naws_secret_access_key=new\n";
  CHECK((*from_files)->Current()->access_key_id == "AKIDOLD");  // cached until refused
  (*from_files)->Invalidate();
  CHECK((*from_files)->Current()->access_key_id == "AKIDNEW");
  CHECK((*from_files)->fetches() == 2);
}

TEST_CASE("ParseHttpUrl: host, port, target") {
  auto u = ParseHttpUrl("http://127.0.0.1:8080/v2/credentials?x=1");
  REQUIRE(u.ok());
  CHECK(u->host == "127.0.0.1");
  CHECK(u->port == "8080");
  CHECK(u->target == "/v2/credentials?x=1");
  auto s = ParseHttpUrl("https://sts.amazonaws.com");
  REQUIRE(s.ok());
  CHECK(s->tls);
  CHECK(s->port == "443");
  CHECK(s->target == "/");
  auto v6 = ParseHttpUrl("http://[fd00:ec2::254]/latest");
  REQUIRE(v6.ok());
  CHECK(v6->host == "fd00:ec2::254");
  CHECK(v6->port == "80");
  CHECK_FALSE(ParseHttpUrl("ftp://x").ok());
  CHECK_FALSE(ParseHttpUrl("http://x:port/").ok());
}

}  // namespace
}  // namespace walrelay::consumer
