#!/usr/bin/env bash
# Fetches Kafka Connect (the standalone worker) with Debezium's PostgreSQL connector and a
# logging binding from Maven Central into a cache outside the repository, once, and prints the
# directory of jars. bench/debezium.sh runs the worker from it:
#
#   bash scripts/fetch-connect.sh        # -> ~/.cache/walrelay/connect-<kafka>-debezium-<debezium>/libs
#   java -cp "<libs>/*" org.apache.kafka.connect.cli.ConnectStandalone worker.properties connector.properties
#
# The versions are in scripts/connect/pom.xml; they must be those of
# tests/debezium/pom-3.2.3.Final.xml (Debezium, the differential suite's 3.2 reference) and
# scripts/kafka/pom.xml (the broker), which this script checks. Caching as in
# scripts/lib/maven-jars.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/connect/pom.xml"
prop() { sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" "$2" | head -1; }
debezium=$(prop debezium.version "$pom")
kafka=$(prop kafka.version "$pom")
[ -n "$debezium" ] && [ -n "$kafka" ] || { echo "fetch-connect: no debezium.version or kafka.version in $pom" >&2; exit 1; }
for ref in "debezium.version $here/../tests/debezium/pom-3.2.3.Final.xml" \
    "kafka.version $here/kafka/pom.xml"; do
  set -- $ref
  theirs=$(prop "$1" "$2")
  ours=$(prop "$1" "$pom")
  [ "$theirs" = "$ours" ] || {
    echo "fetch-connect: $pom has $1 $ours but $2 has $theirs; the benchmark must run the same versions" >&2
    exit 1
  }
done
source "$here/lib/maven-jars.sh"
fetch_maven_jars "connect-$kafka-debezium" "$pom" debezium.version "connect-runtime-$kafka.jar" \
  "debezium-connector-postgres-@VERSION@.jar" "slf4j-reload4j-$(prop slf4j.version "$pom").jar"
