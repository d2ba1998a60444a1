#!/usr/bin/env bash
# Runs ctest in the current build directory with the arguments given, then runs each suite that
# failed once more, only to tell a broken suite from a flaky one: either fails the run. A suite
# that passes only on its second try is reported at the end as flaky, with its first failure,
# and counted: a bug to fix, never a pass. The one exception is a suite quarantined in
# tests/known-flaky.txt for a bug an open issue tracks: reported as KNOWN FLAKY with its issue,
# it fails the run only when it fails twice. scripts/test.sh calls it in build/.
set -euo pipefail
first_run=Testing/first-run.log
failed_list=Testing/Temporary/LastTestsFailed.log
mkdir -p Testing/Temporary
rm -f "$failed_list"
status=0
ctest --output-on-failure "$@" 2>&1 | tee "$first_run" || status=$?
if [ "$status" -eq 0 ]; then exit 0; fi
if [ ! -s "$failed_list" ]; then
  echo "test.sh: ctest failed (exit $status) without naming a failed test" >&2
  exit 1
fi
mapfile -t first_failed < <(sed 's/^[0-9]*://' "$failed_list")
total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$first_run" | tail -1)
echo
echo "test.sh: running the ${#first_failed[@]} failed suite(s) once more, to tell flaky from broken"
cp "$failed_list" Testing/first-run-failed.log
# ctest rewrites the list of failed tests only when some fail: its exit status says which.
still_failed=()
if ! ctest --output-on-failure --rerun-failed "$@"; then
  mapfile -t still_failed < <(sed 's/^[0-9]*://' "$failed_list")
fi
# Suites quarantined for a bug an open issue tracks (tests/known-flaky.txt, next to build/).
known_file=${WALRELAY_KNOWN_FLAKY:-"$(dirname "$0")/../tests/known-flaky.txt"}
known_issue() {
  [ -f "$known_file" ] && awk -v name="$1" '$1 == name { print $2; exit }' "$known_file"
}
flaky=()
known=()
for t in "${first_failed[@]}"; do
  printf '%s\n' "${still_failed[@]}" | grep -qxF "$t" && continue
  if [ -n "$(known_issue "$t")" ]; then known+=("$t"); else flaky+=("$t"); fi
done
echo
echo "test.sh: summary of ${total:-?} suites"
for t in "${still_failed[@]}"; do echo "  FAILED twice: $t"; done
for t in "${flaky[@]}"; do
  # The first failure in its output of the first run (doctest's ERROR lines, else ctest's verdict).
  first=$(awk -v name="$t" '
    $0 ~ "Test +#[0-9]+: " name " " { inside = 1; next }
    inside && /(ERROR|FATAL|error:|Failed|Timeout)/ { print; exit }
    inside && /^ *[0-9]+\/[0-9]+ Test +#/ { inside = 0 }' "$first_run" | cut -c1-300)
  echo "  FLAKY (passed only on its second try): $t; first failure: ${first:-see its output above}"
done
for t in "${known[@]}"; do
  echo "  KNOWN FLAKY ($(known_issue "$t"), tests/known-flaky.txt): $t failed once, then passed"
done
failed=$(( ${#still_failed[@]} + ${#flaky[@]} ))
echo "test.sh: ${#flaky[@]} flaky, ${#still_failed[@]} failed twice, ${#known[@]} known flaky"
echo "$(( ${total:-0} - failed - ${#known[@]} )) passed, $failed failed"
[ "$failed" -eq 0 ]
