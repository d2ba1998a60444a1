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
         include/walrelay/common/status.h share/walrelay/consumer.sql share/walrelay/outbox.sql; do
  [ -e "$prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
pc=$(dirname "$(find "$prefix" -name walrelay-consumer.pc | head -1)")
export PKG_CONFIG_PATH="$pc"
# shellcheck disable=SC2046
g++ -std=c++20 -Wall -Werror "$src/tests/consumer/install/app.cc" -o "$prefix/app" \
  $(pkg-config --cflags --libs walrelay-consumer)
out=$("$prefix/app")
echo "$out"
case "$out" in
  *"cannot connect to Redis at 127.0.0.1:1"*) echo "install test passed" ;;
  *) echo "unexpected output from the installed-library program" >&2; exit 1 ;;
esac
