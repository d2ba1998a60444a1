// RedisStore: one hash per key, <prefix><consumer>:<key>, with fields state, owner, attempts,
// locked_at, expires_at (milliseconds on the Redis server's clock), result, last_error and the
// claiming record's topic/partition/offset. Every change is a Lua script, so each is atomic,
// and every time comes from redis.call('TIME') inside the script: clients' clocks never
// decide whether a lease has ended. Redis 7 replicates script effects, not the script, so
// TIME is allowed in scripts that write.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <memory>

#include "consumer/internal.h"
#include "consumer/redis_cluster.h"
#include "walrelay/consumer.h"

namespace walrelay::consumer {
namespace {

// KEYS[1] key. ARGV: owner, lease ms, pending retention ms, topic, partition, offset.
// Returns {verdict, attempts, result, last_error, other owner, retry after ms}; verdict is
// ACQUIRED, TAKEN_OVER, DUPLICATE, FAILED or CONFLICT. Only ACQUIRED and TAKEN_OVER count an
// attempt and write the claim.
constexpr const char* kAcquireScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key, owner = KEYS[1], ARGV[1]
local lease, keep = tonumber(ARGV[2]), tonumber(ARGV[3])
local f = redis.call('HMGET', key, 'state', 'owner', 'expires_at', 'attempts', 'result', 'last_error')
local state, holder = f[1], f[2] or ''
local attempts, result, last_error = f[4] or '0', f[5] or '', f[6] or ''
if state == 'COMPLETED' then return {'DUPLICATE', attempts, result, last_error, '', '0'} end
if state == 'FAILED' then return {'FAILED', attempts, '', last_error, '', '0'} end
local verdict, previous = 'ACQUIRED', ''
if state == 'PENDING' and holder ~= '' and holder ~= owner then
  local expires = tonumber(f[3] or '0')
  if expires > now then
    return {'CONFLICT', attempts, '', last_error, holder, tostring(expires - now)}
  end
  verdict, previous = 'TAKEN_OVER', holder
end
attempts = redis.call('HINCRBY', key, 'attempts', 1)
redis.call('HSET', key, 'state', 'PENDING', 'owner', owner, 'locked_at', now,
           'expires_at', now + lease, 'topic', ARGV[4], 'partition', ARGV[5], 'offset', ARGV[6])
redis.call('PEXPIRE', key, lease + keep)
return {verdict, tostring(attempts), '', last_error, previous, '0'}
)lua";

// KEYS[1] key. ARGV: owner, result, completed ttl ms. OK, or LOST when the claim is no
// longer this owner's.
constexpr const char* kCompleteScript = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'owner')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[1] then return 'LOST' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'state', 'COMPLETED', 'owner', '', 'result', ARGV[2],
           'completed_at', now, 'expires_at', now + ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return 'OK'
)lua";

// KEYS[1] key. ARGV: owner, error. Frees the claim, keeping the key PENDING with its
// attempts. OK, or LOST.
constexpr const char* kReleaseScript = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'owner')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[1] then return 'LOST' end
redis.call('HSET', KEYS[1], 'owner', '', 'last_error', ARGV[2])
return 'OK'
)lua";

// KEYS[1] key. ARGV: error, failed ttl ms. OK, or COMPLETED (left alone).
constexpr const char* kFailScript = R"lua(
if redis.call('HGET', KEYS[1], 'state') == 'COMPLETED' then return 'COMPLETED' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'state', 'FAILED', 'owner', '', 'last_error', ARGV[1],
           'expires_at', now + ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return 'OK'
)lua";

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

enum ScriptId { kAcquire, kComplete, kRelease, kFail, kScriptCount };
constexpr const char* kScripts[kScriptCount] = {kAcquireScript, kCompleteScript, kReleaseScript,
                                                kFailScript};
constexpr const char* kScriptNames[kScriptCount] = {"acquire", "complete", "release", "fail"};

std::string Str(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
                          r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : "";
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()); }

}  // namespace

