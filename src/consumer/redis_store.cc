// RedisStore: one hash per key, <prefix><consumer>:<key>, with fields state, owner, attempts,
// locked_at, expires_at (milliseconds on the Redis server's clock), result, last_error, the
// claiming record's topic/partition/offset, `fence` (the fencing token of the latest claim:
// every claim increments it) and `done_fence` (the token whose run marked it COMPLETED). Every
// change is a Lua script, so each is atomic, and every time comes from redis.call('TIME') inside
// the script: clients' clocks never decide whether a lease has ended. Redis 7 replicates script
// effects, not the script, so TIME is allowed in scripts that write.
#include <hiredis/hiredis.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "consumer/internal.h"
#include "consumer/lease_renewer.h"
#include "consumer/redis_cluster.h"
#include "walrelay/consumer/redis_store.h"

namespace walrelay::consumer {
namespace {

// The acquire script (kAcquireFunction + kAcquireTail): KEYS[1] key. ARGV: owner, lease ms,
// pending retention ms, topic, partition, offset, payload hash. Returns {verdict, attempts, result,
// last_error, other owner, retry after ms, fencing token, the key's payload hash (set by its first
// claim)}; verdict is ACQUIRED, TAKEN_OVER, DUPLICATE, FAILED or CONFLICT. Only ACQUIRED and
// TAKEN_OVER count an attempt, write the claim and take a new fencing token. The claim of one key
// at `now`, shared by the acquire and acquire-batch scripts.
constexpr const char* kAcquireFunction = R"lua(
local function acquire(now, key, owner, lease, keep, topic, part, off, payload_hash)
  local f = redis.call('HMGET', key, 'state', 'owner', 'expires_at', 'attempts', 'result',
                       'last_error', 'payload_hash')
  local state, holder = f[1], f[2] or ''
  local attempts, result, last_error, hash = f[4] or '0', f[5] or '', f[6] or '', f[7] or ''
  if state == 'COMPLETED' then
    return {'DUPLICATE', attempts, result, last_error, '', '0', '0', hash}
  end
  if state == 'FAILED' then return {'FAILED', attempts, '', last_error, '', '0', '0', hash} end
  if not state and not f[4] then
    -- A new key (the common case): the claim in one write, attempt 1, fencing token 1.
    redis.call('HSET', key, 'state', 'PENDING', 'owner', owner, 'locked_at', now,
               'expires_at', now + lease, 'topic', topic, 'partition', part, 'offset', off,
               'attempts', 1, 'fence', 1, 'payload_hash', payload_hash)
    redis.call('PEXPIRE', key, lease + keep)
    return {'ACQUIRED', '1', '', '', '', '0', '1', payload_hash}
  end
  local verdict, previous = 'ACQUIRED', ''
  if state == 'PENDING' and holder ~= '' and holder ~= owner then
    local expires = tonumber(f[3] or '0')
    if expires > now then
      return {'CONFLICT', attempts, '', last_error, holder, tostring(expires - now), '0', hash}
    end
    verdict, previous = 'TAKEN_OVER', holder
  end
  attempts = redis.call('HINCRBY', key, 'attempts', 1)
  local fence = redis.call('HINCRBY', key, 'fence', 1)
  if hash == '' then
    hash = payload_hash
    redis.call('HSET', key, 'payload_hash', hash)
  end
  redis.call('HSET', key, 'state', 'PENDING', 'owner', owner, 'locked_at', now,
             'expires_at', now + lease, 'topic', topic, 'partition', part, 'offset', off)
  redis.call('PEXPIRE', key, lease + keep)
  return {verdict, tostring(attempts), '', last_error, previous, '0', tostring(fence), hash}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
)lua";
constexpr const char* kAcquireTail = R"lua(
return acquire(now, KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5],
               ARGV[6], ARGV[7])
)lua";

// KEYS: the batch's keys (all on one server: single-node stores only). ARGV: owner, lease ms,
// pending retention ms, then topic, partition, offset and payload hash per key. Returns the
// acquire script's reply per key, in order: one script call claims a batch's keys (the
// acquire script per key costs Redis a script call each).
constexpr const char* kAcquireBatchTail = R"lua(
local owner, lease, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 4
  out[i] = acquire(now, KEYS[i], owner, lease, keep, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
                   ARGV[a + 4])
end
return out
)lua";

