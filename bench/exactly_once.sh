#!/usr/bin/env bash
# What exactly-once delivery costs: walrelay at least once (its default) against walrelay with
# exactly.once.support=required (Kafka transactions, docs/exactly-once.md) at several
# transaction boundaries, on one real Apache Kafka broker (KRaft, one node, `walrelay dev-kafka
# --broker apache`) and one PostgreSQL, in one run: rows/s on the txn_1000 and single_row
# workloads, and commit-to-consumer latency (a read_committed consumer) at a fixed offered rate.
#
#   bash scripts/build.sh         # once; this script builds nothing
#   bash scripts/fetch-kafka.sh   # once, for the broker's jars
#   bash bench/exactly_once.sh    # -> bench/results/exactly-once.md, exactly-once.csv, exactly-once_latency.csv
#
# Modes (MODES for the throughput runs, LAT_MODES for the latency runs):
#   alo        at least once: walrelay's defaults (idempotent producer, acks=all)
#   eos        exactly.once.support=required, transaction.boundary=interval at its default interval
#   eos_i<N>   the same with transaction.boundary.interval.ms=N
#   eos_src    exactly.once.support=required, transaction.boundary=source.commit
# Every mode reads the same WAL (copies of one slot per workload), each runs ROUNDS (3) times in
# turn, and its fastest run counts. Kafka must then hold every row of every run of each mode
# once per run, read back read_committed.
#
# Environment: MODES ("alo eos eos_i50 eos_i100 eos_src"), LAT_MODES (the same), PLUGINS
# ("pgoutput"; "pgoutput wal2json" for both), WORKLOADS ("txn_1000 single_row"), ROWS (200000,
# txn_1000), SINGLE_ROWS (100000), SRC_SINGLE_ROWS (1000: the single_row rows eos_src relays,
# one Kafka transaction each), LAT_RATE (2000 rows/s), LAT_SECONDS (20), SKIP_LATENCY=1,
# WARMUP_RECORDS (300000 kcat records) and WARMUP_ROWS (100000 rows relayed exactly once),
# EOS_CONFIG (the JSON members every eos mode adds), RELAY_EXTRA_CONFIG (JSON members added to
# every mode), WALRELAY_BUILD_DIR (build) or WALRELAY. About six minutes with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WALRELAY_BUILD_DIR=${WALRELAY_BUILD_DIR:-$ROOT/build}
WALRELAY=${WALRELAY:-$WALRELAY_BUILD_DIR/walrelay}
PLUGINS=${PLUGINS:-pgoutput}
MODES=${MODES:-alo eos eos_i50 eos_i100 eos_src}
LAT_MODES=${LAT_MODES:-$MODES}
WORKLOADS=${WORKLOADS:-txn_1000 single_row}
OUT=$ROOT/bench/results
ROWS=${ROWS:-200000}
SINGLE_ROWS=${SINGLE_ROWS:-100000}
SRC_SINGLE_ROWS=${SRC_SINGLE_ROWS:-1000}
LAT_RATE=${LAT_RATE:-2000}
LAT_SECONDS=${LAT_SECONDS:-20}
LAT_BATCH=10   # rows per transaction in the latency run, as in bench/run.sh
EOS_CONFIG=${EOS_CONFIG:-'"exactly.once.support": "required", "offsets.storage.topic": "walrelay-offsets", "offsets.storage.replication.factor": "1"'}
ROUNDS=${ROUNDS:-3}
export ACK_COPIES=$ROUNDS  # acked_records expects every key once per run

[[ -x $WALRELAY ]] || { echo "$WALRELAY is missing: run 'bash scripts/build.sh' first" >&2; exit 1; }
mode_config() {  # mode -> the JSON members it adds to walrelay's config (none for alo)
  local extra=${RELAY_EXTRA_CONFIG:+$RELAY_EXTRA_CONFIG}
  case $1 in
    alo) ;;
    eos) extra+="${extra:+, }$EOS_CONFIG" ;;
    eos_i[0-9]*) extra+="${extra:+, }$EOS_CONFIG, \"transaction.boundary.interval.ms\": \"${1#eos_i}\"" ;;
    eos_src) extra+="${extra:+, }$EOS_CONFIG, \"transaction.boundary\": \"source.commit\"" ;;
    *) echo "unknown mode '$1' (alo, eos, eos_i<ms>, eos_src)" >&2; return 1 ;;
  esac
  echo "$extra"
}
for m in $MODES $LAT_MODES; do mode_config "$m" >/dev/null || exit 1; done
[[ " $MODES " == *" alo "* ]] || { echo "MODES must include alo (the ratios are against it)" >&2; exit 1; }
for p in $PLUGINS; do
  [[ $p == pgoutput || $p == wal2json ]] || { echo "PLUGINS: '$p' is neither pgoutput nor wal2json" >&2; exit 1; }
