#!/usr/bin/env bash
# The floor librdkafka puts under walrelay's CPU per row: walrelay's CPU-seconds and its
# walsender's for the same rows (as bench/run.sh measures them), against those of a bare
# librdkafka producer (build/bench/producer_floor) producing exactly the records walrelay wrote,
# with walrelay's producer settings, to the same real Apache Kafka 3.9.1 broker (KRaft, one node,
# `walrelay dev-kafka --broker apache`). The question (docs/performance.md, "CPU per row against
# the walsender"): can walrelay's CPU be at most 0.4x its walsender's at all, when librdkafka
# alone takes what the floor measures?
#
#   bash scripts/build.sh              # once (builds build/bench/producer_floor too)
#   bash scripts/fetch-kafka.sh        # once, for the broker's jars
#   bash bench/producer_floor.sh       # -> bench/results/producer-floor.md, producer-floor.csv
#
# Per workload, ROUNDS (3) copies of one pgoutput slot hold the same rows. Each round: walrelay
# relays its slot to topic outbox.event.<workload>.relay<round> (bench/lib/relay_bench.sh's
# relay_run: walrelay's and its walsender's CPU from /proc when the slot reached the end), kcat
# reads that topic back (keys, values, headers, timestamps), and producer_floor produces those
# records twice, to fresh topics outbox.event.<workload>.floor<round> and .paced<round> (names
# as long, so the in-flight byte bound counts the same bytes): `floor` as fast as walrelay's
# in-flight bounds let, `paced` at walrelay's rows/s of that round (its walsender's pace), the
# two in turns. Both with the librdkafka settings and in-flight bounds walrelay derived from the
# very config file walrelay ran with. walrelay and the floor take turns, round by round.
#
# Environment: WORKLOADS ("txn_1000 single_row"), ROWS (100000, txn_1000), SINGLE_ROWS (20000),
# ROUNDS (3), WARMUP_RECORDS (300000 kcat records) and WARMUP_ROWS (100000 rows relayed by
# walrelay) the broker takes first, FLOOR_EXTRA (librdkafka key=value settings producer_floor
# sets over walrelay's, e.g. "linger.ms=20"), RELAY_EXTRA_CONFIG (JSON members for walrelay's
# config, so for both), WALRELAY_BUILD_DIR (build) or WALRELAY and PRODUCER_FLOOR.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WALRELAY_BUILD_DIR=${WALRELAY_BUILD_DIR:-$ROOT/build}
WALRELAY=${WALRELAY:-$WALRELAY_BUILD_DIR/walrelay}
PRODUCER_FLOOR=${PRODUCER_FLOOR:-$WALRELAY_BUILD_DIR/bench/producer_floor}
WORKLOADS=${WORKLOADS:-txn_1000 single_row}
ROWS=${ROWS:-100000}
SINGLE_ROWS=${SINGLE_ROWS:-20000}
ROUNDS=${ROUNDS:-3}
OUT=$ROOT/bench/results
PLUGINS=pgoutput FIRST_PLUGIN=pgoutput
LAT_RATE=0 LAT_SECONDS=0 LAT_BATCH=10   # relay_bench.sh's latency run is not used here

for bin in "$WALRELAY" "$PRODUCER_FLOOR"; do
  [[ -x $bin ]] || { echo "$bin is missing: run 'bash scripts/build.sh' first" >&2; exit 1; }
done
for w in $WORKLOADS; do
  [[ $w == txn_1000 || $w == single_row || $w == one_txn ]] ||
    { echo "WORKLOADS: '$w' is not one of txn_1000 single_row one_txn" >&2; exit 1; }
done
command -v java >/dev/null || { echo "java is required (see scripts/install-deps.sh)" >&2; exit 1; }
for tool in psql kcat python3; do
  command -v "$tool" >/dev/null ||
    { echo "$tool is required (see scripts/install-deps.sh)" >&2; exit 1; }
done
KAFKA_LIBS=$(bash scripts/fetch-kafka.sh)

source bench/lib/harness.sh
bench_harness walrelay-floor
source bench/lib/relay_bench.sh
start_postgres
start_broker apache
warm_broker
warm_relay

