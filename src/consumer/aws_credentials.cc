// AWS's default credential chain (see aws_credentials.h): the pure planning and parsing, then
// one fetcher per source over SendHttp.
#include "consumer/aws_credentials.h"

#include <rapidjson/document.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <tuple>

#include "consumer/aws_http.h"
#include "consumer/dynamo_client.h"

namespace walrelay::consumer {

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return std::string(v != nullptr ? v : "");
  };
}

FileReader FileSystemReader() {
  return [](const std::string& path) -> std::optional<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return std::nullopt;
    return text.str();
  };
}

namespace {

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The value of `key` in `section` of `ini`, "" when absent.
std::string Setting(const IniSections& ini, const std::string& section, const std::string& key) {
  const auto s = ini.find(section);
  if (s == ini.end()) return "";
  const auto k = s->second.find(key);
  return k == s->second.end() ? "" : k->second;
}

// "~/x" as $HOME/x, as the AWS CLI expands it.
std::string ExpandHome(const std::string& path, const EnvLookup& env) {
  if (path.rfind("~/", 0) == 0) return env("HOME") + path.substr(1);
  return path;
}

// The regional endpoint of an AWS service: China's regions have their own domain.
std::string RegionalEndpoint(const std::string& service, const std::string& region) {
  const bool china = region.rfind("cn-", 0) == 0;
  return "https://" + service + "." + region + ".amazonaws.com" + (china ? ".cn" : "");
}

std::string UrlEncode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// The text of the first <tag> element in `xml`, entities decoded; nullopt when absent.
std::optional<std::string> XmlText(const std::string& xml, const std::string& tag) {
  const std::string open = "<" + tag + ">";
  const size_t begin = xml.find(open);
  if (begin == std::string::npos) return std::nullopt;
  const size_t end = xml.find("</" + tag + ">", begin + open.size());
  if (end == std::string::npos) return std::nullopt;
  std::string raw = xml.substr(begin + open.size(), end - begin - open.size());
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '&') {
      out += raw[i];
      continue;
    }
    static const std::pair<const char*, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool decoded = false;
    for (const auto& [entity, c] : kEntities) {
      const std::string e = entity;
      if (raw.compare(i, e.size(), e) == 0) {
        out += c;
        i += e.size() - 1;
        decoded = true;
        break;
      }
    }
    if (!decoded) out += '&';
  }
  return out;
}

std::string JsonString(const rapidjson::Value& object, const char* name) {
  const rapidjson::Value* v = JsonMember(object, name);
  return v != nullptr && v->IsString() ? std::string(v->GetString(), v->GetStringLength()) : "";
}

// Credentials in the JSON that the container endpoint and the metadata service both answer:
// AccessKeyId, SecretAccessKey, Token, Expiration.
Result<TimedCredentials> CredentialsFromJson(const std::string& body, const std::string& where) {
  rapidjson::Document doc;
  if (doc.Parse(body.data(), body.size()).HasParseError() || !doc.IsObject())
    return Status::Protocol(where + " answered no JSON object");
  TimedCredentials out;
  out.credentials.access_key_id = JsonString(doc, "AccessKeyId");
  out.credentials.secret_access_key = JsonString(doc, "SecretAccessKey");
  out.credentials.session_token = JsonString(doc, "Token");
  if (out.credentials.access_key_id.empty() || out.credentials.secret_access_key.empty())
    return Status::Protocol(where + " answered without AccessKeyId or SecretAccessKey");
  const std::string expiration = JsonString(doc, "Expiration");
  if (!expiration.empty()) {
    out.expiration = ParseIso8601(expiration);
    if (!out.expiration)
      return Status::Protocol(where + " answered an Expiration that is no ISO 8601 time: '" +
                              expiration + "'");
  }
  return out;
}

// The error an answer with a non-2xx status stands for; its body is quoted only as far as
// it is an error message (a JSON `message`/`Message` or an XML <Message>), never whole.
Status RefusedBy(const std::string& what, const HttpAnswer& answer) {
  std::string detail;
  rapidjson::Document doc;
  if (!doc.Parse(answer.body.data(), answer.body.size()).HasParseError() && doc.IsObject()) {
    for (const char* field : {"code", "Code"})
      if (std::string v = JsonString(doc, field); !v.empty()) detail = v;
    for (const char* field : {"message", "Message"})
      if (std::string v = JsonString(doc, field); !v.empty())
        detail += (detail.empty() ? "" : ": ") + v;
  } else if (auto code = XmlText(answer.body, "Code")) {
    detail = *code;
    if (auto message = XmlText(answer.body, "Message")) detail += ": " + *message;
  }
  return Status::Connection(what + " answered HTTP " + std::to_string(answer.status) +
                            (detail.empty() ? "" : " (" + detail + ")"));
}

}  // namespace

