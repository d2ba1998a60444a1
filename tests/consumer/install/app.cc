// Built against an installed walrelay (pkg-config walrelay-consumer) by install_test.sh: the
// public headers and the library must be usable without walrelay's source tree, and a program
// that uses the Redis store alone must compile without libpq's headers.
#include <walrelay/consumer/consumer.h>
#include <walrelay/consumer/redis_store.h>

#include <cstdio>

int main() {
  walrelay::consumer::RedisStoreOptions options;
  options.port = 1;  // nothing listens there: Connect must fail cleanly
  auto store = walrelay::consumer::RedisStore::Connect(options);
  std::printf("%s\n", store.ok() ? "connected?" : store.status().ToString().c_str());
  return store.ok() ? 1 : 0;
}