// KEYS[1] key. ARGV: owner, result, completed ttl ms, fencing token. OK, or LOST when the
// claim is no longer this owner's, or no longer the claim with this token (a later claim took
// the key over: only the current token may mark it). OK also when this very claim's mark is
// there already: the reply to an earlier send of the same mark was lost with its connection.
constexpr const char* kCompleteScript = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'fence', 'done_fence')
if f[1] == 'COMPLETED' and ARGV[4] ~= '' and f[4] == ARGV[4] then return 'OK' end
if f[1] ~= 'PENDING' or f[2] ~= ARGV[1] then return 'LOST' end
if ARGV[4] ~= '' and (f[3] or '0') ~= ARGV[4] then return 'LOST' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'state', 'COMPLETED', 'owner', '', 'result', ARGV[2],
           'completed_at', now, 'expires_at', now + ttl, 'done_fence', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ttl)
return 'OK'
)lua";

// KEYS[1] key. ARGV: owner, fencing token, lease ms, pending retention ms. Extends the lease
// of the claim with this token while its handler runs: OK, or LOST.
constexpr const char* kRenewScript = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'fence')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[1] or (f[3] or '0') ~= ARGV[2] then return 'LOST' end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'expires_at', now + tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + tonumber(ARGV[4]))
return 'OK'
)lua";

// KEYS[1] key. ARGV: owner. Gives back a claim no handler used, uncounting its attempt.
constexpr const char* kUnclaimScript = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'attempts')
if f[1] ~= 'PENDING' or f[2] ~= ARGV[1] then return 'LOST' end
redis.call('HSET', KEYS[1], 'owner', '', 'attempts', math.max(0, tonumber(f[3] or '1') - 1))
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

// KEYS[1] key. ARGV: error, failed ttl ms, owner, fencing token ('' = the owner alone). OK;
// COMPLETED or LOST (left alone) when the key is done or held by another claim: a stale
// holder's failure never overrides the current holder.
constexpr const char* kFailScript = R"lua(
local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'fence')
if f[1] == 'COMPLETED' then return 'COMPLETED' end
if f[1] then
  if f[1] ~= 'PENDING' or f[2] ~= ARGV[3] then return 'LOST' end
  if ARGV[4] ~= '' and (f[3] or '0') ~= ARGV[4] then return 'LOST' end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'state', 'FAILED', 'owner', '', 'last_error', ARGV[1],
           'expires_at', now + ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return 'OK'
)lua";

enum ScriptId {
  kAcquire,
  kComplete,
  kRelease,
  kFail,
  kRenew,
  kUnclaim,
  kAcquireBatch,
  kScriptCount
};
// The scripts' texts by ScriptId.
const char* const* Scripts() {
  static const std::string acquire = std::string(kAcquireFunction) + kAcquireTail;
  static const std::string acquire_batch = std::string(kAcquireFunction) + kAcquireBatchTail;
  static const char* const all[kScriptCount] = {
      acquire.c_str(), kCompleteScript, kReleaseScript,       kFailScript,
      kRenewScript,    kUnclaimScript,  acquire_batch.c_str()};
  return all;
}
constexpr const char* kScriptNames[kScriptCount] = {"acquire", "complete", "release",      "fail",
                                                    "renew",   "unclaim",  "acquire-batch"};

// Keys per acquire-batch call: a call blocks the server while it runs (about 10 µs a key), so
// a batch of thousands goes as several calls, pipelined.
constexpr size_t kKeysPerAcquireCall = 250;
// Keys per acquire-batch call when the claims overlap the handlers (ClaimAndRunBatch): the
// handlers wait only for the first call's reply, and Redis claims the later keys meanwhile.
constexpr size_t kKeysPerOverlappedCall = 50;

std::string Str(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
                          r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : "";
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()); }

// A script's error reply as a Status: the answers of a server that will serve again shortly
// (loading its data, a script running too long, a cluster or master failing over, a replica
// answering for a demoted master) are transient, like a lost connection, so the consumer tries
// again and keeps polling; anything else is a setup problem an operator must fix.
Status ScriptFailure(const std::string& what, const std::string& error) {
  for (const char* transient :
       {"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOREPLICAS"})
    if (error.rfind(transient, 0) == 0)
      return Status::Connection(what + " (the server will answer again): " + error);
  return Status::Precondition(what + ": " + error);
}

using Clock = std::chrono::steady_clock;

}  // namespace