IniSections ParseIni(const std::string& text) {
  IniSections out;
  std::istringstream lines(text);
  std::string line;
  std::string section;
  bool in_section = false;
  bool nested = false;  // indented lines under a `key =` with no value (e.g. `s3 =`) belong to it
  while (std::getline(lines, line)) {
    const std::string trimmed = Trim(line);
    if (trimmed.empty() || trimmed[0] == '#' || trimmed[0] == ';') continue;
    if (trimmed.front() == '[' && trimmed.back() == ']') {
      section = Trim(trimmed.substr(1, trimmed.size() - 2));
      in_section = true;
      nested = false;
      out[section];
      continue;
    }
    const bool indented = line[0] == ' ' || line[0] == '\t';
    if (nested && indented) continue;
    const size_t eq = trimmed.find('=');
    if (!in_section || eq == std::string::npos) continue;
    const std::string key = Lower(Trim(trimmed.substr(0, eq)));
    const std::string value = Trim(trimmed.substr(eq + 1));
    nested = value.empty();
    if (!key.empty() && !nested) out[section][key] = value;
  }
  return out;
}

AwsProfile LoadAwsProfile(const EnvLookup& env, const FileReader& read_file) {
  AwsProfile profile;
  profile.name = env("AWS_PROFILE");
  if (profile.name.empty()) profile.name = "default";
  const std::string home = env("HOME");
  profile.credentials_file = env("AWS_SHARED_CREDENTIALS_FILE");
  if (profile.credentials_file.empty()) profile.credentials_file = home + "/.aws/credentials";
  profile.credentials_file = ExpandHome(profile.credentials_file, env);
  profile.config_file = env("AWS_CONFIG_FILE");
  if (profile.config_file.empty()) profile.config_file = home + "/.aws/config";
  profile.config_file = ExpandHome(profile.config_file, env);

  const IniSections credentials = ParseIni(read_file(profile.credentials_file).value_or(""));
  const IniSections config = ParseIni(read_file(profile.config_file).value_or(""));
  // The config file names a profile `[profile X]`; the default profile may be `[default]`.
  std::string config_section = "profile " + profile.name;
  if (profile.name == "default" && config.count(config_section) == 0) config_section = "default";

  for (const auto& [ini, section, file] :
       {std::tuple<const IniSections&, const std::string&, const std::string&>{
            credentials, profile.name, profile.credentials_file},
        {config, config_section, profile.config_file}}) {
    const std::string id = Setting(ini, section, "aws_access_key_id");
    const std::string secret = Setting(ini, section, "aws_secret_access_key");
    if (profile.keys_file.empty() && (!id.empty() || !secret.empty())) {
      profile.credentials = {id, secret, Setting(ini, section, "aws_session_token")};
      profile.keys_file = file;
    }
    for (const char* key : {"role_arn", "credential_process", "sso_session", "sso_start_url",
                            "web_identity_token_file"})
      if (!Setting(ini, section, key).empty() &&
          std::find(profile.unsupported.begin(), profile.unsupported.end(), key) ==
              profile.unsupported.end())
        profile.unsupported.emplace_back(key);
  }
  profile.region = Setting(config, config_section, "region");
  return profile;
}

const char* CredentialSourceName(CredentialSourceKind kind) {
  switch (kind) {
    case CredentialSourceKind::kExplicit: return "explicit options";
    case CredentialSourceKind::kEnvironment: return "environment";
    case CredentialSourceKind::kWebIdentity: return "web identity";
    case CredentialSourceKind::kSharedFiles: return "shared files";
    case CredentialSourceKind::kContainer: return "container credentials";
    case CredentialSourceKind::kInstanceMetadata: return "instance metadata";
  }
  return "?";
}

