#!/usr/bin/env bash
# Fetches the Debezium reference of the differential suite (tests/debezium/pom.xml: Debezium's
# PostgreSQL connector, its embedded engine and Kafka Connect's converters) from Maven Central
# into a cache outside the repository, once, and prints the directory of jars.
#
#   bash scripts/fetch-debezium.sh       # -> ~/.cache/walrelay/debezium-<version>/libs
#
# The versions are in tests/debezium/pom.xml and nowhere else; caching as in
# scripts/lib/maven-jars.sh. The reference itself, tests/debezium/DebeziumReference.java, is run
# from source: java -cp "<libs>/*" DebeziumReference.java ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib/maven-jars.sh"
fetch_maven_jars debezium "$here/../tests/debezium/pom.xml" debezium.version \
  "debezium-connector-postgres-@VERSION@.jar" "debezium-embedded-@VERSION@.jar"
