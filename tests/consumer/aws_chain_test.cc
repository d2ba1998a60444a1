// DynamoStore's AWS credential chain end to end: the instance metadata service (IMDSv2), the
// container credentials endpoint and STS (web identity) are stand-ins on loopback that hand
// out credentials living two seconds; a stand-in in front of dynalite checks that every
// request is signed with credentials that were handed out and have not expired yet (dynalite
// itself accepts any signature). Then the shared files' profile and region, a refusal of the
// credentials, and a server whose clock is an hour ahead.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "consumer/aws_credentials.h"
#include "devtools/dynalite_sandbox.h"
#include "http_stand_in.h"
#include "walrelay/consumer.h"

namespace walrelay::testing {
namespace {

using namespace std::chrono_literals;
namespace wc = walrelay::consumer;
namespace http = boost::beast::http;
using Clock = std::chrono::system_clock;

// Every variable the chain reads, cleared for each test and restored after it; HOME points to
// an empty directory so the machine's ~/.aws plays no part.
class ScopedAwsEnvironment {
 public:
  explicit ScopedAwsEnvironment(const std::map<std::string, std::string>& vars) {
    home_ = "/tmp/walrelay-aws-chain-" + std::to_string(::getpid());
    std::filesystem::create_directories(home_);
    for (const char* name : {"HOME",
                             "AWS_ACCESS_KEY_ID",
                             "AWS_SECRET_ACCESS_KEY",
                             "AWS_SESSION_TOKEN",
                             "AWS_REGION",
                             "AWS_DEFAULT_REGION",
                             "AWS_PROFILE",
                             "AWS_SHARED_CREDENTIALS_FILE",
                             "AWS_CONFIG_FILE",
                             "AWS_WEB_IDENTITY_TOKEN_FILE",
                             "AWS_ROLE_ARN",
                             "AWS_ROLE_SESSION_NAME",
                             "AWS_ENDPOINT_URL",
                             "AWS_ENDPOINT_URL_DYNAMODB",
                             "AWS_ENDPOINT_URL_STS",
                             "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                             "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                             "AWS_CONTAINER_AUTHORIZATION_TOKEN",
                             "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                             "AWS_EC2_METADATA_SERVICE_ENDPOINT",
                             "AWS_EC2_METADATA_DISABLED"}) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(name);
    }
    ::setenv("HOME", home_.c_str(), 1);
    for (const auto& [name, value] : vars) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedAwsEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
    std::error_code ignored;
    std::filesystem::remove_all(home_, ignored);
  }
  ScopedAwsEnvironment(const ScopedAwsEnvironment&) = delete;
  ScopedAwsEnvironment& operator=(const ScopedAwsEnvironment&) = delete;

  // Writes `text` to `name` in the test's home directory; returns the path.
  std::string File(const std::string& name, const std::string& text) const {
    const std::string path = home_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

 private:
  std::string home_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string Iso8601(Clock::time_point t) {
  const std::time_t s = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()) % 1000;
  char frac[8];
  std::snprintf(frac, sizeof(frac), ".%03dZ", static_cast<int>(ms.count()));
  return std::string(buf) + frac;
}

std::string HttpDate(Clock::time_point t) {
  const std::time_t s = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

std::string Header(const HttpRequest& req, const std::string& name) {
  auto it = req.find(name);
  return it == req.end() ? "" : std::string(it->value());
}

// Hands out numbered temporary credentials that live `life`, and remembers them.
class Issuer {
 public:
  struct Issued {
    std::string key_id;
    std::string secret;
    std::string token;
    Clock::time_point at;
    Clock::time_point expires;
  };

  Issuer(std::string prefix, std::chrono::milliseconds life)
      : prefix_(std::move(prefix)), life_(life) {}

  Issued Next() {
    std::lock_guard<std::mutex> lock(mu_);
    Issued i;
    i.key_id = prefix_ + std::to_string(issued_.size() + 1);
    i.secret = "secret-" + i.key_id;
    i.token = "token-" + i.key_id;
    i.at = Clock::now();
    i.expires = i.at + life_;
    issued_.push_back(i);
    return i;
  }
  // The JSON the container endpoint and the metadata service answer.
  std::string NextAsJson() {
    const Issued i = Next();
    return "{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\",\"AccessKeyId\":\"" + i.key_id +
           "\",\"SecretAccessKey\":\"" + i.secret + "\",\"Token\":\"" + i.token +
           "\",\"Expiration\":\"" + Iso8601(i.expires) + "\"}";
  }
  std::optional<Issued> Find(const std::string& key_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Issued& i : issued_)
      if (i.key_id == key_id) return i;
    return std::nullopt;
  }
  std::vector<Issued> issued() const {
    std::lock_guard<std::mutex> lock(mu_);
    return issued_;
  }

 private:
  const std::string prefix_;
  const std::chrono::milliseconds life_;
  mutable std::mutex mu_;
  std::vector<Issued> issued_;
};

// In front of dynalite: checks each request's signing credentials against the issuer (when
// there is one), can refuse the credentials or the request's time, and forwards the rest.
class DynamoWatch {
 public:
  DynamoWatch(int dynalite_port, const Issuer* issuer)
      : dynalite_port_(dynalite_port),
        issuer_(issuer),
        server_([this](const HttpRequest& r) { return Handle(r); }) {}

