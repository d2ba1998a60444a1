#!/usr/bin/env bash
# One command for a newcomer: install dependencies, build, and run `walrelay demo`.
#   bash scripts/demo.sh                 # librdkafka's mock cluster: no JVM, starts at once
#   bash scripts/demo.sh --kafka apache  # a real Apache Kafka broker, fetched with Maven once
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo needs: the build's libraries and PostgreSQL (and a JDK for the real
# broker), then the walrelay binary alone; scripts/test.sh installs and builds the rest.
case " $* " in
  *" apache "* | *"=apache "*)
    bash scripts/install-deps.sh demo java
    bash scripts/fetch-kafka.sh >/dev/null
    ;;
  *) bash scripts/install-deps.sh demo ;;
esac
bash scripts/build.sh walrelay
exec ./build/walrelay demo "$@"