# kcat's JSON records (-J) -> producer_floor's input (bench/producer_floor.cc's header): the
# records of one walrelay run, without ensure_topic's warm-up record. Prints the count.
DUMP_TO_RECORDS='
import json, struct, sys
out = open(sys.argv[1], "wb"); n = 0
def blob(s):
    if s is None: return struct.pack("<i", -1)
    b = s.encode(); return struct.pack("<i", len(b)) + b
for line in sys.stdin:
    r = json.loads(line)
    if r.get("key") == "bench-warmup": continue
    h = r.get("headers") or []
    rec = [struct.pack("<q", r["ts"]), blob(r.get("key")), blob(r.get("payload")),
           struct.pack("<I", len(h) // 2)]
    for i in range(0, len(h), 2):
        name = h[i].encode(); rec += [struct.pack("<I", len(name)), name, blob(h[i + 1])]
    out.write(b"".join(rec)); n += 1
print(n)
'
# "loop_cpu_s rdk_broker_cpu_s rdk_main_cpu_s" from relay_run's <slot>.threads: walrelay's first
# thread (its loop) and librdkafka's threads (both producers': the records' and the offsets').
relay_threads() {
  awk 'NR == 1 { loop = $2 } $1 ~ /^rdk:broker/ { b += $2 } $1 == "rdk:main" { m += $2 }
       END { printf "%.2f %.2f %.2f", loop, b, m }' "$1"
}

# One line per run: walrelay's, the floor's as fast as the bounds let (floor), and the floor's at
# walrelay's rows/s of the same round (paced). walsender_cpu_s is always that of the round's
# walrelay run (the floor has no walsender); ratio is cpu_s over it.
CSV=$WORK/producer-floor.csv
{
  printf 'workload,round,side,rows,partitions,wall_s,rows_s,cpu_s,main_cpu_s,rdk_broker_cpu_s,'
  printf 'rdk_main_cpu_s,other_cpu_s,walsender_cpu_s,broker_jvm_cpu_s,ratio\n'
} >"$CSV"

floor_run() {  # workload round side records slot walsender_cpu rate -> its CSV line
  local w=$1 r=$2 side=$3 records=$4 slot=$5 sender=$6 rate=$7 topic jvm0 jvm1 n out
  topic=outbox.event.$w.$side$r   # "floor"/"paced": as long as "relay", the same bytes in flight
  local args=()
  [[ $side == paced ]] && args+=("--rate=$rate")
  jvm0=$(tree_cpu_s "$KAFKA_PID")
  # shellcheck disable=SC2086  # FLOOR_EXTRA: key=value words
  "$PRODUCER_FLOOR" "$WORK/$slot.json" "$records" "$topic" "${args[@]}" ${FLOOR_EXTRA:-} \
    >"$WORK/$slot.$side" 2>"$WORK/$slot.$side.err" ||
    { echo "producer_floor failed: $(tail -5 "$WORK/$slot.$side.err")" >&2; exit 1; }
  jvm1=$(tree_cpu_s "$KAFKA_PID")
  n=$(( $(topic_high_watermarks "$topic") - 1 ))   # minus ensure_topic's record
  [[ $n == "$ROWS_NOW" ]] || { echo "$topic holds $n records, not $ROWS_NOW" >&2; exit 1; }
  out=$(sed -n 's/^floor //p' "$WORK/$slot.$side")
  python3 - "$w,$r,$side,$n,$PARTS" "$out" "$sender" "$jvm0" "$jvm1" <<'EOF'
import sys
f = dict(kv.split("=") for kv in sys.argv[2].split())
sender, jvm = float(sys.argv[3]), float(sys.argv[5]) - float(sys.argv[4])
rows = int(sys.argv[1].split(",")[3])
print(f"{sys.argv[1]},{f['wall_s']},{rows / float(f['wall_s']):.0f},{f['cpu_s']},{f['main_s']},"
      f"{f['broker_s']},{f['rdk_main_s']},{f['other_s']},{sender:.2f},{jvm:.2f},"
      f"{float(f['cpu_s']) / sender:.2f}")
EOF
}

run_workload() {
  local w=$1 r first=bench_apache_${1}_r1 end_lsn
  q "TRUNCATE outbox, unrelated"
  q "SELECT 1 FROM pg_create_logical_replication_slot('$first', 'pgoutput')" >/dev/null
  for ((r = 2; r <= ROUNDS; r++)); do
    q "SELECT 1 FROM pg_copy_logical_replication_slot('$first', 'bench_apache_${w}_r$r')" >/dev/null
  done
  log "$w: loading rows"
  load "$w"
  end_lsn=$(q "SELECT pg_current_wal_lsn()")
  ROWS_NOW=$(q "SELECT count(*) FROM outbox WHERE aggregatetype='$w'")
  q "CHECKPOINT" >/dev/null
  for ((r = 1; r <= ROUNDS; r++)); do
    local slot=bench_apache_${w}_r$r line relay n side sides records=$WORK/$w.r$r.records rate
    for side in relay floor paced; do ensure_topic "outbox.event.$w.$side$r"; done
    # seconds peak_rss_kb walrelay_cpu_s walsender_cpu_s broker_cpu_s walrelay_wait walsender_wait
    line=$(relay_run "$slot" "$end_lsn" pgoutput "relay$r")
    read -r -a relay <<<"$line"
    PARTS=$(topic_layout "outbox.event.$w.relay$r"); PARTS=${PARTS%% *}
    kcat -C -b "$BOOTSTRAP" -t "outbox.event.$w.relay$r" -o beginning -e -q -J \
      2>"$WORK/kcat-dump.err" | python3 -c "$DUMP_TO_RECORDS" "$records" >"$WORK/n"
    n=$(cat "$WORK/n")
    [[ $n == "$ROWS_NOW" ]] ||
      { echo "$w round $r: walrelay's topic holds $n records, not $ROWS_NOW" >&2; exit 1; }
    rate=$(python3 -c "print(f'{$ROWS_NOW / ${relay[0]}:.0f}')")
    read -r -a threads <<<"$(relay_threads "$WORK/$slot.threads")"
    python3 -c "
rows, s, cpu, sender, jvm = $ROWS_NOW, ${relay[0]}, ${relay[2]}, ${relay[3]}, ${relay[4]}
loop, b, m = ${threads[0]}, ${threads[1]}, ${threads[2]}
print(f'$w,$r,relay,{rows},$PARTS,{s},{rows / s:.0f},{cpu:.2f},{loop:.2f},{b:.2f},{m:.2f},'
      f'{max(0, cpu - loop - b - m):.2f},{sender:.2f},{jvm:.2f},{cpu / sender:.2f}')" >>"$CSV"
    # The floor's two forms take turns going first, round by round.
    sides="floor paced"; (( r % 2 )) || sides="paced floor"
    for side in $sides; do
      floor_run "$w" "$r" "$side" "$records" "$slot" "${relay[3]}" "$rate" >>"$CSV"
    done
    log "$w round $r:"$'\n'"$(tail -3 "$CSV")"
  done
  for ((r = 1; r <= ROUNDS; r++)); do
    q "SELECT pg_drop_replication_slot('bench_apache_${w}_r$r')" >/dev/null
  done
}

for w in $WORKLOADS; do run_workload "$w"; done
stop_broker

cp "$CSV" "$OUT/producer-floor.csv"
mkdir -p "$OUT/logs/producer-floor"
rm -f "$OUT"/logs/producer-floor/*
for f in "$WORK"/bench_apache_*_r*.{log,threads,floor,floor.err,paced,paced.err}; do
  [[ -f $f ]] && cp "$f" "$OUT/logs/producer-floor/"
done
FLOOR_ERR=$(ls "$WORK"/*.floor.err | head -1)
PROPS=$(sed -n 's/^producer_floor: //p' "$FLOOR_ERR" | grep -v '^bootstrap\|^bounds' | tr '\n' ' ')
BOUNDS=$(sed -n 's/^producer_floor: bounds //p' "$FLOOR_ERR")
python3 - "$OUT/producer-floor.csv" "$(nproc)" "$(psql -X -At -c 'SHOW server_version')" \
  "$(git rev-parse --short HEAD)" "$(uptime | sed 's/.*load average: //')" "${FLOOR_EXTRA:-}" \
  "$PROPS" "$BOUNDS" >"$OUT/producer-floor.md" <<'EOF'
import csv, statistics, sys
path, cpus, pgver, rev, load, extra, props, bounds = sys.argv[1:9]
runs = list(csv.DictReader(open(path)))
def med(rs, k): return statistics.median(float(r[k]) for r in rs)
print(f"walrelay {rev}, PostgreSQL {pgver}, Apache Kafka 3.9.1 (KRaft, one node, `walrelay "
      f"dev-kafka`), librdkafka 2.0.2, {cpus} CPUs (load average at the end: {load}), pgoutput. "
      "Each round: walrelay (`relay`) relays a copy of one slot (its CPU and its walsender's from "
      "/proc/<pid>/stat when the slot reached the end); then producer_floor produces the records "
      "kcat read back from walrelay's topic to fresh topics on the same broker, once as fast as "
      "walrelay's in-flight bounds let (`floor`) and once at walrelay's rows/s of that round "
      "(`paced`), in turns (CPU of the produce phase, getrusage; per thread from "
      "/proc/self/task/*/schedstat).\n")
print(f"producer_floor's librdkafka settings (walrelay's, from walrelay's config file): "
      f"{props.strip()}" + (f"; over them: {extra}" if extra else "") + "; walrelay's "
      f"in-flight bounds: {bounds}.\n")
print("| workload | round | side | rows | s | rows/s | CPU s | main (walrelay: loop) | "
      "rdk:broker | rdk:main | other | walsender CPU s | CPU / walsender | broker JVM CPU s |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in runs:
    print(f"| {r['workload']} | {r['round']} | {r['side']} | {int(r['rows']):,} | {r['wall_s']} | "
          f"{int(r['rows_s']):,} | {r['cpu_s']} | {r['main_cpu_s']} | {r['rdk_broker_cpu_s']} | "
          f"{r['rdk_main_cpu_s']} | {r['other_cpu_s']} | {r['walsender_cpu_s']} | {r['ratio']}x | "
          f"{r['broker_jvm_cpu_s']} |")
print("\nMedians over the rounds (ratios: the median of each round's ratio):\n")
print("| workload | rows | walsender CPU s | 0.4x of it | walrelay CPU s | floor CPU s "
      "(main / rdk:broker) | paced floor CPU s (main / rdk:broker) | walrelay / walsender | "
      "floor / walsender | paced / walsender |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
verdicts = []
for w in dict.fromkeys(r["workload"] for r in runs):
    side = {s: [r for r in runs if r["workload"] == w and r["side"] == s]
            for s in ("relay", "floor", "paced")}
    sender = med(side["relay"], "walsender_cpu_s")
    cpu = {s: med(rs, "cpu_s") for s, rs in side.items()}
    ratio = {s: med(rs, "ratio") for s, rs in side.items()}
    split = {s: f"{med(side[s], 'main_cpu_s'):.3f} / {med(side[s], 'rdk_broker_cpu_s'):.3f}"
             for s in ("floor", "paced")}
    print(f"| {w} | {int(side['relay'][0]['rows']):,} | {sender:.2f} | {0.4 * sender:.2f} | "
          f"{cpu['relay']:.2f} | {cpu['floor']:.3f} ({split['floor']}) | {cpu['paced']:.3f} "
          f"({split['paced']}) | {ratio['relay']:.2f}x | {ratio['floor']:.2f}x | "
          f"{ratio['paced']:.2f}x |")
    low = min(ratio["floor"], ratio["paced"])
    verdicts.append(
        f"- {w}: librdkafka alone takes {low:.2f}x-{max(ratio['floor'], ratio['paced']):.2f}x "
        f"the walsender's CPU; " + (f"{0.4 - low:.2f}x is left under 0.4x for everything else "
        "walrelay does" if low < 0.4 else "0.4x cannot be met with librdkafka")
        + f" (walrelay: {ratio['relay']:.2f}x).")
print()
print("\n".join(verdicts))
EOF
log "results: $OUT/producer-floor.md"
