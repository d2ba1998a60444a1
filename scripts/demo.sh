#!/usr/bin/env bash
# One command for a newcomer: install dependencies, build, and run `walrelay demo`.
#   bash scripts/demo.sh                 # librdkafka's mock cluster: no JVM, starts at once
#   bash scripts/demo.sh --kafka apache  # a real Apache Kafka broker, fetched with Maven once
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
case " $* " in
  *" apache "* | *"=apache "*) bash scripts/fetch-kafka.sh >/dev/null ;;
esac
bash scripts/build.sh
exec ./build/walrelay demo "$@"
