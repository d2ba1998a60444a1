#!/usr/bin/env bash
# One command for a newcomer: install dependencies, build, and run `walrelay demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec ./build/walrelay demo "$@"