  std::string endpoint() const { return server_.url(); }
  // The next `n` requests are answered ExpiredTokenException.
  void RefuseCredentials(int n) { refuse_credentials_ = n; }
  // The server's clock runs `ahead` of this host's; requests signed more than 5 minutes off
  // it are refused as DynamoDB refuses them.
  void ClockAhead(std::chrono::milliseconds ahead) { clock_ahead_ms_ = ahead.count(); }

  int requests() const { return requests_; }
  int bad_credentials() const { return bad_credentials_; }
  int skew_refusals() const { return skew_refusals_; }
  int credential_refusals() const { return credential_refusals_; }
  std::vector<std::string> problems() const {
    std::lock_guard<std::mutex> lock(mu_);
    return problems_;
  }
  std::string last_scope() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_scope_;
  }
  std::string last_key_id() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_key_id_;
  }

 private:
  HttpResponse Handle(const HttpRequest& req) {
    ++requests_;
    const Clock::time_point now = Clock::now();
    // "AWS4-HMAC-SHA256 Credential=<key id>/<date>/<region>/dynamodb/aws4_request, ..."
    const std::string authorization = Header(req, "Authorization");
    const size_t begin = authorization.find("Credential=");
    const size_t end = authorization.find(',', begin);
    const std::string credential =
        begin == std::string::npos ? "" : authorization.substr(begin + 11, end - begin - 11);
    const std::string key_id = credential.substr(0, credential.find('/'));
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_key_id_ = key_id;
      last_scope_ = credential.substr(credential.find('/') + 1);
    }
    if (issuer_ != nullptr) {
      const auto issued = issuer_->Find(key_id);
      std::string problem;
      if (!issued) {
        problem = "unknown key " + key_id;
      } else if (now >= issued->expires) {
        problem = key_id + " used " +
                  std::to_string(
                      std::chrono::duration_cast<std::chrono::milliseconds>(now - issued->expires)
                          .count()) +
                  " ms after its expiration";
      } else if (Header(req, "X-Amz-Security-Token") != issued->token) {
        problem = key_id + " signed without its session token";
      }
      if (!problem.empty()) {
        ++bad_credentials_;
        std::lock_guard<std::mutex> lock(mu_);
        problems_.push_back(problem);
      }
    }
    if (refuse_credentials_ > 0) {
      --refuse_credentials_;
      ++credential_refusals_;
      return Answer(400,
                    "{\"__type\":\"com.amazon.coral.service#ExpiredTokenException\","
                    "\"message\":\"The security token included in the request is expired\"}",
                    "application/x-amz-json-1.0");
    }
    const auto server_now = now + std::chrono::milliseconds(clock_ahead_ms_.load());
    std::tm tm{};
    const std::string amz_date = Header(req, "X-Amz-Date");
    if (strptime(amz_date.c_str(), "%Y%m%dT%H%M%SZ", &tm) != nullptr) {
      const auto signed_at = Clock::from_time_t(timegm(&tm));
      if (signed_at < server_now - 5min || signed_at > server_now + 5min) {
        ++skew_refusals_;
        HttpResponse res =
            Answer(400,
                   "{\"__type\":\"com.amazon.coral.service#"
                   "InvalidSignatureException\",\"message\":\"Signature expired: " +
                       amz_date + " is now earlier than the server's time - 5 min.\"}",
                   "application/x-amz-json-1.0");
        res.set(http::field::date, HttpDate(server_now));
        return res;
      }
    }
    HttpResponse res = Forward(req, dynalite_port_);
    res.set(http::field::date, HttpDate(server_now));
    return res;
  }

  const int dynalite_port_;
  const Issuer* const issuer_;
  std::atomic<int> refuse_credentials_{0};
  std::atomic<int64_t> clock_ahead_ms_{0};
  std::atomic<int> requests_{0};
  std::atomic<int> bad_credentials_{0};
  std::atomic<int> skew_refusals_{0};
  std::atomic<int> credential_refusals_{0};
  mutable std::mutex mu_;
  std::vector<std::string> problems_;
  std::string last_scope_;
  std::string last_key_id_;
  HttpStandIn server_;  // last: stopped first, while the state its handler uses still exists
};