Result<CredentialPlan> PlanCredentials(const AwsCredentials& explicit_credentials,
                                       const EnvLookup& env, const AwsProfile& profile,
                                       const std::string& region) {
  CredentialPlan plan;
  if (!explicit_credentials.access_key_id.empty() ||
      !explicit_credentials.secret_access_key.empty()) {
    if (explicit_credentials.access_key_id.empty())
      return Status::Config(
          "DynamoStoreOptions.secret_access_key is set but access_key_id is empty");
    if (explicit_credentials.secret_access_key.empty())
      return Status::Config(
          "DynamoStoreOptions.access_key_id is set but secret_access_key is empty");
    plan.kind = CredentialSourceKind::kExplicit;
    plan.description = "explicit options (DynamoStoreOptions.access_key_id)";
    plan.static_credentials = explicit_credentials;
    return plan;
  }
  if (!explicit_credentials.session_token.empty())
    return Status::Config(
        "DynamoStoreOptions.session_token is set but access_key_id and secret_access_key are "
        "empty");

  const std::string env_id = env("AWS_ACCESS_KEY_ID");
  const std::string env_secret = env("AWS_SECRET_ACCESS_KEY");
  if (!env_id.empty() || !env_secret.empty()) {
    if (env_id.empty())
      return Status::Config("AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
    if (env_secret.empty())
      return Status::Config("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    plan.kind = CredentialSourceKind::kEnvironment;
    plan.description = "environment (AWS_ACCESS_KEY_ID)";
    plan.static_credentials = {env_id, env_secret, env("AWS_SESSION_TOKEN")};
    return plan;
  }

  const std::string token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE");
  if (!token_file.empty()) {
    plan.role_arn = env("AWS_ROLE_ARN");
    if (plan.role_arn.empty())
      return Status::Config("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not");
    plan.kind = CredentialSourceKind::kWebIdentity;
    plan.web_identity_token_file = token_file;
    plan.role_session_name = env("AWS_ROLE_SESSION_NAME");
    if (plan.role_session_name.empty()) plan.role_session_name = "walrelay-consumer";
    plan.sts_endpoint = env("AWS_ENDPOINT_URL_STS");
    if (plan.sts_endpoint.empty()) plan.sts_endpoint = env("AWS_ENDPOINT_URL");
    if (plan.sts_endpoint.empty()) plan.sts_endpoint = RegionalEndpoint("sts", region);
    while (!plan.sts_endpoint.empty() && plan.sts_endpoint.back() == '/')
      plan.sts_endpoint.pop_back();
    plan.description = "web identity (role " + plan.role_arn + ", token file " + token_file +
                       ", STS at " + plan.sts_endpoint + ")";
    return plan;
  }

  if (!profile.keys_file.empty()) {
    const std::string where = "profile '" + profile.name + "' in " + profile.keys_file;
    if (profile.credentials.access_key_id.empty())
      return Status::Config(where + " has aws_secret_access_key but no aws_access_key_id");
    if (profile.credentials.secret_access_key.empty())
      return Status::Config(where + " has aws_access_key_id but no aws_secret_access_key");
    plan.kind = CredentialSourceKind::kSharedFiles;
    plan.description = "shared files (" + where + ")";
    plan.static_credentials = profile.credentials;
    return plan;
  }
  if (!profile.unsupported.empty()) {
    std::string settings;
    for (const std::string& s : profile.unsupported) settings += (settings.empty() ? "" : ", ") + s;
    return Status::Config("profile '" + profile.name + "' (" + profile.credentials_file + ", " +
                          profile.config_file + ") sets " + settings +
                          ", which walrelay does not support: give the profile static keys or "
                          "use another credential source");
  }

  const std::string relative = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  const std::string full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (!relative.empty() || !full.empty()) {
    plan.kind = CredentialSourceKind::kContainer;
    plan.container_url = !relative.empty() ? "http://169.254.170.2" + relative : full;
    plan.authorization_token_file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    if (plan.authorization_token_file.empty())
      plan.authorization_token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    auto url = ParseHttpUrl(plan.container_url);
    if (!url.ok())
      return Status::Config(std::string(!relative.empty() ? "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"
                                                          : "AWS_CONTAINER_CREDENTIALS_FULL_URI") +
                            ": " + url.status().message());
    plan.description = "container credentials (" + plan.container_url + ")";
    return plan;
  }

  if (Lower(env("AWS_EC2_METADATA_DISABLED")) == "true")
    return Status::Config("no AWS credentials: none in DynamoStoreOptions, AWS_ACCESS_KEY_ID, "
                          "AWS_WEB_IDENTITY_TOKEN_FILE, profile '" +
                          profile.name + "' (" + profile.credentials_file + ", " +
                          profile.config_file +
                          ") or AWS_CONTAINER_CREDENTIALS_*, and AWS_EC2_METADATA_DISABLED=true");
  plan.kind = CredentialSourceKind::kInstanceMetadata;
  plan.metadata_endpoint = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (plan.metadata_endpoint.empty()) plan.metadata_endpoint = "http://169.254.169.254";
  while (!plan.metadata_endpoint.empty() && plan.metadata_endpoint.back() == '/')
    plan.metadata_endpoint.pop_back();
  plan.description = "instance metadata (" + plan.metadata_endpoint + ")";
  return plan;
}

std::chrono::system_clock::time_point RefreshTime(
    std::chrono::system_clock::time_point fetched_at,
    std::chrono::system_clock::time_point expiration) {
  const auto life = expiration - fetched_at;
  if (life < std::chrono::minutes(10)) return fetched_at + life / 2;
  return expiration - std::chrono::minutes(5);
}

std::optional<std::chrono::system_clock::time_point> ParseIso8601(const std::string& text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, used = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &month, &day, &hour, &minute,
                  &second, &used) != 6)
    return std::nullopt;
  std::string rest = text.substr(static_cast<size_t>(used));
  std::chrono::milliseconds fraction{0};
  if (!rest.empty() && rest[0] == '.') {
    size_t digits = 1;
    int64_t scaled = 0;
    int64_t unit = 100;
    while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) {
      scaled += (rest[digits] - '0') * unit;
      unit /= 10;
      ++digits;
    }
    fraction = std::chrono::milliseconds(scaled);
    rest = rest.substr(digits);
  }
  if (rest != "Z" && rest != "+00:00" && rest != "+0000") return std::nullopt;
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60)
    return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  return std::chrono::system_clock::from_time_t(timegm(&tm)) + fraction;
}