struct RedisStore::Impl {
  RedisStoreOptions options;
  RedisContextPtr ctx;                    // single-node mode
  std::unique_ptr<RedisCluster> cluster;  // cluster mode
  std::string sha[kScriptCount];
  // The lease of the latest claims, and the fencing token of each key claimed one by one
  // (Acquire), for the Run that follows.
  std::chrono::milliseconds lease{30000};
  std::map<std::string, int64_t> tokens;
  // Lease renewal: its own connection, used from the renewer's thread only.
  std::unique_ptr<Impl> renew_link;
  std::unique_ptr<Renewer> renewer;

  void Log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  // Connects this link (single node or cluster).
  Status Open() { return options.cluster_nodes.empty() ? EnsureConnected() : ConnectCluster(); }

  // Runs the handler with the claim's lease renewed meanwhile (when renew_leases is on).
  HandlerResult RunHandler(const Handler& handler, HandlerContext& ctx, const std::string& name,
                           const std::string& owner) {
    // Counted from now until the consumer sets when the claim was sent.
    auto claim = std::make_shared<ClaimLease>(Clock::now() + lease);
    ctx.set_claim_lease(claim.get());
    if (!options.renew_leases) return CallHandler(handler, ctx);
    if (!renewer) {
      renewer = std::make_unique<Renewer>(
          [this](const Renewer::Job& job) -> Result<std::string> {
            if (!renew_link) {
              auto link = std::make_unique<Impl>();
              link->options = options;
              link->options.renew_leases = false;
              WALRELAY_RETURN_IF_ERROR(link->Open());
              renew_link = std::move(link);
            }
            auto r = renew_link->Eval(
                kRenew, job.key,
                {job.owner, job.token, Ms(job.lease), Ms(options.pending_retention)});
            if (!r.ok()) return r.status();
            return Str(r->get());
          },
          options.log);
    }
    renewer->Watch({name, owner, std::to_string(ctx.fencing_token()), lease, claim});
    HandlerResult h = CallHandler(handler, ctx);
    renewer->Unwatch();
    return h;
  }

