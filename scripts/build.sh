#!/usr/bin/env bash
# Configures and builds walrelay (Release) into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DWALRELAY_WERROR=ON >/dev/null
cmake --build build -j"${JOBS:-2}"
