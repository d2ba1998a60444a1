// Built against an installed walrelay (pkg-config walrelay-consumer) by install_test.sh: the
// public header and the library must be usable without walrelay's source tree.
#include <walrelay/consumer.h>

#include <cstdio>

int main() {
  walrelay::consumer::RedisStoreOptions options;
  options.port = 1;  // nothing listens there: Connect must fail cleanly
  auto store = walrelay::consumer::RedisStore::Connect(options);
  std::printf("%s\n", store.ok() ? "connected?" : store.status().ToString().c_str());
  return store.ok() ? 1 : 0;
}