  // The COMPLETED mark of this claim; a connection lost on the way sends the same mark again
  // (it is idempotent for its own token) until `timeout` has passed, instead of leaving the
  // caller to claim the key again and repeat the handler. "OK" or "LOST".
  Result<std::string> Complete(const std::string& name, const std::string& owner,
                               const std::string& result, std::chrono::milliseconds ttl,
                               const std::string& token, std::string* node) {
    const auto deadline = Clock::now() + options.timeout;
    std::chrono::milliseconds pause{20};
    while (true) {
      auto r = Eval(kComplete, name, {owner, result, Ms(ttl), token}, node);
      if (r.ok()) return Str(r->get());
      if (r.status().code() != ErrorCode::kConnection || Clock::now() + pause > deadline)
        return r.status();
      Log("CONNECTION lost while marking " + name + " COMPLETED (" + r.status().message() +
          "); sending the mark again");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(500));
    }
  }

  std::string where() const {
    if (!options.cluster_nodes.empty()) {
      std::string seeds;
      for (const auto& n : options.cluster_nodes) seeds += (seeds.empty() ? "" : ",") + n;
      return "Redis Cluster (seeds " + seeds + ")";
    }
    return "Redis at " + options.host + ":" + std::to_string(options.port);
  }

  // Sends one command; a transport failure drops the connection so the next call reconnects.
  Result<RedisReplyPtr> Command(const std::vector<std::string>& args) {
    WALRELAY_RETURN_IF_ERROR(EnsureConnected());
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    RedisReplyPtr reply(static_cast<redisReply*>(
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
    RedisContextPtr c(redisConnectWithTimeout(options.host.c_str(), options.port, tv));
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
    auto r = Command({"SCRIPT", "LOAD", Scripts()[id]});
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
      auto r = cluster->Command("", {"SCRIPT", "LOAD", Scripts()[i]});
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
  Result<RedisReplyPtr> EvalCluster(ScriptId id, const std::string& key,
                                    const std::vector<std::string>& argv, std::string* node) {
    std::vector<std::string> args = {"EVALSHA", sha[id], "1", key};
    args.insert(args.end(), argv.begin(), argv.end());
    auto r = cluster->Command(key, args, node);
    if (r.ok() && (*r)->type == REDIS_REPLY_ERROR && Str(r->get()).rfind("NOSCRIPT", 0) == 0) {
      args[0] = "EVAL";
      args[1] = Scripts()[id];
      r = cluster->Command(key, args, node);
    }
    if (!r.ok()) return r.status();
    RedisReplyPtr reply(r->release());
    if (reply->type == REDIS_REPLY_ERROR)
      return ScriptFailure(where() + ": the " + std::string(kScriptNames[id]) +
                               " script failed for " + key + " on " + *node,
                           Str(reply.get()));
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
  Result<RedisReplyPtr> Eval(ScriptId id, const std::string& key,
                             const std::vector<std::string>& argv, std::string* node = nullptr) {
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
      return ScriptFailure(
          where() + ": the " + std::string(kScriptNames[id]) + " script failed for " + key, err);
    }
    return Status::Internal("unreachable");
  }

  // Single node: queues a command for the next Flush or ReadReplies (a pipeline).
  void Append(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(ctx.get(), static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  // Sends what Append queued without waiting for replies; false when the connection broke.
  bool Flush() {
    int done = 0;
    while (done == 0)
      if (redisBufferWrite(ctx.get(), &done) != REDIS_OK) return false;
    return true;
  }
  // Reads `n` pipelined replies; a transport failure drops the connection.
  Status ReadReplies(size_t n, std::vector<RedisReplyPtr>* replies) {
    for (size_t i = 0; i < n; ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx.get(), &raw) != REDIS_OK || raw == nullptr) {
        const std::string why = ctx->errstr;
        ctx.reset();
        return Status::Connection("lost connection to " + where() + ": " + why);
      }
      replies->emplace_back(static_cast<redisReply*>(raw));
    }
    return Status::Ok();
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
  // hiredis writes with write(): a connection the server closed (a restart, CLIENT KILL, a
  // failover) would end the process by SIGPIPE instead of failing the call. Ignored unless the
  // application set its own handler.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.cluster_nodes.empty()) {
    WALRELAY_RETURN_IF_ERROR(impl->EnsureConnected());
  } else {
    WALRELAY_RETURN_IF_ERROR(impl->ConnectCluster());
  }
  return std::unique_ptr<RedisStore>(new RedisStore(std::move(impl)));
}

namespace {

// An acquire script's reply as a Claim.
Result<Claim> ParseClaim(const redisReply* rep, const std::string& where, const std::string& name) {
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 8)
    return Status::Internal(where + ": unexpected acquire reply for " + name);
  const std::string verdict = Str(rep->element[0]);
  Claim c;
  c.attempts = std::atoi(Str(rep->element[1]).c_str());
  c.result = Str(rep->element[2]);
  c.last_error = Str(rep->element[3]);
  c.previous_owner = Str(rep->element[4]);
  c.retry_after = std::chrono::milliseconds(std::atoll(Str(rep->element[5]).c_str()));
  c.fencing_token = std::atoll(Str(rep->element[6]).c_str());
  c.payload_hash = Str(rep->element[7]);
  if (verdict == "ACQUIRED") c.state = Claim::State::kAcquired;
  else if (verdict == "TAKEN_OVER") c.state = Claim::State::kTakenOver;
  else if (verdict == "DUPLICATE") c.state = Claim::State::kDuplicate;
  else if (verdict == "FAILED") c.state = Claim::State::kFailed;
  else if (verdict == "CONFLICT") c.state = Claim::State::kConflict;
  else return Status::Internal(where + ": unknown acquire verdict '" + verdict + "'");
  return c;
}

}  // namespace

Result<Claim> RedisStore::Acquire(const std::string& consumer, const std::string& key,
                                  const std::string& owner, std::chrono::milliseconds lease,
                                  const Message& message) {
  Impl& d = *impl_;
  const std::string name = d.KeyName(consumer, key);
  auto r = d.Eval(
      kAcquire, name,
      {owner, Ms(lease), Ms(d.options.pending_retention), message.topic,
       std::to_string(message.partition), std::to_string(message.offset), PayloadHash(message)});
  if (!r.ok()) return r.status();
  auto c = ParseClaim(r->get(), d.where(), name);
  if (c.ok() && c->fencing_token > 0) {
    d.lease = lease;
    d.tokens[name] = c->fencing_token;
  }
  return c;
}

Result<RunOutcome> RedisStore::Run(const std::string& consumer, const std::string& key,
                                   const std::string& owner,
                                   std::chrono::milliseconds completed_ttl, const Message& message,
                                   int attempt, const Handler& handler) {
  Impl& d = *impl_;
  const std::string name = d.KeyName(consumer, key);
  // The token of this owner's claim; "" (owner checked alone) for a claim made elsewhere.
  auto known = d.tokens.find(name);
  const int64_t token = known == d.tokens.end() ? 0 : known->second;
  RunOutcome out;
  HandlerContext ctx(message, key, attempt, nullptr, token);
  out.handler = d.RunHandler(handler, ctx, name, owner);
  if (out.handler.kind != HandlerResult::Kind::kDone) {
    out.kind = RunOutcome::Kind::kFailed;
    return out;
  }
  std::string node;
  auto r = d.Complete(name, owner, out.handler.result, completed_ttl,
                      token > 0 ? std::to_string(token) : "", &node);
  if (!r.ok()) return r.status().WithContext("completing key '" + key + "'");
  d.tokens.erase(name);
  out.kind = *r == "OK" ? RunOutcome::Kind::kCompleted : RunOutcome::Kind::kLost;
  if (out.kind == RunOutcome::Kind::kCompleted) d.WaitForReplicas(name, node);
  return out;
}

Result<std::vector<Claim>> RedisStore::AcquireBatch(const std::string& consumer,
                                                    const std::vector<BatchRecord>& records,
                                                    const std::string& owner,
                                                    std::chrono::milliseconds lease) {
  Impl& d = *impl_;
  if (d.cluster) return IdempotencyStore::AcquireBatch(consumer, records, owner, lease);
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  d.lease = lease;
  // The batch's claims in acquire-batch calls of up to kKeysPerAcquireCall keys, pipelined:
  // one round trip and one script call per 250 keys.
  std::vector<std::string> names;
  for (const BatchRecord& r : records) names.push_back(d.KeyName(consumer, r.key));
  auto append_calls = [&] {
    for (size_t from = 0; from < records.size(); from += kKeysPerAcquireCall) {
      const size_t n = std::min(kKeysPerAcquireCall, records.size() - from);
      std::vector<std::string> args = {"EVALSHA", d.sha[kAcquireBatch], std::to_string(n)};
      args.insert(args.end(), names.begin() + static_cast<std::ptrdiff_t>(from),
                  names.begin() + static_cast<std::ptrdiff_t>(from + n));
      args.insert(args.end(), {owner, Ms(lease), Ms(d.options.pending_retention)});
      for (size_t i = from; i < from + n; ++i) {
        const Message& m = *records[i].message;
        args.insert(args.end(), {m.topic, std::to_string(m.partition), std::to_string(m.offset),
                                 PayloadHash(m)});
      }
      d.Append(args);
    }
    return (records.size() + kKeysPerAcquireCall - 1) / kKeysPerAcquireCall;
  };
  std::vector<RedisReplyPtr> replies;
  for (int round = 0; round < 2; ++round) {
    replies.clear();
    WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
    WALRELAY_RETURN_IF_ERROR(d.ReadReplies(append_calls(), &replies));
    bool noscript = false;
    for (const RedisReplyPtr& reply : replies)
      if (reply->type == REDIS_REPLY_ERROR) {
        const std::string err = Str(reply.get());
        // NOSCRIPT (a restarted server, SCRIPT FLUSH): nothing ran; loaded again, sent again.
        if (err.rfind("NOSCRIPT", 0) == 0 && round == 0) {
          noscript = true;
          continue;
        }
        return ScriptFailure(d.where() + ": the acquire-batch script failed", err);
      }
    if (!noscript) break;
    // Calls that ran before a NOSCRIPT one claimed their keys. A batch whose every call
    // failed is sent again; a partial one (scripts flushed between two calls of one
    // pipeline) goes key by key, which counts one more attempt for the keys already claimed.
    bool all_failed = true;
    for (const RedisReplyPtr& reply : replies) all_failed &= reply->type == REDIS_REPLY_ERROR;
    if (!all_failed) return IdempotencyStore::AcquireBatch(consumer, records, owner, lease);
    WALRELAY_RETURN_IF_ERROR(d.Load(kAcquireBatch));
  }
  std::vector<Claim> claims;
  for (size_t c = 0; c < replies.size(); ++c) {
    const redisReply* reply = replies[c].get();
    const size_t from = c * kKeysPerAcquireCall;
    const size_t n = std::min(kKeysPerAcquireCall, records.size() - from);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n)
      return Status::Internal(d.where() + ": unexpected acquire-batch reply");
    for (size_t i = 0; i < n; ++i) {
      auto claim = ParseClaim(reply->element[i], d.where(), names[from + i]);
      if (!claim.ok()) return claim.status();
      claims.push_back(std::move(claim).value());
    }
  }
  return claims;
}

