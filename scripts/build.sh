#!/usr/bin/env bash
# Configures and builds walrelay (Release) into ./build: every target, or only those named
# (`bash scripts/build.sh walrelay`: the binary alone, as the demo needs).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DWALRELAY_WERROR=ON >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j"${JOBS:-2}" "${targets[@]}"