std::unique_ptr<devtools::DynaliteSandbox> StartDynalite() {
  auto d = devtools::DynaliteSandbox::Start();
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(d).value();
}

wc::Message Msg() {
  wc::Message m;
  m.topic = "orders";
  m.partition = 0;
  m.offset = 1;
  m.value = "v";
  return m;
}

// Claims and completes keys for `how_long`, one every 50 ms; every call must succeed.
void DriveStore(wc::DynamoStore& store, std::chrono::milliseconds how_long, const char* prefix) {
  const auto until = std::chrono::steady_clock::now() + how_long;
  int n = 0;
  while (std::chrono::steady_clock::now() < until) {
    const std::string key = std::string(prefix) + std::to_string(++n);
    auto claim = store.Acquire("svc", key, "owner", 10s, Msg());
    REQUIRE_MESSAGE(claim.ok(), claim.status().ToString());
    REQUIRE(claim->state == wc::Claim::State::kAcquired);
    auto run = store.Run("svc", key, "owner", 1h, Msg(), 1,
                         [](wc::HandlerContext&) { return wc::HandlerResult::Done("ok"); });
    REQUIRE_MESSAGE(run.ok(), run.status().ToString());
    REQUIRE(run->kind == wc::RunOutcome::Kind::kCompleted);
    std::this_thread::sleep_for(50ms);
  }
}

// Each credential set was replaced before it expired, and no request used a stale one.
void CheckRefreshedBeforeExpiry(const Issuer& issuer, const DynamoWatch& watch, int at_least) {
  const auto issued = issuer.issued();
  CHECK(static_cast<int>(issued.size()) >= at_least);
  for (size_t i = 1; i < issued.size(); ++i) {
    CAPTURE(issued[i].key_id);
    CHECK(issued[i].at < issued[i - 1].expires);
  }
  for (const std::string& p : watch.problems()) FAIL_CHECK(p);
  CHECK(watch.bad_credentials() == 0);
  CHECK(watch.requests() > 20);
}

wc::DynamoStoreOptions StoreOptions(const DynamoWatch& watch) {
  wc::DynamoStoreOptions o;
  o.endpoint = watch.endpoint();
  o.timeout = 3s;
  return o;
}

std::unique_ptr<wc::DynamoStore> Connect(const wc::DynamoStoreOptions& o) {
  auto s = wc::DynamoStore::Connect(o);
  REQUIRE_MESSAGE(s.ok(), s.status().ToString());
  REQUIRE_MESSAGE((*s)->CreateSchema().ok(), "CreateSchema");
  return std::move(s).value();
}