Result<std::vector<RunOutcome>> RedisStore::RunBatch(const std::string& consumer,
                                                     const std::vector<BatchRecord>& records,
                                                     const std::string& owner,
                                                     std::chrono::milliseconds completed_ttl,
                                                     const Handler& handler) {
  Impl& d = *impl_;
  if (d.cluster)
    return IdempotencyStore::RunBatch(consumer, records, owner, completed_ttl, handler);
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  std::vector<RunOutcome> out;
  std::vector<std::string> names;
  size_t in_flight = 0;  // marks sent whose replies are still to be read, records [0, n)
  bool broken = false;   // the connection broke while sending: the rest are sent again below
  for (size_t i = 0; i < records.size(); ++i) {
    const BatchRecord& r = records[i];
    names.push_back(d.KeyName(consumer, r.key));
    RunOutcome o;
    HandlerContext ctx(*r.message, r.key, r.claim.attempts, nullptr, r.claim.fencing_token);
    o.handler = d.RunHandler(handler, ctx, names.back(), owner);
    if (o.handler.kind != HandlerResult::Kind::kDone) {
      o.kind = RunOutcome::Kind::kFailed;
      out.push_back(o);
      break;
    }
    // The mark leaves now, right after the effect, as it did record by record; its reply is
    // read once per batch, before any offset of the batch is committed.
    o.kind = RunOutcome::Kind::kCompleted;
    out.push_back(o);
    if (!broken) {
      d.Append({"EVALSHA", d.sha[kComplete], "1", names.back(), owner, o.handler.result,
                Ms(completed_ttl), std::to_string(r.claim.fencing_token)});
      broken = !d.Flush();
      if (!broken) in_flight = i + 1;
    }
  }
  std::vector<RedisReplyPtr> replies;
  if (in_flight > 0) {
    if (Status st = d.ReadReplies(in_flight, &replies); !st.ok()) {
      replies.clear();
      broken = true;
      d.Log("CONNECTION lost while marking a batch COMPLETED (" + st.message() +
            "); sending the marks again");
    }
  }
  if (broken && d.ctx) d.ctx.reset();  // a failed write leaves the connection unusable
  bool completed_any = false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].kind != RunOutcome::Kind::kCompleted) continue;
    std::string verdict;
    if (i < replies.size() && replies[i]->type != REDIS_REPLY_ERROR) {
      verdict = Str(replies[i].get());
    } else {
      // Not sent, its reply lost with the connection, or NOSCRIPT: sent again (idempotent).
      auto again = d.Complete(names[i], owner, out[i].handler.result, completed_ttl,
                              std::to_string(records[i].claim.fencing_token), nullptr);
      if (!again.ok()) return again.status().WithContext("completing key '" + records[i].key + "'");
      verdict = *again;
    }
    if (verdict != "OK") out[i].kind = RunOutcome::Kind::kLost;
    else completed_any = true;
  }
  if (completed_any) d.WaitForReplicas(names.back(), "");
  // The claims after a failed record were not used.
  for (size_t j = out.size(); j < records.size(); ++j)
    (void)d.Eval(kUnclaim, d.KeyName(consumer, records[j].key), {owner});
  return out;
}

