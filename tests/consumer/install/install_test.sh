#!/usr/bin/env bash
# Installs the build into a temporary prefix and compiles and runs a program against the
# installed consumer library through pkg-config alone.
#   install_test.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
prefix=$(mktemp -d "${TMPDIR:-/tmp}/walrelay-install-XXXXXX")
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in bin/walrelay bin/walrelay-payments-example include/walrelay/consumer.h \
         include/walrelay/consumer/consumer.h include/walrelay/consumer/store.h \
         include/walrelay/consumer/handler.h include/walrelay/consumer/postgres_store.h \
         include/walrelay/consumer/redis_store.h include/walrelay/consumer/dynamo_store.h \
         include/walrelay/common/status.h share/walrelay/consumer.sql share/walrelay/outbox.sql; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
pc=$(dirname "$(find "$prefix" -name walrelay-consumer.pc | head -1)")
export PKG_CONFIG_PATH="$pc"
# shellcheck disable=SC2046
g++ -std=c++20 -Wall -Werror "$src/tests/consumer/install/app.cc" -o "$prefix/app" \
  $(pkg-config --cflags --libs walrelay-consumer)
# The Redis-only program again, with the installed headers alone on the include path: none of
# them may need libpq's (Debian keeps libpq-fe.h under /usr/include/postgresql, off the default
# path, which the first check makes sure of).
if echo '#include <libpq-fe.h>' | g++ -x c++ -fsyntax-only - 2>/dev/null; then
  echo "libpq-fe.h is on the default include path: the libpq-free check proves nothing" >&2
  exit 1
fi
g++ -std=c++20 -Wall -Werror -fsyntax-only -I"$prefix/include" -I"$prefix/include/walrelay" \
  "$src/tests/consumer/install/app.cc"
# The umbrella header, which includes every store, through pkg-config.
echo '#include <walrelay/consumer.h>
int main() { return walrelay::consumer::ClaimStateName(walrelay::consumer::Claim::State::kAcquired)[0] == 0; }' \
  > "$prefix/umbrella.cc"
# shellcheck disable=SC2046
g++ -std=c++20 -Wall -Werror "$prefix/umbrella.cc" -o "$prefix/umbrella" \
  $(pkg-config --cflags --libs walrelay-consumer)
out=$("$prefix/app")
echo "$out"
case "$out" in
  *"cannot connect to Redis at 127.0.0.1:1"*) echo "install test passed" ;;
  *) echo "unexpected output from the installed-library program" >&2; exit 1 ;;
esac
