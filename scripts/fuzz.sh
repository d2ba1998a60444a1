#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang, AddressSanitizer + UndefinedBehaviorSanitizer)
# into ./build-fuzz and fuzzes each for N seconds (default 60; $FUZZ_SECONDS when no argument).
#
#   bash scripts/fuzz.sh [seconds]
#
# First every committed corpus input runs once at full size (regressions, and no sanitizer
# report on real wal2json output and real configs); then each target mutates a scratch copy of
# its corpus, so fuzz/corpus/ is never modified. Targets run two at a time, one per core
# ($FUZZ_JOBS), so CI's three targets at 60 s take two minutes.
# Exits non-zero on any crash, leak, timeout or sanitizer report; the input that caused it is
# kept in build-fuzz/artifacts/ (reproduce: build-fuzz/fuzz/<target> <file>).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${FUZZ_SECONDS:-60}}

if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found; run scripts/install-deps.sh" >&2
  exit 1
fi
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DWALRELAY_BUILD_FUZZERS=ON -DWALRELAY_BUILD_TESTS=OFF >/dev/null
# Only the fuzz targets: the rest of the tree is not needed here.
cmake --build build-fuzz -j"${JOBS:-2}" --target wal2json_decoder_fuzz pgoutput_decoder_fuzz \
  config_loader_fuzz

# target:corpus:max_len. max_len bounds mutated inputs (the largest real seed, a TOASTed row,
# is 30 KB; the largest pgoutput seed, a transaction with TOASTed rows, 11 KB); committed inputs
# longer than that still run whole in the replay step.
targets=(wal2json_decoder:wal2json:32768 pgoutput_decoder:pgoutput:16384 config_loader:config:8192)
artifacts="$PWD/build-fuzz/artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/walrelay-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
export UBSAN_OPTIONS="print_stacktrace=1"

# A sanitizer report without its stack is hard to read, a stack overflow's 200 repeated
# frames impossible: keep the messages and the first frames of each stack.
# Runs under `set -e -o pipefail`: a grep that matches nothing must not end the script before
# the report is printed, hence the `|| true`s. When the filter leaves nothing (a fuzzer killed
# from outside, say), the raw end of the log is shown instead.
report() {
  { grep '^Running:' "$1" || true; } | tail -1 >&2  # the input, when replaying files
  local messages
  messages=$({ grep -v '^INFO\|^#[0-9]\|^Running:\|^Executed' "$1" || true; } |
    awk '/^ *#[0-9]+ 0x/ { if (++frames > 12) next; print; next } { frames = 0; print }' |
    tail -60)
  if [ -n "$messages" ]; then
    printf '%s\n' "$messages" >&2
  else
    tail -20 "$1" >&2
  fi
}

status=0
for t in "${targets[@]}"; do
  IFS=: read -r name corpus _ <<<"$t"
  inputs=(fuzz/corpus/"$corpus"/*)
  if ! ./build-fuzz/fuzz/"${name}_fuzz" -artifact_prefix="$artifacts/$name-" "${inputs[@]}" \
      >"$work/$name-replay.log" 2>&1; then
    echo "fuzz: $name FAILED on a committed input from fuzz/corpus/$corpus:" >&2
    report "$work/$name-replay.log"
    status=1
  else
    echo "fuzz: $name: ${#inputs[@]} committed inputs replayed, no report"
  fi
done
[ "$status" -eq 0 ] || exit "$status"

# One fuzzer per core: the targets run in rounds of two, so three take two rounds.
parallel=${FUZZ_JOBS:-2}
for ((first = 0; first < ${#targets[@]}; first += parallel)); do
  round=("${targets[@]:first:parallel}")
  pids=()
  for t in "${round[@]}"; do
    IFS=: read -r name corpus max_len <<<"$t"
    cp -r fuzz/corpus/"$corpus" "$work/$name-corpus"
    ./build-fuzz/fuzz/"${name}_fuzz" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" \
      "$work/$name-corpus" >"$work/$name.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!round[@]}"; do
    IFS=: read -r name _ _ <<<"${round[$i]}"
    if wait "${pids[$i]}"; then
      execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$name.log")
      rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$name.log")
      size=$(ls "$work/$name-corpus" | wc -l)
      echo "fuzz: $name: ${seconds}s, $execs inputs ($rate/s), corpus grew to $size, no report"
    else
      echo "fuzz: $name FAILED (exit $?); its log ends:" >&2
      report "$work/$name.log"
      echo "fuzz: inputs kept in $artifacts" >&2
      # A CI log is all there is of a clean-clone run: show the inputs themselves too.
      for input in "$artifacts/$name"-*; do
        [ -f "$input" ] || continue
        echo "fuzz: $input ($(stat -c %s "$input") bytes), base64:" >&2
        head -c 4096 "$input" | base64 -w 120 >&2
      done
      status=1
    fi
  done
done
exit "$status"