TEST_CASE("IMDSv2: a token first, then two-second credentials fetched again before they expire") {
  Issuer issuer("ASIAIMDS", 2s);
  std::atomic<int> token_puts{0}, tokenless{0};
  std::mutex mu;
  std::vector<std::string> tokens;
  HttpStandIn imds([&](const HttpRequest& req) {
    const std::string target(req.target());
    if (req.method() == http::verb::put && target == "/latest/api/token") {
      if (Header(req, "X-aws-ec2-metadata-token-ttl-seconds").empty())
        return Answer(400, "", "text/plain");
      ++token_puts;
      std::lock_guard<std::mutex> lock(mu);
      tokens.push_back("imds-session-" + std::to_string(tokens.size()));
      return Answer(200, tokens.back(), "text/plain");
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      const std::string token = Header(req, "X-aws-ec2-metadata-token");
      if (std::find(tokens.begin(), tokens.end(), token) == tokens.end()) {
        ++tokenless;
        return Answer(401, "", "text/plain");
      }
    }
    if (target == "/latest/meta-data/iam/security-credentials/")
      return Answer(200, "walrelay-role", "text/plain");
    if (target == "/latest/meta-data/iam/security-credentials/walrelay-role")
      return Answer(200, issuer.NextAsJson(), "text/plain");
    return Answer(404, "", "text/plain");
  });
  auto dynalite = StartDynalite();
  DynamoWatch watch(dynalite->port(), &issuer);
  ScopedAwsEnvironment env({{"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url() + "/"}});
  auto store = Connect(StoreOptions(watch));
  DriveStore(*store, 2500ms, "imds-");
  CheckRefreshedBeforeExpiry(issuer, watch, 3);
  CHECK(token_puts >= 3);
  CHECK(tokenless == 0);
  // The region's scope: nothing configured it, so us-east-1.
  CHECK(watch.last_scope().find("/us-east-1/dynamodb/aws4_request") != std::string::npos);

  SUBCASE("ExpiredTokenException: fetched again and sent once more") {
    const size_t before = issuer.issued().size();
    watch.RefuseCredentials(1);
    auto claim = store->Acquire("svc", "after-refusal", "owner", 10s, Msg());
    REQUIRE_MESSAGE(claim.ok(), claim.status().ToString());
    CHECK(claim->state == wc::Claim::State::kAcquired);
    CHECK(watch.credential_refusals() == 1);
    CHECK(issuer.issued().size() >= before + 1);
    CHECK(watch.last_key_id() == issuer.issued().back().key_id);
  }
  SUBCASE("refused again after fetching anew: a Connection status, no secret in it") {
    watch.RefuseCredentials(2);
    auto claim = store->Acquire("svc", "refused-twice", "owner", 10s, Msg());
    REQUIRE_FALSE(claim.ok());
    CHECK(claim.status().code() == ErrorCode::kConnection);
    CAPTURE(claim.status().message());
    CHECK(claim.status().message().find("ExpiredTokenException") != std::string::npos);
    CHECK(claim.status().message().find("instance metadata") != std::string::npos);
    CHECK(claim.status().message().find("secret-") == std::string::npos);
    CHECK(claim.status().message().find("token-ASIA") == std::string::npos);
  }
}

TEST_CASE("Container credentials: the Authorization token from its file, rotated credentials") {
  Issuer issuer("ASIACONTAINER", 2s);
  std::atomic<int> unauthorized{0};
  HttpStandIn container([&](const HttpRequest& req) {
    if (Header(req, "Authorization") != "container-auth-token") {
      ++unauthorized;
      return Answer(401, "{\"code\":\"Unauthorized\",\"message\":\"bad token\"}");
    }
    if (req.target() != "/v2/credentials/task") return Answer(404, "{}");
    return Answer(200, issuer.NextAsJson());
  });
  auto dynalite = StartDynalite();
  DynamoWatch watch(dynalite->port(), &issuer);

  SUBCASE("the right token") {
    ScopedAwsEnvironment env(
        {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", container.url() + "/v2/credentials/task"},
         {"AWS_REGION", "eu-west-1"}});
    ::setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
             env.File("auth", "container-auth-token\n").c_str(), 1);
    auto store = Connect(StoreOptions(watch));
    DriveStore(*store, 2500ms, "container-");
    CheckRefreshedBeforeExpiry(issuer, watch, 3);
    CHECK(unauthorized == 0);
    CHECK(watch.last_scope().find("/eu-west-1/dynamodb/") != std::string::npos);
  }
  SUBCASE("a wrong token: Connect names the endpoint and its answer, not the token") {
    ScopedAwsEnvironment env(
        {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", container.url() + "/v2/credentials/task"},
         {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "wrong-auth-token"}});
    auto refused = wc::DynamoStore::Connect(StoreOptions(watch));
    REQUIRE_FALSE(refused.ok());
    CAPTURE(refused.status().message());
    CHECK(refused.status().message().find(container.url() + "/v2/credentials/task") !=
          std::string::npos);
    CHECK(refused.status().message().find("401") != std::string::npos);
    CHECK(refused.status().message().find("wrong-auth-token") == std::string::npos);
    CHECK(unauthorized == 1);
  }
}

// "a=1&b=%2F" as a map, decoded.
std::map<std::string, std::string> FormFields(const std::string& body) {
  std::map<std::string, std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    const size_t amp = std::min(body.find('&', start), body.size());
    const std::string pair = body.substr(start, amp - start);
    const size_t eq = pair.find('=');
    std::string value;
    const std::string raw = eq == std::string::npos ? "" : pair.substr(eq + 1);
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '%' && i + 2 < raw.size()) {
        value += static_cast<char>(std::stoi(raw.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        value += raw[i] == '+' ? ' ' : raw[i];
      }
    }
    out[pair.substr(0, eq)] = value;
    start = amp + 1;
  }
  return out;
}

TEST_CASE("Web identity: STS AssumeRoleWithWebIdentity with the token file's current token") {
  Issuer issuer("ASIASTS", 2s);
  std::mutex mu;
  std::vector<std::string> tokens_seen;
  HttpStandIn sts([&](const HttpRequest& req) {
    auto form = FormFields(req.body());
    if (req.method() != http::verb::post || form["Action"] != "AssumeRoleWithWebIdentity" ||
        form["Version"] != "2011-06-15" || form["RoleArn"] != "arn:aws:iam::123456789012:role/w" ||
        form["RoleSessionName"] != "walrelay-test")
      return Answer(400,
                    "<ErrorResponse><Error><Code>InvalidParameterValue</Code><Message>unexpected "
                    "request</Message></Error></ErrorResponse>",
                    "text/xml");
    {
      std::lock_guard<std::mutex> lock(mu);
      tokens_seen.push_back(form["WebIdentityToken"]);
    }
    const Issuer::Issued i = issuer.Next();
    return Answer(200,
                  "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/"
                  "2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>" +
                      i.key_id + "</AccessKeyId><SecretAccessKey>" + i.secret +
                      "</SecretAccessKey><SessionToken>" + i.token + "</SessionToken><Expiration>" +
                      Iso8601(i.expires) +
                      "</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
                      "</AssumeRoleWithWebIdentityResponse>",
                  "text/xml");
  });
  auto dynalite = StartDynalite();
  DynamoWatch watch(dynalite->port(), &issuer);
  ScopedAwsEnvironment env({{"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/w"},
                            {"AWS_ROLE_SESSION_NAME", "walrelay-test"},
                            {"AWS_ENDPOINT_URL_STS", sts.url()}});
  const std::string token_file = env.File("web-token", "jwt-one+/=\n");
  ::setenv("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.c_str(), 1);
  auto store = Connect(StoreOptions(watch));
  DriveStore(*store, 1200ms, "web-");
  env.File("web-token", "jwt-two");  // rotated in place, as EKS does
  DriveStore(*store, 1300ms, "web-rotated-");
  CheckRefreshedBeforeExpiry(issuer, watch, 3);
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(tokens_seen.size() >= 3);
  CHECK(tokens_seen.front() == "jwt-one+/=");
  CHECK(tokens_seen.back() == "jwt-two");
}

TEST_CASE("Shared files: the profile's keys and its region from the config file") {
  auto dynalite = StartDynalite();
  DynamoWatch watch(dynalite->port(), nullptr);
  ScopedAwsEnvironment env(std::map<std::string, std::string>{{"AWS_PROFILE", "svc"}});
  ::setenv("AWS_SHARED_CREDENTIALS_FILE",
           env.File("credentials",
                    "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = d\n"
                    "[svc]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = p\n")
               .c_str(),
           1);
  ::setenv("AWS_CONFIG_FILE",
           env.File("config", "[default]\nregion = us-west-2\n[profile svc]\nregion = eu-north-1\n")
               .c_str(),
           1);
  auto store = Connect(StoreOptions(watch));
  auto claim = store->Acquire("svc", "profile-key", "owner", 10s, Msg());
  REQUIRE_MESSAGE(claim.ok(), claim.status().ToString());
  CHECK(watch.last_key_id() == "AKIDPROFILE");
  CHECK(watch.last_scope().find("/eu-north-1/dynamodb/aws4_request") != std::string::npos);
}

TEST_CASE("Clock skew: a server an hour ahead refuses the first signature, then all is signed "
          "with its clock") {
  auto dynalite = StartDynalite();
  DynamoWatch watch(dynalite->port(), nullptr);
  watch.ClockAhead(1h);
  ScopedAwsEnvironment env({{"AWS_ACCESS_KEY_ID", "AKIDSKEW"}, {"AWS_SECRET_ACCESS_KEY", "s"}});
  std::mutex mu;
  std::vector<std::string> log;
  wc::DynamoStoreOptions o = StoreOptions(watch);
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    log.push_back(line);
  };
  auto store = Connect(o);
  CHECK(watch.skew_refusals() == 1);
  // The batch's claims run on other connections: they share the correction.
  std::vector<wc::Message> messages(4, Msg());
  std::vector<wc::BatchRecord> records;
  for (size_t i = 0; i < messages.size(); ++i) {
    wc::BatchRecord r;
    r.message = &messages[i];
    r.key = "skew-" + std::to_string(i);
    records.push_back(r);
  }
  auto claims = store->AcquireBatch("svc", records, "owner", 10s);
  REQUIRE_MESSAGE(claims.ok(), claims.status().ToString());
  for (const auto& c : *claims) CHECK(c.state == wc::Claim::State::kAcquired);
  DriveStore(*store, 300ms, "skew-");
  CHECK(watch.skew_refusals() == 1);
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(!log.empty());
  CHECK(log.front().find("CLOCK") == 0);
}

TEST_CASE("A refresh that fails while the credentials hold keeps them; once expired, it is an "
          "error; the source back, new ones") {
  Issuer issuer("ASIAOUTAGE", 3s);
  std::atomic<bool> down{false};
  HttpStandIn container([&](const HttpRequest&) {
    if (down) return Answer(503, "{\"code\":\"Unavailable\",\"message\":\"down\"}");
    return Answer(200, issuer.NextAsJson());
  });
  std::mutex mu;
  std::vector<std::string> log;
  wc::CredentialProvider::Options o;
  o.plan.kind = wc::CredentialSourceKind::kContainer;
  o.plan.container_url = container.url() + "/creds";
  o.plan.description = "container credentials (" + o.plan.container_url + ")";
  o.timeout = 1s;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    log.push_back(line);
  };
  const auto start = std::chrono::steady_clock::now();
  auto provider = wc::CredentialProvider::Create(o);
  REQUIRE_MESSAGE(provider.ok(), provider.status().ToString());
  CHECK((*provider)->Current()->access_key_id == "ASIAOUTAGE1");

  down = true;
  std::this_thread::sleep_until(start + 1600ms);  // past the refresh time (half of 3 s)
  auto kept = (*provider)->Current();
  REQUIRE_MESSAGE(kept.ok(), kept.status().ToString());
  CHECK(kept->access_key_id == "ASIAOUTAGE1");
  {
    std::lock_guard<std::mutex> lock(mu);
    REQUIRE(log.size() == 1);
    CHECK(log[0].find("CREDENTIALS refresh from container credentials") == 0);
    CHECK(log[0].find("503") != std::string::npos);
  }

  std::this_thread::sleep_until(start + 3200ms);  // past the expiration
  auto expired = (*provider)->Current();
  REQUIRE_FALSE(expired.ok());
  CAPTURE(expired.status().message());
  CHECK(expired.status().code() == ErrorCode::kConnection);
  CHECK(expired.status().message().find(o.plan.container_url) != std::string::npos);
  CHECK(expired.status().message().find("secret-") == std::string::npos);

  down = false;
  auto back = (*provider)->Current();
  REQUIRE_MESSAGE(back.ok(), back.status().ToString());
  CHECK(back->access_key_id == "ASIAOUTAGE2");
  CHECK((*provider)->fetches() == 2);
}

}  // namespace
}  // namespace walrelay::testing