struct RedisStore::Impl {
  RedisStoreOptions options;
  ContextPtr ctx;                          // single-node mode
  std::unique_ptr<RedisCluster> cluster;   // cluster mode
  std::string sha[kScriptCount];

  std::string where() const {
    if (!options.cluster_nodes.empty()) {
      std::string seeds;
      for (const auto& n : options.cluster_nodes) seeds += (seeds.empty() ? "" : ",") + n;
      return "Redis Cluster (seeds " + seeds + ")";
    }
    return "Redis at " + options.host + ":" + std::to_string(options.port);
  }

  // Sends one command; a transport failure drops the connection so the next call reconnects.
  Result<ReplyPtr> Command(const std::vector<std::string>& args) {
    WALRELAY_RETURN_IF_ERROR(EnsureConnected());
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    ReplyPtr reply(static_cast<redisReply*>(
        redisCommandArgv(ctx.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!reply) {
      const std::string why = ctx->errstr;
      ctx.reset();
      return Status::Connection("lost connection to " + where() + ": " + why);
    }
    return reply;
  }

  Status EnsureConnected() {
    if (ctx) return Status::Ok();
    timeval tv{};
    tv.tv_sec = options.timeout.count() / 1000;
    tv.tv_usec = (options.timeout.count() % 1000) * 1000;
    ContextPtr c(redisConnectWithTimeout(options.host.c_str(), options.port, tv));
    if (!c) return Status::Connection("out of memory connecting to " + where());
    if (c->err != 0) return Status::Connection("cannot connect to " + where() + ": " + c->errstr);
    if (redisSetTimeout(c.get(), tv) != REDIS_OK)
      return Status::Connection("cannot set the command timeout for " + where());
    ctx = std::move(c);
    if (!options.password.empty()) {
      std::vector<std::string> auth = {"AUTH"};
      if (!options.username.empty()) auth.push_back(options.username);
      auth.push_back(options.password);
      auto r = Command(auth);
      if (!r.ok()) return r.status();
      if ((*r)->type == REDIS_REPLY_ERROR) {
        ctx.reset();
        // The server's words ("WRONGPASS invalid username-password pair") hold no secret.
        return Status::Connection(where() + " refused AUTH: " + Str(r->get()));
      }
    }
    for (int i = 0; i < kScriptCount; ++i) {
      if (Status st = Load(static_cast<ScriptId>(i)); !st.ok()) {
        ctx.reset();
        return st;
      }
    }
    return Status::Ok();
  }

  Status Load(ScriptId id) {
    // ctx is already set here, so Command() does not come back into EnsureConnected's loads.
    auto r = Command({"SCRIPT", "LOAD", kScripts[id]});
    if (!r.ok()) return r.status();
    const redisReply* reply = r->get();
    if (reply->type != REDIS_REPLY_STRING)
      return Status::Precondition(where() + " refused to load the " + kScriptNames[id] +
                                  " script: " + Str(reply));
    sha[id] = Str(reply);
    return Status::Ok();
  }

  // Cluster mode: connects to the seeds and learns the scripts' digests from one node; every
  // other node learns a script on its first NOSCRIPT.
  Status ConnectCluster() {
    RedisClusterOptions o;
    o.seeds = options.cluster_nodes;
    o.username = options.username;
    o.password = options.password;
    o.timeout = options.timeout;
    o.log = options.log;
    auto c = RedisCluster::Connect(std::move(o));
    if (!c.ok()) return c.status();
    cluster = std::move(c).value();
    for (int i = 0; i < kScriptCount; ++i) {
      auto r = cluster->Command("", {"SCRIPT", "LOAD", kScripts[i]});
      if (!r.ok()) return r.status();
      if ((*r)->type != REDIS_REPLY_STRING)
        return Status::Precondition(where() + " refused to load the " + kScriptNames[i] +
                                    " script: " + Str(r->get()));
      sha[i] = Str(r->get());
    }
    return Status::Ok();
  }

  // Cluster mode: EVALSHA on the key's master; on NOSCRIPT (a node that never saw the script,
  // a promoted replica, a restart) EVAL, which loads it there. `node` receives who answered.
  Result<ReplyPtr> EvalCluster(ScriptId id, const std::string& key,
                               const std::vector<std::string>& argv, std::string* node) {
    std::vector<std::string> args = {"EVALSHA", sha[id], "1", key};
    args.insert(args.end(), argv.begin(), argv.end());
    auto r = cluster->Command(key, args, node);
    if (r.ok() && (*r)->type == REDIS_REPLY_ERROR && Str(r->get()).rfind("NOSCRIPT", 0) == 0) {
      args[0] = "EVAL";
      args[1] = kScripts[id];
      r = cluster->Command(key, args, node);
    }
    if (!r.ok()) return r.status();
    ReplyPtr reply(r->release());
    if (reply->type == REDIS_REPLY_ERROR)
      return Status::Precondition(where() + ": the " + kScriptNames[id] + " script failed for " +
                                  key + " on " + *node + ": " + Str(reply.get()));
    return reply;
  }

  // After a COMPLETED mark: WAIT for wait_replicas on the connection that wrote it.
  void WaitForReplicas(const std::string& key, const std::string& node) {
    if (options.wait_replicas <= 0) return;
    const std::vector<std::string> args = {"WAIT", std::to_string(options.wait_replicas),
                                           Ms(options.wait_timeout)};
    long long acked = -1;
    std::string problem;
    if (cluster) {
      auto r = cluster->CommandOnNode(node, args);
      if (r.ok() && (*r)->type == REDIS_REPLY_INTEGER) acked = (*r)->integer;
      else problem = r.ok() ? Str(r->get()) : r.status().message();
    } else {
      auto r = Command(args);
      if (r.ok() && (*r)->type == REDIS_REPLY_INTEGER) acked = (*r)->integer;
      else problem = r.ok() ? Str(r->get()) : r.status().message();
    }
    if (acked >= options.wait_replicas) return;
    if (options.log)
      options.log("WAIT the COMPLETED mark of " + key + " reached " +
                  std::to_string(std::max(acked, 0LL)) + " of " +
                  std::to_string(options.wait_replicas) + " replicas within " +
                  Ms(options.wait_timeout) + " ms" + (problem.empty() ? "" : ": " + problem));
  }

  // EVALSHA, loading the script again if the server lost it (restart, SCRIPT FLUSH).
  Result<ReplyPtr> Eval(ScriptId id, const std::string& key, const std::vector<std::string>& argv,
                        std::string* node = nullptr) {
    if (cluster) {
      std::string answered;
      return EvalCluster(id, key, argv, node != nullptr ? node : &answered);
    }
    for (int round = 0; round < 2; ++round) {
      WALRELAY_RETURN_IF_ERROR(EnsureConnected());
      std::vector<std::string> args = {"EVALSHA", sha[id], "1", key};
      args.insert(args.end(), argv.begin(), argv.end());
      auto r = Command(args);
      if (!r.ok()) return r.status();
      if ((*r)->type != REDIS_REPLY_ERROR) return r;
      const std::string err = Str(r->get());
      if (err.rfind("NOSCRIPT", 0) == 0 && round == 0) {
        WALRELAY_RETURN_IF_ERROR(Load(id));
        continue;
      }
      return Status::Precondition(where() + ": the " + kScriptNames[id] + " script failed for " +
                                  key + ": " + err);
    }
    return Status::Internal("unreachable");
  }

  std::string KeyName(const std::string& consumer, const std::string& key) const {
    return options.key_prefix + consumer + ":" + key;
  }
};

RedisStore::RedisStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisStore::~RedisStore() = default;

Result<std::unique_ptr<RedisStore>> RedisStore::Connect(const RedisStoreOptions& options) {
  if (options.port < 1 || options.port > 65535)
    return Status::Config("RedisStoreOptions.port " + std::to_string(options.port) +
                          " is not a TCP port");
  if (options.timeout.count() <= 0)
    return Status::Config("RedisStoreOptions.timeout must be positive");
  if (options.wait_replicas < 0)
    return Status::Config("RedisStoreOptions.wait_replicas must not be negative");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.cluster_nodes.empty()) {
    WALRELAY_RETURN_IF_ERROR(impl->EnsureConnected());
  } else {
    WALRELAY_RETURN_IF_ERROR(impl->ConnectCluster());
  }
  return std::unique_ptr<RedisStore>(new RedisStore(std::move(impl)));
}

Result<Claim> RedisStore::Acquire(const std::string& consumer, const std::string& key,
                                  const std::string& owner, std::chrono::milliseconds lease,
                                  const Message& message) {
  Impl& d = *impl_;
  const std::string name = d.KeyName(consumer, key);
  auto r = d.Eval(kAcquire, name,
                  {owner, Ms(lease), Ms(d.options.pending_retention), message.topic,
                   std::to_string(message.partition), std::to_string(message.offset)});
  if (!r.ok()) return r.status();
  const redisReply* rep = r->get();
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 6)
    return Status::Internal(d.where() + ": unexpected acquire reply for " + name);
  const std::string verdict = Str(rep->element[0]);
  Claim c;
  c.attempts = std::atoi(Str(rep->element[1]).c_str());
  c.result = Str(rep->element[2]);
  c.last_error = Str(rep->element[3]);
  c.previous_owner = Str(rep->element[4]);
  c.retry_after = std::chrono::milliseconds(std::atoll(Str(rep->element[5]).c_str()));
  if (verdict == "ACQUIRED") c.state = Claim::State::kAcquired;
  else if (verdict == "TAKEN_OVER") c.state = Claim::State::kTakenOver;
  else if (verdict == "DUPLICATE") c.state = Claim::State::kDuplicate;
  else if (verdict == "FAILED") c.state = Claim::State::kFailed;
  else if (verdict == "CONFLICT") c.state = Claim::State::kConflict;
  else return Status::Internal(d.where() + ": unknown acquire verdict '" + verdict + "'");
  return c;
}