Result<std::shared_ptr<CredentialProvider>> CredentialProvider::Create(Options options) {
  std::shared_ptr<CredentialProvider> provider(new CredentialProvider(std::move(options)));
  auto first = provider->Current();
  if (!first.ok()) return first.status();
  return provider;
}

int CredentialProvider::fetches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetches_;
}

void CredentialProvider::Invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  invalidated_ = true;
}

Result<AwsCredentials> CredentialProvider::Current() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::system_clock::now();
  if (current_ && !invalidated_ && (!current_->expiration || now < refresh_at_))
    return current_->credentials;
  auto fresh = Fetch();
  if (fresh.ok()) {
    current_ = std::move(*fresh);
    invalidated_ = false;
    ++fetches_;
    refresh_at_ = current_->expiration ? RefreshTime(now, *current_->expiration)
                                       : std::chrono::system_clock::time_point::max();
    return current_->credentials;
  }
  // A source that is down for a moment does not stop a store whose credentials still hold:
  // they are used until they expire, and the fetch is tried again a second later.
  if (current_ && !invalidated_ && current_->expiration && now < *current_->expiration) {
    refresh_at_ = now + std::chrono::seconds(1);
    if (options_.log)
      options_.log("CREDENTIALS refresh from " + source() +
                   " failed, the current ones are still valid: " + fresh.status().message());
    return current_->credentials;
  }
  return fresh.status().WithContext("AWS credentials from " + source());
}