Result<BatchRun> RedisStore::ClaimAndRunBatch(const std::string& consumer,
                                              const std::vector<BatchRecord>& records,
                                              const std::string& owner,
                                              std::chrono::milliseconds lease,
                                              std::chrono::milliseconds completed_ttl,
                                              const BatchAccept& accept, const Handler& handler) {
  Impl& d = *impl_;
  if (d.cluster)
    return IdempotencyStore::ClaimAndRunBatch(consumer, records, owner, lease, completed_ttl,
                                              accept, handler);
  WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
  d.lease = lease;
  const size_t n = records.size();
  std::vector<std::string> names;
  for (const BatchRecord& r : records) names.push_back(d.KeyName(consumer, r.key));
  auto granted = [](const Claim& c) {
    return c.state == Claim::State::kAcquired || c.state == Claim::State::kTakenOver;
  };

  std::vector<Claim> claims;   // read so far, in record order
  std::deque<size_t> calls;    // keys of each claim call sent and not yet read, in order
  std::vector<size_t> unread;  // outcomes whose marks were sent on this connection, unread
  std::vector<RunOutcome> outcomes;
  std::vector<size_t> ran;            // the record of each outcome
  std::vector<std::string> verdicts;  // per outcome: its mark's answer, "" while unknown
  // The claims of records [from, n) in calls of kKeysPerOverlappedCall keys, sent at once.
  // EVAL rather than EVALSHA: a script the server lost is loaded again by the call itself, so
  // no reply of the pipeline is NOSCRIPT.
  auto send_claims = [&](size_t from) -> Status {
    WALRELAY_RETURN_IF_ERROR(d.EnsureConnected());
    for (size_t at = from; at < n; at += kKeysPerOverlappedCall) {
      const size_t count = std::min(kKeysPerOverlappedCall, n - at);
      std::vector<std::string> args = {"EVAL", Scripts()[kAcquireBatch], std::to_string(count)};
      args.insert(args.end(), names.begin() + static_cast<std::ptrdiff_t>(at),
                  names.begin() + static_cast<std::ptrdiff_t>(at + count));
      args.insert(args.end(), {owner, Ms(lease), Ms(d.options.pending_retention)});
      for (size_t i = at; i < at + count; ++i) {
        const Message& m = *records[i].message;
        args.insert(args.end(), {m.topic, std::to_string(m.partition), std::to_string(m.offset),
                                 PayloadHash(m)});
      }
      d.Append(args);
      calls.push_back(count);
    }
    if (d.Flush()) return Status::Ok();
    d.ctx.reset();
    return Status::Connection("lost connection to " + d.where() + " while claiming a batch");
  };
  // The marks sent on a connection that broke: sent again (each is idempotent for its token),
  // before anything else happens, so no more than the record in flight is ever unmarked.
  auto mark_again = [&]() -> Status {
    for (size_t k : unread) {
      auto v = d.Complete(names[ran[k]], owner, outcomes[k].handler.result, completed_ttl,
                          std::to_string(claims[ran[k]].fencing_token), nullptr);
      if (!v.ok()) return v.status().WithContext("completing key '" + records[ran[k]].key + "'");
      verdicts[k] = *v;
    }
    unread.clear();
    return Status::Ok();
  };
  // Reads the next claim call's reply; a lost connection marks again and claims the rest again
  // (a key the lost call had claimed is this owner's: claimed again, one attempt more).
  auto read_claims = [&]() -> Status {
    for (int tries = 0;; ++tries) {
      std::vector<RedisReplyPtr> reply;
      Status st = d.ctx ? d.ReadReplies(1, &reply) : Status::Connection("not connected");
      if (!st.ok()) {
        if (tries > 0) return st;
        d.Log("CONNECTION lost while claiming a batch (" + st.message() + "); claiming again");
        calls.clear();
        WALRELAY_RETURN_IF_ERROR(mark_again());
        WALRELAY_RETURN_IF_ERROR(send_claims(claims.size()));
        continue;
      }
      const size_t count = calls.front();
      calls.pop_front();
      const redisReply* rep = reply[0].get();
      if (rep->type == REDIS_REPLY_ERROR)
        return ScriptFailure(d.where() + ": the acquire-batch script failed", Str(rep));
      if (rep->type != REDIS_REPLY_ARRAY || rep->elements != count)
        return Status::Internal(d.where() + ": unexpected acquire-batch reply");
      for (size_t i = 0; i < count; ++i) {
        auto c = ParseClaim(rep->element[i], d.where(), names[claims.size()]);
        if (!c.ok()) return c.status();
        claims.push_back(std::move(c).value());
      }
      return Status::Ok();
    }
  };
  // Any failure from here on leaves replies unread: the connection is dropped with it.
  auto fail = [&](const Status& st) -> Result<BatchRun> {
    d.ctx.reset();
    return st;
  };

  if (Status st = send_claims(0); !st.ok()) return fail(st);
  size_t cut = n;
  size_t stop = n;  // the record whose handler failed
  for (size_t i = 0; i < n; ++i) {
    while (claims.size() <= i)
      if (Status st = read_claims(); !st.ok()) return fail(st);
    const Claim& c = claims[i];
    if (!accept(records[i], c)) {
      cut = i;
      break;
    }
    if (!granted(c)) continue;
    RunOutcome o;
    HandlerContext ctx(*records[i].message, records[i].key, c.attempts, nullptr, c.fencing_token);
    o.handler = d.RunHandler(handler, ctx, names[i], owner);
    ran.push_back(i);
    verdicts.emplace_back();
    if (o.handler.kind != HandlerResult::Kind::kDone) {
      o.kind = RunOutcome::Kind::kFailed;
      outcomes.push_back(o);
      stop = i;
      break;
    }
    // The mark leaves now, right after the effect; its reply is read once per batch, before
    // any offset of the batch is committed.
    o.kind = RunOutcome::Kind::kCompleted;
    outcomes.push_back(o);
    bool sent = false;
    if (d.ctx) {
      d.Append({"EVALSHA", d.sha[kComplete], "1", names[i], owner, o.handler.result,
                Ms(completed_ttl), std::to_string(c.fencing_token)});
      sent = d.Flush();
      if (!sent) d.ctx.reset();
    }
    unread.push_back(outcomes.size() - 1);
    if (!sent) {
      d.Log("CONNECTION lost while marking a batch COMPLETED; sending the marks again");
      if (Status st = mark_again(); !st.ok()) return fail(st);
      if (!calls.empty()) {
        calls.clear();
        if (Status st = send_claims(claims.size()); !st.ok()) return fail(st);
      }
    }
  }
  // The claims still unread (to give back the granted ones not run), then the marks' replies.
  while (!calls.empty())
    if (Status st = read_claims(); !st.ok()) return fail(st);
  if (!unread.empty()) {
    std::vector<RedisReplyPtr> replies;
    if (Status st =
            d.ctx ? d.ReadReplies(unread.size(), &replies) : Status::Connection("not connected");
        !st.ok()) {
      d.Log("CONNECTION lost while marking a batch COMPLETED (" + st.message() +
            "); sending the marks again");
    } else {
      for (size_t j = 0; j < unread.size(); ++j)
        if (replies[j]->type != REDIS_REPLY_ERROR) verdicts[unread[j]] = Str(replies[j].get());
    }
    // Unanswered (the connection broke) or NOSCRIPT: sent again.
    std::vector<size_t> again;
    for (size_t k : unread)
      if (verdicts[k].empty()) again.push_back(k);
    unread = again;
    if (Status st = mark_again(); !st.ok()) return fail(st);
  }
  bool completed_any = false;
  for (size_t k = 0; k < outcomes.size(); ++k) {
    if (outcomes[k].kind != RunOutcome::Kind::kCompleted) continue;
    if (verdicts[k] != "OK") outcomes[k].kind = RunOutcome::Kind::kLost;
    else completed_any = true;
  }
  if (completed_any) d.WaitForReplicas(names[ran.back()], "");
  // The claims after the refused record, or after a failed one, were not used (the refused
  // record goes alone with its claim).
  if (cut == n)
    for (size_t j = stop + 1; j < claims.size(); ++j)
      if (!accept(records[j], claims[j])) {
        cut = j;
        break;
      }
  for (size_t j = std::min(cut, stop) + 1; j < claims.size(); ++j)
    if (j != cut && granted(claims[j])) (void)d.Eval(kUnclaim, names[j], {owner});
  BatchRun out;
  out.claims.assign(claims.begin(),
                    claims.begin() + static_cast<std::ptrdiff_t>(std::min(cut + 1, claims.size())));
  out.outcomes = std::move(outcomes);
  return out;
}

