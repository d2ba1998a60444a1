// DynamoStore: one item per key in a DynamoDB table, hash key `consumer`, range key
// `idempotency_key`, with attributes state (PENDING, COMPLETED, FAILED), owner, attempts,
// lease_until_ms and locked_at_ms (milliseconds since the epoch on the requesting member's
// clock), expires_at (seconds since the epoch: DynamoDB's TTL attribute), result, last_error,
// payload_hash, the claiming record's topic/kafka_partition/kafka_offset, `fence` (the fencing
// token of the latest claim: every claim adds one) and `done_fence` (the token whose run marked
// it COMPLETED).
//
// Every change is one UpdateItem or PutItem whose ConditionExpression states the state it
// expects, so the server applies it atomically or refuses it (ConditionalCheckFailedException);
// a refused claim is then read with a consistent GetItem to tell a duplicate from a conflict.
// DynamoDB's TTL deletes expired items late (within days), so an item whose expires_at has
// passed is treated as absent: a claim replaces it with a conditional PutItem that keeps the
// fencing token increasing.
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "consumer/aws_credentials.h"
#include "consumer/aws_region.h"
#include "consumer/dynamo_client.h"
#include "consumer/internal.h"
#include "consumer/lease_renewer.h"
#include "walrelay/consumer/dynamo_store.h"

namespace walrelay::consumer {
namespace {

constexpr const char* kConditionFailed = "ConditionalCheckFailedException";

// A JSON string literal.
std::string Q(const std::string& s) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return std::string(buf.GetString(), buf.GetSize());
}
std::string S(const std::string& s) { return "{\"S\":" + Q(s) + "}"; }
std::string N(int64_t n) { return "{\"N\":\"" + std::to_string(n) + "\"}"; }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
// The TTL attribute's value for a time in milliseconds: seconds, rounded up, so an item never
// counts as expired before its time.
int64_t TtlSeconds(int64_t ms) { return (ms + 999) / 1000; }

// The attributes of an item as read back: strings and numbers both as text.
using Item = std::map<std::string, std::string>;

Item ItemOf(const rapidjson::Value& item) {
  Item out;
  if (!item.IsObject()) return out;
  for (const auto& member : item.GetObject()) {
    for (const char* type : {"S", "N"}) {
      const rapidjson::Value* v = JsonMember(member.value, type);
      if (v != nullptr && v->IsString())
        out[member.name.GetString()] = std::string(v->GetString(), v->GetStringLength());
    }
  }
  return out;
}

std::string Get(const Item& item, const std::string& name, const std::string& fallback = "") {
  auto it = item.find(name);
  return it == item.end() ? fallback : it->second;
}
int64_t GetN(const Item& item, const std::string& name) {
  return std::atoll(Get(item, name, "0").c_str());
}

// One conditional write's request, its names and values in ExpressionAttributeNames/Values.
struct Write {
  std::string update;                         // UpdateExpression
  std::string condition;                      // ConditionExpression ("" = none)
  std::map<std::string, std::string> values;  // ":v" -> attribute value JSON
  std::string return_values = "NONE";

  std::string Json(const std::string& table, const std::string& key_json) const {
    std::string j = "{\"TableName\":" + Q(table) + ",\"Key\":" + key_json +
                    ",\"UpdateExpression\":" + Q(update);
    if (!condition.empty()) j += ",\"ConditionExpression\":" + Q(condition);
    // `state`, `owner` and `result` are DynamoDB reserved words; DynamoDB refuses a name or a
    // value that no expression uses, so only those used are sent.
    std::string names;
    for (const auto& [alias, name] :
         {std::pair<const char*, const char*>{"#st", "state"}, {"#ow", "owner"}, {"#rs", "result"}})
      if (update.find(alias) != std::string::npos || condition.find(alias) != std::string::npos)
        names += std::string(names.empty() ? "" : ",") + "\"" + alias + "\":\"" + name + "\"";
    if (!names.empty()) j += ",\"ExpressionAttributeNames\":{" + names + "}";
    j += ",\"ExpressionAttributeValues\":{";
    bool first = true;
    for (const auto& [name, value] : values) {
      j += (first ? "" : ",") + Q(name) + ":" + value;
      first = false;
    }
    j += "},\"ReturnValues\":" + Q(return_values) + "}";
    return j;
  }
};

}  // namespace