Result<TimedCredentials> CredentialProvider::Fetch() const {
  const CredentialPlan& plan = options_.plan;
  switch (plan.kind) {
    case CredentialSourceKind::kExplicit:
    case CredentialSourceKind::kEnvironment: return TimedCredentials{plan.static_credentials, {}};
    case CredentialSourceKind::kSharedFiles: {
      // Read again: a refused key may have been rotated in the file meanwhile.
      const AwsProfile profile = LoadAwsProfile(options_.env, options_.read_file);
      if (profile.credentials.access_key_id.empty() ||
          profile.credentials.secret_access_key.empty())
        return Status::Config("profile '" + profile.name + "' in " + profile.credentials_file +
                              " / " + profile.config_file + " has no aws_access_key_id and " +
                              "aws_secret_access_key any more");
      return TimedCredentials{profile.credentials, {}};
    }
    case CredentialSourceKind::kWebIdentity: {
      // Read at each fetch: the token is rotated in place (EKS does so hourly).
      auto token = options_.read_file(plan.web_identity_token_file);
      if (!token || Trim(*token).empty())
        return Status::Config("AWS_WEB_IDENTITY_TOKEN_FILE " + plan.web_identity_token_file +
                              " cannot be read or is empty");
      auto url = ParseHttpUrl(plan.sts_endpoint);
      if (!url.ok()) return Status::Config("STS endpoint: " + url.status().message());
      HttpCall call;
      call.method = "POST";
      call.url = *url;
      call.timeout = options_.timeout;
      call.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"},
                      {"Accept", "text/xml"}};
      call.body = "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" +
                  UrlEncode(plan.role_arn) +
                  "&RoleSessionName=" + UrlEncode(plan.role_session_name) +
                  "&WebIdentityToken=" + UrlEncode(Trim(*token));
      const std::string what = "STS AssumeRoleWithWebIdentity at " + url->Origin();
      auto answer = SendHttp(call);
      if (!answer.ok()) return answer.status();
      if (answer->status / 100 != 2) return RefusedBy(what, *answer);
      TimedCredentials out;
      out.credentials.access_key_id = XmlText(answer->body, "AccessKeyId").value_or("");
      out.credentials.secret_access_key = XmlText(answer->body, "SecretAccessKey").value_or("");
      out.credentials.session_token = XmlText(answer->body, "SessionToken").value_or("");
      const std::string expiration = XmlText(answer->body, "Expiration").value_or("");
      out.expiration = ParseIso8601(expiration);
      if (out.credentials.access_key_id.empty() || out.credentials.secret_access_key.empty() ||
          !out.expiration)
        return Status::Protocol(what + " answered without AccessKeyId, SecretAccessKey or an " +
                                "ISO 8601 Expiration");
      return out;
    }
    case CredentialSourceKind::kContainer: {
      HttpCall call;
      call.url = *ParseHttpUrl(plan.container_url);  // checked by PlanCredentials
      call.timeout = options_.timeout;
      std::string authorization = plan.authorization_token;
      if (!plan.authorization_token_file.empty()) {
        auto text = options_.read_file(plan.authorization_token_file);
        if (!text)
          return Status::Config("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE " +
                                plan.authorization_token_file + " cannot be read");
        authorization = Trim(*text);
      }
      if (!authorization.empty()) call.headers.emplace_back("Authorization", authorization);
      const std::string what = "the container credentials endpoint " + plan.container_url;
      auto answer = SendHttp(call);
      if (!answer.ok()) return answer.status();
      if (answer->status / 100 != 2) return RefusedBy(what, *answer);
      return CredentialsFromJson(answer->body, what);
    }
    case CredentialSourceKind::kInstanceMetadata: {
      // The metadata service answers within milliseconds where it exists; elsewhere its
      // address is unroutable, and a second is what AWS's SDKs wait for it too.
      const auto timeout = std::min(options_.timeout, std::chrono::milliseconds(1000));
      auto base = ParseHttpUrl(plan.metadata_endpoint);
      if (!base.ok())
        return Status::Config("AWS_EC2_METADATA_SERVICE_ENDPOINT: " + base.status().message());
      auto at = [&](const std::string& path) {
        HttpCall call;
        call.url = *base;
        call.url.target = path;
        call.timeout = timeout;
        return call;
      };
      HttpCall token_call = at("/latest/api/token");
      token_call.method = "PUT";
      token_call.headers = {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}};
      auto token = SendHttp(token_call);
      if (!token.ok()) return token.status();
      if (token->status / 100 != 2)
        return RefusedBy(
            "the instance metadata service " + plan.metadata_endpoint + " (PUT /latest/api/token)",
            *token);
      const std::string session = Trim(token->body);
      const std::string roles_path = "/latest/meta-data/iam/security-credentials/";
      HttpCall roles_call = at(roles_path);
      roles_call.headers = {{"X-aws-ec2-metadata-token", session}};
      auto roles = SendHttp(roles_call);
      if (!roles.ok()) return roles.status();
      if (roles->status == 404)
        return Status::Config("the instance metadata service " + plan.metadata_endpoint +
                              " has no IAM role for this instance (" + roles_path + ")");
      if (roles->status / 100 != 2)
        return RefusedBy("the instance metadata service " + plan.metadata_endpoint + roles_path,
                         *roles);
      const std::string role = Trim(roles->body.substr(0, roles->body.find('\n')));
      if (role.empty())
        return Status::Config("the instance metadata service " + plan.metadata_endpoint +
                              " lists no IAM role (" + roles_path + ")");
      HttpCall role_call = at(roles_path + role);
      role_call.headers = {{"X-aws-ec2-metadata-token", session}};
      const std::string what =
          "the instance metadata service " + plan.metadata_endpoint + roles_path + role;
      auto answer = SendHttp(role_call);
      if (!answer.ok()) return answer.status();
      if (answer->status / 100 != 2) return RefusedBy(what, *answer);
      rapidjson::Document doc;
      if (!doc.Parse(answer->body.data(), answer->body.size()).HasParseError() && doc.IsObject()) {
        const std::string code = JsonString(doc, "Code");
        if (!code.empty() && code != "Success")
          return Status::Connection(what + " answered Code " + code);
      }
      return CredentialsFromJson(answer->body, what);
    }
  }
  return Status::Internal("unknown credential source");
}

}  // namespace walrelay::consumer