Result<RunOutcome> RedisStore::Run(const std::string& consumer, const std::string& key,
                                   const std::string& owner,
                                   std::chrono::milliseconds completed_ttl, const Message& message,
                                   int attempt, const Handler& handler) {
  RunOutcome out;
  HandlerContext ctx(message, key, attempt, nullptr);
  out.handler = CallHandler(handler, ctx);
  if (out.handler.kind != HandlerResult::Kind::kDone) {
    out.kind = RunOutcome::Kind::kFailed;
    return out;
  }
  const std::string name = impl_->KeyName(consumer, key);
  std::string node;
  auto r = impl_->Eval(kComplete, name, {owner, out.handler.result, Ms(completed_ttl)}, &node);
  if (!r.ok()) return r.status().WithContext("completing key '" + key + "'");
  out.kind = Str(r->get()) == "OK" ? RunOutcome::Kind::kCompleted : RunOutcome::Kind::kLost;
  if (out.kind == RunOutcome::Kind::kCompleted) impl_->WaitForReplicas(name, node);
  return out;
}

Status RedisStore::Release(const std::string& consumer, const std::string& key,
                           const std::string& owner, const std::string& error) {
  auto r = impl_->Eval(kRelease, impl_->KeyName(consumer, key), {owner, error});
  return r.ok() ? Status::Ok() : r.status().WithContext("releasing key '" + key + "'");
}

Status RedisStore::MarkFailed(const std::string& consumer, const std::string& key,
                              const std::string& error, std::chrono::milliseconds failed_ttl) {
  auto r = impl_->Eval(kFail, impl_->KeyName(consumer, key), {error, Ms(failed_ttl)});
  return r.ok() ? Status::Ok() : r.status().WithContext("marking key '" + key + "' FAILED");
}

Result<int64_t> RedisStore::CleanupBatch(int) { return int64_t{0}; }

}  // namespace walrelay::consumer
