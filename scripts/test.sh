#!/usr/bin/env bash
# One command for every test: install dependencies, fetch the Apache Kafka broker, build, and run
# the unit, mock-cluster integration and real-broker tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/fetch-kafka.sh >/dev/null   # the pinned Apache Kafka broker, once
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
