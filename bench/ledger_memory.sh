#!/usr/bin/env bash
# walrelay's memory while one record waits for a partition without a leader and the rest of the
# stream goes on behind it: OUTBOX_ROWS outbox rows to a healthy topic, interleaved with
# OTHER_TRANSACTIONS single-row transactions of a table that is not relayed, each committed on
# its own. Reports walrelay's peak RSS (VmHWM) and the ack ledger's size, and checks the peak
# against RSS_LIMIT_MIB. The slot must stay confirmed before the held record until the
# partition has a leader again, then reach the end.
#
#   bash scripts/build.sh          # once; this script builds nothing
#   bash bench/ledger_memory.sh    # about two minutes at full size
#
# Environment: OUTBOX_ROWS (100000), OTHER_TRANSACTIONS (600000), RSS_LIMIT_MIB (32),
# WALRELAY_BUILD_DIR (default build). It runs the CI-sized integration test case
# (tests/integration/backpressure_test.cc) at the given size: PostgreSQL 15 and the mock Kafka
# cluster as the tests start them.
set -euo pipefail
cd "$(dirname "$0")/.."
WALRELAY_BUILD_DIR=${WALRELAY_BUILD_DIR:-$(pwd)/build}
TEST_BINARY=$WALRELAY_BUILD_DIR/tests/integration_backpressure
[[ -x $TEST_BINARY ]] || { echo "$TEST_BINARY is missing: run 'bash scripts/build.sh' first" >&2; exit 1; }

export WALRELAY_LEDGER_OUTBOX_ROWS=${OUTBOX_ROWS:-100000}
export WALRELAY_LEDGER_OTHER_TRANSACTIONS=${OTHER_TRANSACTIONS:-600000}
export WALRELAY_LEDGER_RSS_LIMIT_MIB=${RSS_LIMIT_MIB:-32}
echo "outbox rows: $WALRELAY_LEDGER_OUTBOX_ROWS, other transactions: $WALRELAY_LEDGER_OTHER_TRANSACTIONS, limit: $WALRELAY_LEDGER_RSS_LIMIT_MIB MiB peak RSS"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
status=0
"$TEST_BINARY" -tc="a partition without a leader*" >"$OUT" 2>&1 || status=$?
grep -E -A1 "peak RSS|ERROR|test cases|assertions" "$OUT" | grep -v "^\[20" || cat "$OUT"
exit "$status"
