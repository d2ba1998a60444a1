#!/usr/bin/env bash
# One command for every test: install dependencies, fetch the Apache Kafka broker, the Debezium
# reference and the other PostgreSQL majors, build, and run the unit, mock-cluster integration,
# real-broker and Debezium differential tests.
#
# A suite that fails is run once more, only to tell a broken suite from a flaky one: either
# fails the run. A suite that passes only on its second try is reported at the end as flaky,
# with its first failure, and counted; it is a bug to fix, never a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/fetch-kafka.sh >/dev/null   # the pinned Apache Kafka broker, once
bash scripts/fetch-debezium.sh >/dev/null  # the pinned Debezium reference, once
bash scripts/fetch-postgres.sh >/dev/null  # PostgreSQL 13, 14, 16, 17, 18 builds, once
bash scripts/build.sh
cd build
# Two at a time: the PostgreSQL and mock-cluster suites mostly wait on their servers. The
# real-broker and Debezium suites are RUN_SERIAL (tests/CMakeLists.txt): their JVMs need both cores.
exec bash ../scripts/run-ctest.sh --timeout 900 -j2 "$@"
