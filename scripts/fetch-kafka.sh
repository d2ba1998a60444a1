#!/usr/bin/env bash
# Fetches the pinned Apache Kafka broker (KRaft) and its logging binding from Maven Central into
# a cache outside the repository, once, and prints the directory of jars.
#
#   bash scripts/fetch-kafka.sh          # -> ~/.cache/walrelay/kafka-<version>/libs
#
# The version is the kafka.version property of scripts/kafka/pom.xml, its one home. The cache
# root is $WALRELAY_CACHE_DIR (default ~/.cache/walrelay); a finished fetch leaves a marker, so
# later calls cost nothing. Needs a JDK 17 and Maven (scripts/install-deps.sh installs both).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/kafka/pom.xml"
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")
[ -n "$version" ] || { echo "fetch-kafka: no kafka.version in $pom" >&2; exit 1; }
cache="${WALRELAY_CACHE_DIR:-$HOME/.cache/walrelay}/kafka-$version"
libs="$cache/libs"
if [ -f "$cache/complete" ] && [ -d "$libs" ]; then
  echo "$libs"
  exit 0
fi
for tool in java mvn; do
  command -v "$tool" >/dev/null || {
    echo "fetch-kafka: '$tool' not found; run scripts/install-deps.sh" >&2
    exit 1
  }
done
echo "fetch-kafka: fetching Apache Kafka $version (broker and logging binding) with Maven" >&2
mkdir -p "$cache"
staging=$(mktemp -d "$cache/libs.XXXXXX")
trap 'rm -rf "$staging"' EXIT
mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory="$staging" >&2
[ -f "$staging/kafka_2.13-$version.jar" ] || {
  echo "fetch-kafka: Maven finished but kafka_2.13-$version.jar is missing" >&2
  exit 1
}
rm -rf "$libs"
mv "$staging" "$libs"
echo "$version" >"$cache/complete"
echo "$libs"
