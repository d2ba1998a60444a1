#!/usr/bin/env bash
# Fetches a Debezium reference of the differential suite (Debezium's PostgreSQL connector, its
# embedded engine and Kafka Connect's converters) from Maven Central into a cache outside the
# repository, once, and prints the directory of jars.
#
#   bash scripts/fetch-debezium.sh [version]  # -> ~/.cache/walrelay/debezium-<version>/libs
#
# version defaults to 3.6.1.Final, the suite's default reference; every version the suite knows
# has its pom, tests/debezium/pom-<version>.xml, which pins it and the Kafka Connect it runs
# with. Caching as in scripts/lib/maven-jars.sh. The reference itself,
# tests/debezium/DebeziumReference.java, is run from source: java -cp "<libs>/*" ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${1:-3.6.1.Final}"
pom="$here/../tests/debezium/pom-$version.xml"
if [ ! -f "$pom" ]; then
  known=$(cd "$here/../tests/debezium" && ls pom-*.xml |
    sed 's/^pom-\(.*\)\.xml$/\1/' | tr '\n' ' ')
  echo "fetch-debezium: no reference pom for Debezium '$version' (known: $known)" >&2
  exit 2
fi
source "$here/lib/maven-jars.sh"
fetch_maven_jars debezium "$pom" debezium.version \
  "debezium-connector-postgres-@VERSION@.jar" "debezium-embedded-@VERSION@.jar"