Status RedisStore::Unclaim(const std::string& consumer, const std::string& key,
                           const std::string& owner) {
  auto r = impl_->Eval(kUnclaim, impl_->KeyName(consumer, key), {owner});
  return r.ok() ? Status::Ok() : r.status().WithContext("giving back key '" + key + "'");
}

Status RedisStore::Release(const std::string& consumer, const std::string& key,
                           const std::string& owner, const std::string& error) {
  impl_->tokens.erase(impl_->KeyName(consumer, key));
  auto r = impl_->Eval(kRelease, impl_->KeyName(consumer, key), {owner, error});
  return r.ok() ? Status::Ok() : r.status().WithContext("releasing key '" + key + "'");
}

Result<bool> RedisStore::MarkFailed(const std::string& consumer, const std::string& key,
                                    const std::string& owner, int64_t fencing_token,
                                    const std::string& error,
                                    std::chrono::milliseconds failed_ttl) {
  impl_->tokens.erase(impl_->KeyName(consumer, key));
  auto r = impl_->Eval(
      kFail, impl_->KeyName(consumer, key),
      {error, Ms(failed_ttl), owner, fencing_token > 0 ? std::to_string(fencing_token) : ""});
  if (!r.ok()) return r.status().WithContext("marking key '" + key + "' FAILED");
  return Str(r->get()) == "OK";
}

Result<int64_t> RedisStore::CleanupBatch(int) { return int64_t{0}; }

}  // namespace walrelay::consumer
