// RAII owners for hiredis objects: connections and replies.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>

namespace walrelay {

struct RedisContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

}  // namespace walrelay