struct DynamoStore::Impl {
  DynamoStoreOptions options;
  std::unique_ptr<DynamoClient> client;
  DynamoClient::Options client_options;
  std::chrono::milliseconds lease{30000};
  // The owner and fencing token of each key claimed by Acquire, for the Run that follows.
  std::map<std::string, std::pair<std::string, int64_t>> tokens;
  std::unique_ptr<DynamoClient> renew_client;  // used from the renewer's thread only
  // AcquireBatch's connections, one per claiming thread.
  static constexpr size_t kClaimConnections = 8;
  std::vector<std::unique_ptr<DynamoClient>> claim_clients;

  Result<Claim> ClaimOn(DynamoClient& c, const std::string& consumer, const std::string& key,
                        const std::string& owner, std::chrono::milliseconds lease,
                        const Message& message);
  std::unique_ptr<Renewer> renewer;

  std::string KeyJson(const std::string& consumer, const std::string& key) const {
    return "{\"consumer\":" + S(consumer) + ",\"idempotency_key\":" + S(key) + "}";
  }
  std::string Name(const std::string& consumer, const std::string& key) const {
    return consumer + ":" + key;
  }

  // Sends an UpdateItem; true when applied, false when its condition refused it.
  Result<bool> Update(DynamoClient& c, const std::string& consumer, const std::string& key,
                      const Write& w, rapidjson::Document* attributes = nullptr) {
    auto r = c.Call("UpdateItem", w.Json(options.table, KeyJson(consumer, key)));
    if (!r.ok()) return r.status();
    if (r->error_type == kConditionFailed) return false;
    if (!r->error_type.empty())
      return Status::Precondition(c.where() + " refused UpdateItem on table '" + options.table +
                                  "' for key '" + key + "': " + r->error_type + ": " +
                                  r->error_message);
    if (attributes != nullptr) *attributes = std::move(r->body);
    return true;
  }

  // The item, read consistently; an empty Item when there is none.
  Result<Item> Read(DynamoClient& c, const std::string& consumer, const std::string& key) {
    auto r = c.Call("GetItem", "{\"TableName\":" + Q(options.table) + ",\"Key\":" +
                                   KeyJson(consumer, key) + ",\"ConsistentRead\":true}");
    if (!r.ok()) return r.status();
    if (!r->error_type.empty())
      return Status::Precondition(c.where() + " refused GetItem on table '" + options.table +
                                  "' for key '" + key + "': " + r->error_type + ": " +
                                  r->error_message);
    const rapidjson::Value* item = JsonMember(r->body, "Item");
    return item == nullptr ? Item{} : ItemOf(*item);
  }

  Result<std::string> Renew(const Renewer::Job& job, const std::string& consumer,
                            const std::string& key) {
    if (!renew_client) renew_client = std::make_unique<DynamoClient>(client_options);
    const int64_t now = NowMs();
    Write w;
    w.update = "SET lease_until_ms = :until, expires_at = :exp";
    w.condition = "#st = :pending AND #ow = :me AND fence = :token";
    w.values = {
        {":until", N(now + job.lease.count())},
        {":exp", N(TtlSeconds(now + job.lease.count() + options.pending_retention.count()))},
        {":pending", S("PENDING")},
        {":me", S(job.owner)},
        {":token", N(std::atoll(job.token.c_str()))}};
    auto r = Update(*renew_client, consumer, key, w);
    if (!r.ok()) return r.status();
    return std::string(*r ? "OK" : "LOST");
  }