done
for w in $WORKLOADS; do
  [[ $w == txn_1000 || $w == single_row || $w == one_txn || $w == txn_1000_noise ]] ||
    { echo "WORKLOADS: unknown workload '$w'" >&2; exit 1; }
done
FIRST_PLUGIN=${PLUGINS%% *}
command -v java >/dev/null || { echo "java is required for the broker (see scripts/install-deps.sh)" >&2; exit 1; }
KAFKA_LIBS=$(bash scripts/fetch-kafka.sh)
# transaction.boundary.interval.ms's default, as the source in this tree sets it (for the report).
DEFAULT_INTERVAL_MS=$(sed -n 's/.*"transaction\.boundary\.interval\.ms", \([0-9]*\),.*/\1/p' src/config/relay_settings.cc | head -1)
for tool in psql pgbench kcat python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required (see scripts/install-deps.sh)" >&2; exit 1; }
done
source bench/lib/harness.sh
bench_harness walrelay-eos-bench
source bench/lib/relay_bench.sh
T_START=$(now)
start_postgres

echo "broker,workload,plugin,mode,rows,wal_bytes,walrelay_s,walrelay_rows_s,ratio_to_alo,start_s,streaming_rows_s,streaming_ratio_to_alo,walrelay_peak_rss_kb,walrelay_cpu_s,walsender_cpu_s,broker_cpu_s,walrelay_cpu_wait_s,walsender_cpu_wait_s,records_in_topic,ack_check,runs_s" >"$WORK/exactly-once.csv"
echo "broker,plugin,mode,sent,received,offered_rows_s,p50_ms,p99_ms,max_ms,walrelay_peak_rss_kb,walrelay_cpu_s,broker_cpu_s" >"$WORK/latency.csv"

# Seconds from walrelay's first log line to its "streaming slot" line: with exactly.once.support
# that is initialising transactions, creating or finding the offsets topic and reading it back.
start_s() {  # slot
  python3 - "$WORK/$1.log" <<'EOF'
import datetime, sys
ts = lambda line: datetime.datetime.fromisoformat(line.split()[0]).timestamp()
lines = [l for l in open(sys.argv[1]) if l[:4].isdigit()]
streaming = next(l for l in lines if " streaming slot " in l)
print(f"{ts(streaming) - ts(lines[0]):.3f}")
EOF
}

