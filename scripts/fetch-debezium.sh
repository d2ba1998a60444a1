#!/usr/bin/env bash
# Fetches the Debezium reference of the differential suite (tests/debezium/pom.xml: Debezium's
# PostgreSQL connector, its embedded engine and Kafka Connect's converters) from Maven Central
# into a cache outside the repository, once, and prints the directory of jars.
#
#   bash scripts/fetch-debezium.sh       # -> ~/.cache/walrelay/debezium-<version>/libs
#
# The versions are in tests/debezium/pom.xml and nowhere else. The cache root is
# $WALRELAY_CACHE_DIR (default ~/.cache/walrelay); a finished fetch leaves a marker holding the
# pom's checksum, so later calls cost nothing until the pom changes. Needs a JDK 17 and Maven
# (scripts/install-deps.sh installs both). The reference itself, tests/debezium/
# DebeziumReference.java, is run from source: java -cp "<libs>/*" DebeziumReference.java ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/../tests/debezium/pom.xml"
version=$(sed -n 's:.*<debezium.version>\(.*\)</debezium.version>.*:\1:p' "$pom")
[ -n "$version" ] || { echo "fetch-debezium: no debezium.version in $pom" >&2; exit 1; }
cache="${WALRELAY_CACHE_DIR:-$HOME/.cache/walrelay}/debezium-$version"
libs="$cache/libs"
checksum=$(sha256sum "$pom" | cut -d' ' -f1)
if [ -d "$libs" ] && [ "$(cat "$cache/complete" 2>/dev/null)" = "$checksum" ]; then
  echo "$libs"
  exit 0
fi
for tool in java mvn; do
  command -v "$tool" >/dev/null || {
    echo "fetch-debezium: '$tool' not found; run scripts/install-deps.sh" >&2
    exit 1
  }
done
echo "fetch-debezium: fetching Debezium $version (PostgreSQL connector, embedded engine) with Maven" >&2
mkdir -p "$cache"
staging=$(mktemp -d "$cache/libs.XXXXXX")
trap 'rm -rf "$staging"' EXIT
mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$staging" >&2
for jar in "debezium-connector-postgres-$version.jar" "debezium-embedded-$version.jar"; do
  [ -f "$staging/$jar" ] || {
    echo "fetch-debezium: Maven finished but $jar is missing" >&2
    exit 1
  }
done
rm -rf "$libs"
mv "$staging" "$libs"
echo "$checksum" >"$cache/complete"
echo "$libs"
