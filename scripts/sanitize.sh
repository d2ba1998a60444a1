#!/usr/bin/env bash
# Builds the tree with clang under AddressSanitizer + UndefinedBehaviorSanitizer (./build-asan)
# or ThreadSanitizer (./build-tsan) and runs ctest there (default: the unit suites).
#
#   bash scripts/sanitize.sh address|thread [ctest args...]     (default ctest args: -L unit)
#   bash scripts/sanitize.sh address -L mock -j1                # the mock-cluster suites
#
# Only what the selected tests run is built: the target tests_<label> for the label of the
# first -L (tests/CMakeLists.txt), tests_all when no plain label is given. In that build every
# test carries the label `sanitize` and the sanitizer options (a report stops the process with
# SIGABRT: halt_on_error, abort_on_error; leaks checked at exit), so `ctest -L unit` inside
# build-asan/ or build-tsan/ is the same run. Every report, also one from a relay process a test
# started, is written to <build>/sanitizer-reports/; this script prints each and exits 1 when
# there is any, even if ctest passed. Suppressions (third-party libraries only):
# tests/sanitizers/. docs/testing.md, "Sanitizers".
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: bash scripts/sanitize.sh address|thread [ctest args...]" >&2; }
case "${1:-}" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *) usage; exit 2 ;;
esac
kind=$1
shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-L unit)

if ! command -v clang++ >/dev/null; then
  echo "sanitize: clang++ not found; run scripts/install-deps.sh" >&2
  exit 1
fi

# The first label given (-L X, -LX, --label-regex X) names the build target when it is a plain
# word; a regular expression or no label builds every test.
label=
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    -L | --label-regex) label=${args[$((i + 1))]:-}; break ;;
    -L?*) label=${args[$i]#-L}; break ;;
  esac
done

# Warnings are not errors here (WERROR=ON makes them so): clang warns where GCC, which
# scripts/build.sh's -Werror build uses, does not (an unused boost::system::error_code in
# src/relay/relay.cc), and a sanitizer run should report memory and thread errors, not stop
# at a warning.
start=$(date +%s)
# OPT: the optimisation and debug flags (RelWithDebInfo's -O2 -g by default; CI takes
# "-O1 -gline-tables-only", which compiles in about half the time and still gives file:line
# stack frames).
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="${OPT:--O2 -g} -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="${OPT:--O2 -g} -DNDEBUG" \
  -DWALRELAY_SANITIZE="$kind" -DWALRELAY_WERROR="${WERROR:-OFF}" >/dev/null
target=tests_all
targets=$(cmake --build "$dir" --target help)  # not piped into grep -q: pipefail, SIGPIPE
if [[ $label =~ ^[A-Za-z0-9_]+$ ]] && grep -qx "\.\.\. tests_$label" <<<"$targets"; then
  target=tests_$label
fi
echo "sanitize: building $target in $dir ($kind)"
nice -n "${NICE:-10}" cmake --build "$dir" -j"${JOBS:-2}" --target "$target"
built=$(date +%s)
echo "sanitize: configure and build took $((built - start)) s"

reports="$dir/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
status=0
(cd "$dir" && ctest --output-on-failure "${args[@]}") || status=$?
echo "sanitize: ctest took $(($(date +%s) - built)) s"

# A report from a process whose death the test tolerated (a relay it expected to stop, a child
# it killed) fails the run too. The first stack frames of each are enough to find the code.
shopt -s nullglob
found=("$reports"/*)
if [ ${#found[@]} -gt 0 ]; then
  echo "sanitize: ${#found[@]} sanitizer report(s) in $reports:" >&2
  for f in "${found[@]}"; do
    echo "==== $f" >&2
    head -n 80 "$f" >&2
  done
  status=1
fi
if [ "$status" -eq 0 ]; then
  echo "sanitize: $kind: ctest ${args[*]}: passed, no sanitizer report"
fi
exit "$status"