# Per workload: one slot per plugin, mode and round, all copies of one slot (the same WAL); the
# runs take turns (every mode of round 1, then of round 2), so no mode gains from a quieter minute.
run_workload() {
  local w=$1 p=apache_$1 plugin mode round slot first s
  q "TRUNCATE outbox, unrelated"
  first=bench_${p}_${FIRST_PLUGIN}_${MODES%% *}_1
  q "SELECT 1 FROM pg_create_logical_replication_slot('$first', '$FIRST_PLUGIN')" >/dev/null
  for plugin in $PLUGINS; do for mode in $MODES; do for ((round = 1; round <= ROUNDS; round++)); do
    slot=bench_${p}_${plugin}_${mode}_$round
    [[ $slot == "$first" ]] || q "SELECT 1 FROM pg_copy_logical_replication_slot('$first', '$slot', false, '$plugin')" >/dev/null
  done; done; done
  local start_lsn end_lsn rows wal
  start_lsn=$(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name='$first'")
  log "$w: loading rows (slots at $start_lsn)"
  # source.commit makes every single-row transaction a Kafka transaction of its own, which the
  # broker commits some tens to a hundred times a second: on single_row it relays only the
  # first SRC_SINGLE_ROWS rows (to the LSN after them), so its runs take seconds, not minutes.
  local src_rows=$SINGLE_ROWS src_lsn
  if [[ $w == single_row && $SRC_SINGLE_ROWS -lt $SINGLE_ROWS ]]; then
    src_rows=$SRC_SINGLE_ROWS
    SINGLE_ROWS=$src_rows load single_row
    src_lsn=$(q "SELECT pg_current_wal_lsn()")
    single_row_inserts single_row $((src_rows + 1)) "$SINGLE_ROWS" >"$WORK/load-single_row-rest.sql"
    psql -X -q -v ON_ERROR_STOP=1 -f "$WORK/load-single_row-rest.sql" >/dev/null
  else
    load "$w"
  fi
  end_lsn=$(q "SELECT pg_current_wal_lsn()")
  [[ -n ${src_lsn:-} ]] || src_lsn=$end_lsn
  rows=$(q "SELECT count(*) FROM outbox WHERE aggregatetype='$w'")
  [[ $w == single_row ]] || src_rows=$rows
  wal=$(q "SELECT pg_wal_lsn_diff('$end_lsn', '$start_lsn')::bigint")
  q "CHECKPOINT" >/dev/null
  local -A runs=()
  for plugin in $PLUGINS; do for mode in $MODES; do ensure_topic "outbox.event.$w.${plugin}_$mode"; done; done
  local -A mode_rows=() mode_end=()
  for mode in $MODES; do
    mode_rows[$mode]=$rows mode_end[$mode]=$end_lsn
    [[ $mode != eos_src ]] || { mode_rows[$mode]=$src_rows; mode_end[$mode]=$src_lsn; }
  done
  for ((round = 1; round <= ROUNDS; round++)); do
    for plugin in $PLUGINS; do for mode in $MODES; do
      slot=bench_${p}_${plugin}_${mode}_$round
      runs[$plugin/$mode]+="$(RELAY_EXTRA_CONFIG=$(mode_config "$mode") relay_run "$slot" "${mode_end[$mode]}" "$plugin" "${plugin}_$mode") $(start_s "$slot");"
    done; done
  done
  for plugin in $PLUGINS; do
    for mode in $MODES; do
      local acked; acked=$(acked_records "outbox.event.$w.${plugin}_$mode" "${mode_rows[$mode]}" "$([[ ${mode_rows[$mode]} == "$rows" ]] || echo more)")
      python3 - "$w" "$plugin" "$mode" "${mode_rows[$mode]}" "$wal" "${runs[$plugin/$mode]}" "${runs[$plugin/alo]}" "$acked" "$rows" >>"$WORK/exactly-once.csv" <<'EOF'
import sys
w, plugin, mode, rows, wal, alo_rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[9])
def runs_of(arg): return [run.split() for run in arg.split(";") if run.strip()]
mine, alo = runs_of(sys.argv[6]), runs_of(sys.argv[7])
best = min(mine, key=lambda run: float(run[0]))
alo_rate = alo_rows / min(float(run[0]) for run in alo)
# Streaming: the run's time less walrelay's start (its first log line to streaming), fastest run.
def streaming(run): return float(run[0]) - float(run[7])
alo_streaming = alo_rows / min(streaming(run) for run in alo)
fast = min(mine, key=streaming)
r, hwm = float(best[0]), max(int(run[1]) for run in mine)
acked = sys.argv[8].split()
print(f"apache,{w},{plugin},{mode},{rows},{wal},{r:.3f},{rows/r:.0f},{rows/r/alo_rate:.2f},{best[7]},{rows/streaming(fast):.0f},{rows/streaming(fast)/alo_streaming:.2f},"
      f"{hwm},{','.join(best[2:7])},{','.join(acked)},"
      + "/".join(run[0] for run in mine))
EOF
      log "$w $plugin $mode: $(tail -1 "$WORK/exactly-once.csv")"
    done
    for mode in $MODES; do for ((round = 1; round <= ROUNDS; round++)); do
      q "SELECT pg_drop_replication_slot('bench_${p}_${plugin}_${mode}_$round')" >/dev/null
    done; done
  done
}

