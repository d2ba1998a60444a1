#!/usr/bin/env bash
# Fetches the pinned Apache Kafka broker (KRaft) and its logging binding from Maven Central into
# a cache outside the repository, once, and prints the directory of jars.
#
#   bash scripts/fetch-kafka.sh          # -> ~/.cache/walrelay/kafka-<version>/libs
#
# The version is the kafka.version property of scripts/kafka/pom.xml, its one home; caching as
# in scripts/lib/maven-jars.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/lib/maven-jars.sh"
fetch_maven_jars kafka "$here/kafka/pom.xml" kafka.version "kafka_2.13-@VERSION@.jar"