  HandlerResult RunHandler(const Handler& handler, HandlerContext& ctx, const std::string& consumer,
                           const std::string& owner) {
    // Counted from now until the consumer sets when the claim was sent.
    auto claim = std::make_shared<ClaimLease>(std::chrono::steady_clock::now() + lease);
    ctx.set_claim_lease(claim.get());
    if (!options.renew_leases) return CallHandler(handler, ctx);
    if (!renewer) {
      // The job's key field carries "consumer\nkey": the renewal needs both parts.
      renewer = std::make_unique<Renewer>(
          [this](const Renewer::Job& job) -> Result<std::string> {
            const size_t cut = job.key.find('\n');
            return Renew(job, job.key.substr(0, cut), job.key.substr(cut + 1));
          },
          options.log);
    }
    renewer->Watch({consumer + "\n" + ctx.idempotency_key(), owner,
                    std::to_string(ctx.fencing_token()), lease, claim});
    HandlerResult h = CallHandler(handler, ctx);
    renewer->Unwatch();
    return h;
  }

  // The COMPLETED mark of the claim with `token` (0: this owner's claim, whatever its token).
  // Applied again for the same token when its first reply was lost. True = marked.
  Result<bool> Complete(const std::string& consumer, const std::string& key,
                        const std::string& owner, const std::string& result,
                        std::chrono::milliseconds ttl, int64_t token) {
    const int64_t now = NowMs();
    Write w;
    w.update = "SET #st = :completed, #ow = :none, #rs = :result, completed_at_ms = :now, "
               "expires_at = :exp";
    w.values = {{":completed", S("COMPLETED")},
                {":none", S("")},
                {":result", S(result)},
                {":now", N(now)},
                {":exp", N(TtlSeconds(now + ttl.count()))},
                {":pending", S("PENDING")},
                {":me", S(owner)}};
    if (token > 0) {
      w.update += ", done_fence = :token";
      w.condition = "(#st = :pending AND #ow = :me AND fence = :token) OR "
                    "(#st = :completed AND done_fence = :token)";
      w.values[":token"] = N(token);
    } else {
      w.condition = "#st = :pending AND #ow = :me";
    }
    // A lost connection sends the same mark again (it is idempotent for its token) within the
    // timeout, instead of leaving the caller to claim the key again and repeat the handler.
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    std::chrono::milliseconds pause{20};
    while (true) {
      auto r = Update(*client, consumer, key, w);
      if (r.ok() || r.status().code() != ErrorCode::kConnection || token == 0 ||
          std::chrono::steady_clock::now() + pause > deadline)
        return r;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  }
};

DynamoStore::DynamoStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DynamoStore::~DynamoStore() = default;

Result<std::unique_ptr<DynamoStore>> DynamoStore::Connect(const DynamoStoreOptions& options) {
  if (options.timeout.count() <= 0)
    return Status::Config("DynamoStoreOptions.timeout must be positive");
  if (options.table.empty()) return Status::Config("DynamoStoreOptions.table is empty");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  DynamoStoreOptions& o = impl->options;
  const EnvLookup env = ProcessEnvironment();
  const FileReader read_file = FileSystemReader();
  const AwsProfile profile = LoadAwsProfile(env, read_file);
  const DynamoLocation location = ResolveDynamoLocation(o.region, o.endpoint, env, profile.region);
  o.region = location.region;
  o.endpoint = location.endpoint;
  auto plan = PlanCredentials({o.access_key_id, o.secret_access_key, o.session_token}, env, profile,
                              o.region);
  if (!plan.ok()) return plan.status();
  CredentialProvider::Options provider_options;
  provider_options.plan = std::move(*plan);
  provider_options.timeout = o.timeout;
  provider_options.env = env;
  provider_options.read_file = read_file;
  provider_options.log = o.log;
  auto provider = CredentialProvider::Create(std::move(provider_options));
  if (!provider.ok()) return provider.status();
  auto endpoint = ParseDynamoEndpoint(o.endpoint);
  if (!endpoint.ok())
    return Status::Config(endpoint.status().message() + " (from " + location.endpoint_source + ")");
  impl->client_options.endpoint = *endpoint;
  impl->client_options.region = o.region;
  impl->client_options.credential_provider = std::move(*provider);
  impl->client_options.clock_offset_ms = std::make_shared<std::atomic<int64_t>>(0);
  impl->client_options.timeout = o.timeout;
  impl->client_options.log = o.log;
  impl->client = std::make_unique<DynamoClient>(impl->client_options);
  // One cheap call proves the endpoint answers and the table's name is well formed; a missing
  // table is fine here (CreateSchema may follow).
  auto r = impl->client->Call("DescribeTable", "{\"TableName\":" + Q(o.table) + "}");
  if (!r.ok()) return r.status();
  if (!r->error_type.empty() && r->error_type != "ResourceNotFoundException")
    return Status::Precondition(impl->client->where() + " refused DescribeTable for '" + o.table +
                                "': " + r->error_type + ": " + r->error_message);
  return std::unique_ptr<DynamoStore>(new DynamoStore(std::move(impl)));
}

Status DynamoStore::CreateSchema() {
  Impl& d = *impl_;
  const std::string table = Q(d.options.table);
  auto created = d.client->Call(
      "CreateTable",
      "{\"TableName\":" + table +
          ",\"AttributeDefinitions\":[{\"AttributeName\":\"consumer\",\"AttributeType\":\"S\"},"
          "{\"AttributeName\":\"idempotency_key\",\"AttributeType\":\"S\"}],"
          "\"KeySchema\":[{\"AttributeName\":\"consumer\",\"KeyType\":\"HASH\"},"
          "{\"AttributeName\":\"idempotency_key\",\"KeyType\":\"RANGE\"}],"
          "\"BillingMode\":\"PAY_PER_REQUEST\"}");
  if (!created.ok()) return created.status();
  if (!created->error_type.empty() && created->error_type != "ResourceInUseException")
    return Status::Precondition(d.client->where() + " refused CreateTable '" + d.options.table +
                                "': " + created->error_type + ": " + created->error_message);
  // A new table is CREATING for a while; claims need it ACTIVE.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (true) {
    auto r = d.client->Call("DescribeTable", "{\"TableName\":" + table + "}");
    if (!r.ok()) return r.status();
    std::string status;
    if (const rapidjson::Value* t = JsonMember(r->body, "Table"))
      if (const rapidjson::Value* s = JsonMember(*t, "TableStatus"); s && s->IsString())
        status = s->GetString();
    if (status == "ACTIVE") break;
    if (std::chrono::steady_clock::now() > deadline)
      return Status::Precondition("table '" + d.options.table + "' on " + d.client->where() +
                                  " is not ACTIVE after 60 s (status '" + status + "')");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto ttl = d.client->Call("UpdateTimeToLive",
                            "{\"TableName\":" + table +
                                ",\"TimeToLiveSpecification\":{\"AttributeName\":\"expires_at\","
                                "\"Enabled\":true}}");
  if (!ttl.ok()) return ttl.status();
  // Servers without TTL (dynalite) answer UnknownOperationException: expired items are then
  // treated as absent but never deleted. "already enabled" is a ValidationException.
  if (!ttl->error_type.empty() && ttl->error_type != "UnknownOperationException" &&
      ttl->error_message.find("already enabled") == std::string::npos)
    return Status::Precondition(d.client->where() + " refused UpdateTimeToLive on '" +
                                d.options.table + "': " + ttl->error_type + ": " +
                                ttl->error_message);
  return Status::Ok();
}

// One claim on client `c`. Touches no state of the store, so the claims of a batch can be
// made on several connections at once; the caller records the token.
Result<Claim> DynamoStore::Impl::ClaimOn(DynamoClient& c, const std::string& consumer,
                                         const std::string& key, const std::string& owner,
                                         std::chrono::milliseconds lease, const Message& message) {
  Impl& d = *this;
  const std::string hash = PayloadHash(message);
  // A claim races with other members' writes: each round either writes or reads a state that
  // decides; a state that changed between the refused write and the read is tried again.
  for (int round = 0; round < 8; ++round) {
    const int64_t now = NowMs();
    const int64_t until = now + lease.count();
    Write w;
    w.update = "SET #st = :pending, #ow = :me, lease_until_ms = :until, locked_at_ms = :now, "
               "expires_at = :exp, topic = :topic, kafka_partition = :part, kafka_offset = :off, "
               "payload_hash = if_not_exists(payload_hash, :hash) ADD attempts :one, fence :one";
    // Free: no item, or PENDING, unexpired, and released, ours, or with its lease over.
    w.condition = "attribute_not_exists(#st) OR (#st = :pending AND expires_at > :now_s AND "
                  "(#ow = :none OR #ow = :me OR lease_until_ms <= :now))";
    w.values = {{":pending", S("PENDING")},
                {":me", S(owner)},
                {":none", S("")},
                {":until", N(until)},
                {":now", N(now)},
                {":now_s", N(now / 1000)},
                {":exp", N(TtlSeconds(until + d.options.pending_retention.count()))},
                {":topic", S(message.topic)},
                {":part", N(message.partition)},
                {":off", N(message.offset)},
                {":hash", S(hash)},
                {":one", N(1)}};
    w.return_values = "ALL_OLD";
    rapidjson::Document reply;
    auto applied = d.Update(c, consumer, key, w, &reply);
    if (!applied.ok()) return applied.status();
    if (*applied) {
      Item old;
      if (const rapidjson::Value* a = JsonMember(reply, "Attributes")) old = ItemOf(*a);
      Claim claim;
      const std::string holder = Get(old, "owner");
      if (!holder.empty() && holder != owner) {
        claim.state = Claim::State::kTakenOver;
        claim.previous_owner = holder;
      }
      claim.attempts = static_cast<int>(GetN(old, "attempts") + 1);
      claim.fencing_token = GetN(old, "fence") + 1;
      claim.last_error = Get(old, "last_error");
      claim.payload_hash = Get(old, "payload_hash", hash);
      return claim;
    }
    auto item = d.Read(c, consumer, key);
    if (!item.ok()) return item.status();
    if (item->empty()) continue;  // deleted meanwhile
    const Item& it = *item;
    const std::string state = Get(it, "state");
    const int64_t read_at = NowMs();
    if (GetN(it, "expires_at") <= read_at / 1000 && it.count("expires_at") > 0) {
      // Expired but not yet deleted by TTL: a new key, whose fencing token still grows. The
      // PutItem applies only if nobody changed the item since it was read.
      const int64_t fence = GetN(it, "fence") + 1;
      const int64_t put_until = read_at + lease.count();
      const std::string put =
          "{\"TableName\":" + Q(d.options.table) + ",\"Item\":{\"consumer\":" + S(consumer) +
          ",\"idempotency_key\":" + S(key) + ",\"state\":" + S("PENDING") +
          ",\"owner\":" + S(owner) + ",\"attempts\":" + N(1) + ",\"fence\":" + N(fence) +
          ",\"lease_until_ms\":" + N(put_until) + ",\"locked_at_ms\":" + N(read_at) +
          ",\"expires_at\":" + N(TtlSeconds(put_until + d.options.pending_retention.count())) +
          ",\"payload_hash\":" + S(hash) + ",\"topic\":" + S(message.topic) +
          ",\"kafka_partition\":" + N(message.partition) +
          ",\"kafka_offset\":" + N(message.offset) +
          "},\"ConditionExpression\":\"expires_at = :seen AND " +
          (it.count("fence") > 0 ? "fence = :fence" : "attribute_not_exists(fence)") +
          "\",\"ExpressionAttributeValues\":{\":seen\":" + N(GetN(it, "expires_at")) +
          (it.count("fence") > 0 ? ",\":fence\":" + N(GetN(it, "fence")) : std::string()) + "}}";
      auto r = c.Call("PutItem", put);
      if (!r.ok()) return r.status();
      if (r->error_type == kConditionFailed) continue;
      if (!r->error_type.empty())
        return Status::Precondition(c.where() + " refused PutItem on table '" + d.options.table +
                                    "' for key '" + key + "': " + r->error_type + ": " +
                                    r->error_message);
      Claim claim;
      claim.attempts = 1;
      claim.fencing_token = fence;
      claim.payload_hash = hash;
      return claim;
    }
    Claim claim;
    claim.attempts = static_cast<int>(GetN(it, "attempts"));
    claim.last_error = Get(it, "last_error");
    claim.payload_hash = Get(it, "payload_hash");
    if (state == "COMPLETED") {
      claim.state = Claim::State::kDuplicate;
      claim.result = Get(it, "result");
      return claim;
    }
    if (state == "FAILED") {
      claim.state = Claim::State::kFailed;
      return claim;
    }
    const std::string holder = Get(it, "owner");
    const int64_t lease_end = GetN(it, "lease_until_ms");
    if (state == "PENDING" && !holder.empty() && holder != owner && lease_end > read_at) {
      claim.state = Claim::State::kConflict;
      claim.previous_owner = holder;
      claim.retry_after = std::chrono::milliseconds(lease_end - read_at);
      return claim;
    }
    // Free again by now (released, or its lease just ended): claim in the next round.
  }
  return Status::Internal("claiming key '" + key + "' on " + c.where() +
                          " kept racing with other writers");
}

Result<Claim> DynamoStore::Acquire(const std::string& consumer, const std::string& key,
                                   const std::string& owner, std::chrono::milliseconds lease,
                                   const Message& message) {
  Impl& d = *impl_;
  auto claim = d.ClaimOn(*d.client, consumer, key, owner, lease, message);
  if (claim.ok() && claim->fencing_token > 0) {
    d.lease = lease;
    d.tokens[d.Name(consumer, key)] = {owner, claim->fencing_token};
  }
  return claim;
}

Result<std::vector<Claim>> DynamoStore::AcquireBatch(const std::string& consumer,
                                                     const std::vector<BatchRecord>& records,
                                                     const std::string& owner,
                                                     std::chrono::milliseconds lease) {
  Impl& d = *impl_;
  if (records.size() < 2) return IdempotencyStore::AcquireBatch(consumer, records, owner, lease);
  // DynamoDB has no batched conditional write (TransactWriteItems is all or nothing): the
  // batch's claims, each its own conditional write on distinct keys, go out on several
  // connections at once, so a batch costs a few round trips instead of one per record.
  const size_t workers = std::min(records.size(), Impl::kClaimConnections);
  while (d.claim_clients.size() < workers)
    d.claim_clients.push_back(std::make_unique<DynamoClient>(d.client_options));
  std::vector<std::optional<Result<Claim>>> answers(records.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&d, &answers, &next, &records, &consumer, &owner, lease, w] {
      for (size_t i = next++; i < records.size(); i = next++)
        answers[i] = d.ClaimOn(*d.claim_clients[w], consumer, records[i].key, owner, lease,
                               *records[i].message);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<Claim> claims;
  claims.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    if (!answers[i]->ok()) return answers[i]->status();
    claims.push_back(std::move(*answers[i]).value());
    if (claims.back().fencing_token > 0) {
      d.lease = lease;
      d.tokens[d.Name(consumer, records[i].key)] = {owner, claims.back().fencing_token};
    }
  }
  return claims;
}

Result<RunOutcome> DynamoStore::Run(const std::string& consumer, const std::string& key,
                                    const std::string& owner,
                                    std::chrono::milliseconds completed_ttl, const Message& message,
                                    int attempt, const Handler& handler) {
  Impl& d = *impl_;
  // The token of this owner's claim; 0 (owner checked alone) for a claim made elsewhere.
  auto known = d.tokens.find(d.Name(consumer, key));
  const bool ours = known != d.tokens.end() && known->second.first == owner;
  const int64_t token = ours ? known->second.second : 0;
  RunOutcome out;
  HandlerContext ctx(message, key, attempt, nullptr, token);
  out.handler = d.RunHandler(handler, ctx, consumer, owner);
  if (out.handler.kind != HandlerResult::Kind::kDone) {
    out.kind = RunOutcome::Kind::kFailed;
    return out;
  }
  auto marked = d.Complete(consumer, key, owner, out.handler.result, completed_ttl, token);
  if (!marked.ok()) return marked.status().WithContext("completing key '" + key + "'");
  if (auto now_known = d.tokens.find(d.Name(consumer, key));
      now_known != d.tokens.end() && now_known->second == std::make_pair(owner, token))
    d.tokens.erase(now_known);
  out.kind = *marked ? RunOutcome::Kind::kCompleted : RunOutcome::Kind::kLost;
  return out;
}

Status DynamoStore::Release(const std::string& consumer, const std::string& key,
                            const std::string& owner, const std::string& error) {
  Impl& d = *impl_;
  d.tokens.erase(d.Name(consumer, key));
  Write w;
  w.update = "SET #ow = :none, last_error = :err";
  w.condition = "#st = :pending AND #ow = :me";
  w.values = {{":none", S("")}, {":err", S(error)}, {":pending", S("PENDING")}, {":me", S(owner)}};
  auto r = d.Update(*d.client, consumer, key, w);
  return r.ok() ? Status::Ok() : r.status().WithContext("releasing key '" + key + "'");
}

Status DynamoStore::Unclaim(const std::string& consumer, const std::string& key,
                            const std::string& owner) {
  Impl& d = *impl_;
  d.tokens.erase(d.Name(consumer, key));
  Write w;
  w.update = "SET #ow = :none ADD attempts :minus";
  w.condition = "#st = :pending AND #ow = :me";
  w.values = {{":none", S("")}, {":minus", N(-1)}, {":pending", S("PENDING")}, {":me", S(owner)}};
  auto r = d.Update(*d.client, consumer, key, w);
  return r.ok() ? Status::Ok() : r.status().WithContext("giving back key '" + key + "'");
}

Result<bool> DynamoStore::MarkFailed(const std::string& consumer, const std::string& key,
                                     const std::string& owner, int64_t fencing_token,
                                     const std::string& error,
                                     std::chrono::milliseconds failed_ttl) {
  Impl& d = *impl_;
  d.tokens.erase(d.Name(consumer, key));
  const int64_t now = NowMs();
  Write w;
  w.update = "SET #st = :failed, #ow = :none, last_error = :err, expires_at = :exp";
  // Only this claim's failure, or a key no longer there: a COMPLETED key, or one another
  // claim holds, is left alone.
  w.condition = "attribute_not_exists(#st) OR (#st = :pending AND #ow = :me" +
                std::string(fencing_token > 0 ? " AND fence = :token)" : ")");
  w.values = {{":failed", S("FAILED")},   {":none", S("")},
              {":err", S(error)},         {":exp", N(TtlSeconds(now + failed_ttl.count()))},
              {":pending", S("PENDING")}, {":me", S(owner)}};
  if (fencing_token > 0) w.values[":token"] = N(fencing_token);
  auto r = d.Update(*d.client, consumer, key, w);
  if (!r.ok()) return r.status().WithContext("marking key '" + key + "' FAILED");
  return *r;
}

Result<int64_t> DynamoStore::CleanupBatch(int) { return int64_t{0}; }

}  // namespace walrelay::consumer