start_broker apache
warm_broker
# walrelay's warm-up runs exactly once, so the broker has also created its transaction state
# and the offsets topic, and compiled the transactional paths, before any timed run.
RELAY_EXTRA_CONFIG=$(mode_config eos) warm_relay
for w in $WORKLOADS; do run_workload "$w"; done
if [[ ${SKIP_LATENCY:-0} != 1 ]]; then
  for plugin in $PLUGINS; do
    for mode in $LAT_MODES; do
      RELAY_EXTRA_CONFIG=$(mode_config "$mode") latency_run "$plugin" "${plugin}_$mode" >"$WORK/latency-line"
      line=$(cat "$WORK/latency-line")
      echo "${line/apache,$plugin,/apache,$plugin,$mode,}" >>"$WORK/latency.csv"
    done
  done
fi
# What the offsets topic holds: one record per committed Kafka transaction of every eos run.
OFFSET_RECORDS=$(kcat -C -b "$BOOTSTRAP" -t walrelay-offsets -X isolation.level=read_committed -o beginning -e -q -f '%o\n' 2>/dev/null | wc -l)
stop_broker
TOTAL_S=$(python3 -c "print(f'{$(now) - $T_START:.0f}')")

# --- output -------------------------------------------------------------------------------
cp "$WORK/exactly-once.csv" "$OUT/exactly-once.csv"
[[ ${SKIP_LATENCY:-0} == 1 ]] || cp "$WORK/latency.csv" "$OUT/exactly-once_latency.csv"
mkdir -p "$OUT/logs/exactly-once"
rm -f "$OUT"/logs/exactly-once/*
cp "$WORK"/bench_*.log "$WORK"/kafka-apache.err "$OUT/logs/exactly-once/" 2>/dev/null || true
python3 - "$WORK/exactly-once.csv" "$WORK/latency.csv" "$(nproc)" "$(psql -X -At -c 'SHOW server_version')" \
  "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src CMakeLists.txt 2>/dev/null || echo ' (plus uncommitted src changes)')" \
  "$(uptime | sed 's/.*load average: //')" "$BROKER_DESC" "$EOS_CONFIG" "$OFFSET_RECORDS" "$TOTAL_S" "$LAT_SECONDS" \
  "${WARMUP_RECORDS:-300000}" "${WARMUP_ROWS:-100000}" "$LAT_RATE" "$DEFAULT_INTERVAL_MS" >"$OUT/exactly-once.md" <<'EOF'
import csv, os, re, sys
thr_csv, lat_csv, cpus, pgver, rev, load, broker, eos_config, offsets, total_s, lat_s, warm_k, warm_r, lat_rate, default_ms = sys.argv[1:16]
rows = list(csv.DictReader(open(thr_csv)))
lats = list(csv.DictReader(open(lat_csv)))
DEFAULT_INTERVAL = int(default_ms) if default_ms.isdigit() else None
def describe(mode):
    if mode == "alo": return "at least once (walrelay's default)"
    if mode == "eos": return f"exactly once, interval (default, {default_ms} ms)"
    if mode == "eos_src": return "exactly once, source.commit"
    return f"exactly once, interval.ms={mode[5:]}"
def interval(mode):
    return DEFAULT_INTERVAL if mode == "eos" else int(mode[5:]) if re.fullmatch(r"eos_i\d+", mode) else None
def verdict(ok): return "met" if ok else "NOT met"
print("# Exactly-once delivery: throughput and latency against at least once\n")
print(f"walrelay {rev}, PostgreSQL {pgver}, {broker}, {cpus} CPUs shared with whatever else ran on the "
      f"machine (load average at the end: {load}); the whole run took {total_s} s. Exactly-once modes add "
      f"`{eos_config}` to walrelay's config (and the boundary settings named). Before the timed runs the broker "
      f"took {int(warm_k):,} kcat records and {int(warm_r):,} rows relayed exactly once (which also created its "
      "transaction state and the offsets topic); each topic exists before its runs.\n")
spread = max((max(map(float, r["runs_s"].split("/"))) / min(map(float, r["runs_s"].split("/"))) - 1) * 100 for r in rows) if rows else 0
print("**Caveat: machine load.** PostgreSQL, its walsender, walrelay, the broker's JVM and the consumer share "
      f"{cpus} CPUs, with whatever other work ran on the machine. The ratios come from this one run (the faster "
      f"of two runs per mode); in it the two runs of one mode differed by up to {spread:.0f}% (runs s column), "
      "so a throughput ratio within that distance of a goal is undecided. The latency percentiles rest on "
      "about 40,000 records each and move less.\n")
if rows:
    print("## Throughput\n")
    print("rows/s = rows / (walrelay started to the slot's confirmed LSN reaching the end of the workload); "
          "for exactly once the LSN is confirmed only after the Kafka transaction holding it committed. "
          "Start = walrelay's first log line to its \"streaming slot\" line (with exactly once: initialising "
          "transactions and reading the offsets topic back), a cost paid once per start; streaming rows/s = rows / "
          "(run time - start). Each mode read the same WAL {rounds} times (copies of one slot); the fastest run "
          "counts. Kafka check: every key of every run read back, {rounds} times in all, by a read_committed "
          "consumer.\n".format(rounds=os.environ["ACK_COPIES"]))
    print("| workload | plugin | mode | rows | rows/s | vs at least once | start s | streaming rows/s | vs at least once | runs s | walrelay CPU s | walsender CPU s | broker CPU s | peak RSS MB | records read back |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['plugin']} | {describe(r['mode'])} | {int(r['rows']):,} | {int(r['walrelay_rows_s']):,} | "
              f"{r['ratio_to_alo']}x | {r['start_s']} | {int(r['streaming_rows_s']):,} | {r['streaming_ratio_to_alo']}x | "
              f"{r['runs_s'].replace('/', ' / ')} | {r['walrelay_cpu_s']} | {r['walsender_cpu_s']} | {r['broker_cpu_s']} | "
              f"{int(r['walrelay_peak_rss_kb'])/1024:.1f} | {int(r['records_in_topic']):,} |")
    print()
    full = {r["workload"]: r["rows"] for r in rows if r["mode"] == "alo"}
    for r in rows:
        if r["rows"] != full.get(r["workload"], r["rows"]):
            print(f"{describe(r['mode']).capitalize()} on {r['workload']} relayed only the first {int(r['rows']):,} of the "
                  f"{int(full[r['workload']]):,} rows (SRC_SINGLE_ROWS): each is a Kafka transaction of its own; its rows/s and "
                  "ratio are per row all the same, and the records read back may include a few rows after them.\n")
if lats:
    print("## Commit-to-consumer latency\n")
    print(f"pgbench offers {int(lat_rate):,} rows/s ("
          f"10-row transactions) for {lat_s} s; a kcat consumer with isolation.level=read_committed stamps each "
          "record's arrival; latency = arrival - the record's timestamp (the PostgreSQL commit time, ms).\n")
    print("| plugin | mode | sent | received | p50 ms | p99 ms | max ms | walrelay CPU s | broker CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for l in lats:
        print(f"| {l['plugin']} | {describe(l['mode'])} | {int(l['sent']):,} | {int(l['received']):,} | {l['p50_ms']} | {l['p99_ms']} | {l['max_ms']} | "
              f"{l['walrelay_cpu_s']} | {l['broker_cpu_s']} |")
    print()
print("## Goals\n")
for r in rows:
    if r["mode"] == "eos":
        print(f"- exactly once (default boundary) >= 0.9x at-least-once rows/s, {r['workload']}, {r['plugin']}: "
              f"streaming {verdict(float(r['streaming_ratio_to_alo']) >= 0.9)} ({r['streaming_ratio_to_alo']}x); "
              f"with walrelay's start {verdict(float(r['ratio_to_alo']) >= 0.9)} ({r['ratio_to_alo']}x).")
for l in lats:
    print(f"- p99 < 50 ms at {int(lat_rate):,} rows/s offered, {describe(l['mode'])}, {l['plugin']}: "
          f"{verdict(float(l['p99_ms']) < 50)} ({l['p99_ms']} ms; {l['received']} of {l['sent']} records).")
for plugin in dict.fromkeys(l["plugin"] for l in lats):
    ok = [(interval(l["mode"]), l) for l in lats if l["plugin"] == plugin and interval(l["mode"]) and float(l["p99_ms"]) < 50]
    if ok:
        iv, l = max(ok, key=lambda x: x[0])
        print(f"- {plugin}: the longest measured interval whose p99 met the goal: {iv} ms (p99 {l['p99_ms']} ms).")
    else:
        print(f"- {plugin}: no measured interval met the p99 goal.")
print(f"\nThe offsets topic held {int(offsets):,} committed records at the end (one per Kafka transaction of every exactly-once run).")
EOF
cat "$OUT/exactly-once.md"
