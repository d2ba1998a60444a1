#!/usr/bin/env bash
# One command for every test: install dependencies, build, run unit and integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 "$@"
