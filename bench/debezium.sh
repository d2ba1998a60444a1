#!/usr/bin/env bash
# walrelay against Debezium on Kafka Connect standalone, side by side: the same PostgreSQL, the
# same WAL, the same real Apache Kafka broker, the workloads of bench/run.sh, one system at a
# time, each on its own replication slot.
#
#   bash scripts/build.sh        # once; this script builds nothing
#   bash bench/debezium.sh       # fetches Kafka's and Connect's jars if needed (Maven, once)
#                                # -> bench/results/debezium.md, debezium.csv, debezium_latency.csv, debezium.png
#
# Systems (SYSTEMS, default all three): "debezium" (Debezium's PostgreSQL connector on pgoutput
# with the outbox EventRouter, in org.apache.kafka.connect.cli.ConnectStandalone),
# "walrelay-pgoutput" and "walrelay-wal2json" (walrelay with plugin.name set to that plugin).
# Per run it measures, with one observer for every system:
#   - start time: from the process's start until a consumer receives the first record (the slot
#     already holds the workload's rows);
#   - rows/s: the workload's rows / the time from the slot turning active (the system's
#     START_REPLICATION: the start of reading) until a consumer has received the last record;
#   - CPU: the process's user+system seconds while streaming (slot active to last record), and
#     before (start-up), and its walsender's, from /proc/<pid>/stat;
#   - peak RSS: VmHWM of the process (neither system has child processes);
#   - commit-to-consumer latency at LAT_RATE rows/s: each row's commit time
#     (pg_xact_commit_timestamp, track_commit_timestamp=on) to its arrival at a kcat consumer.
# The consumer (kcat, unbuffered) reads the topic from the offset the run starts at and checks that
# every key of the workload arrives exactly once. Method and results: docs/performance.md.
#
# Environment: SYSTEMS, WORKLOADS (one_txn txn_1000 single_row txn_1000_noise), ROWS (100000),
# SINGLE_ROWS (10000), ROUNDS (2: each system runs each workload ROUNDS times, in turn, and
# its fastest run counts), LAT_RATE (2000), LAT_SECONDS (30), SKIP_LATENCY=1, WARMUP_RECORDS
# (300000 records from kcat warm the broker first), CONNECT_HEAP ("-Xms256M -Xmx2G", the
# KAFKA_HEAP_OPTS connect-standalone.sh sets), WALRELAY_BUILD_DIR / WALRELAY, CHART_ONLY=1 (only
# redraw debezium.png from the CSVs in bench/results).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WALRELAY_BUILD_DIR=${WALRELAY_BUILD_DIR:-$ROOT/build}
WALRELAY=${WALRELAY:-$WALRELAY_BUILD_DIR/walrelay}
SYSTEMS=${SYSTEMS:-debezium walrelay-pgoutput walrelay-wal2json}
WORKLOADS=${WORKLOADS:-one_txn txn_1000 single_row txn_1000_noise}
OUT=$ROOT/bench/results
ROWS=${ROWS:-100000}
SINGLE_ROWS=${SINGLE_ROWS:-10000}
ROUNDS=${ROUNDS:-2}
LAT_RATE=${LAT_RATE:-2000}
LAT_SECONDS=${LAT_SECONDS:-30}
LAT_BATCH=10   # rows per transaction in the latency run, as in bench/run.sh
CONNECT_HEAP=${CONNECT_HEAP:--Xms256M -Xmx2G}
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS, which connect-standalone.sh runs the worker with.
CONNECT_JVM_OPTS="-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
RUN_TIMEOUT_S=600

# Chart from $OUT/debezium.csv and debezium_latency.csv: rows/s, start time and peak RSS per
# workload, one bar per system, and each system's latency percentiles.
draw_chart() {  # scratch directory
  local tmp=$1 n plot
  python3 - "$OUT/debezium.csv" "$OUT/debezium_latency.csv" "$tmp" <<'EOF'
import csv, os, sys
rows = list(csv.DictReader(open(sys.argv[1])))
systems = list(dict.fromkeys(r["system"] for r in rows))
by = {(r["workload"], r["system"]): r for r in rows}
for metric, scale in (("rows_s", 1), ("start_s", 1), ("peak_rss_kb", 1 / 1024)):
    with open(f"{sys.argv[3]}/chart_{metric}.csv", "w") as f:
        f.write(",".join(["workload"] + systems) + "\n")
        for w in dict.fromkeys(r["workload"] for r in rows):
            f.write(",".join([w] + [f"{float(by[(w, s)][metric]) * scale:.3f}" if (w, s) in by else "0" for s in systems]) + "\n")
lats = {l["system"]: l for l in csv.DictReader(open(sys.argv[2]))} if os.path.exists(sys.argv[2]) else {}
with open(f"{sys.argv[3]}/chart_latency.csv", "w") as f:
    f.write("percentile," + ",".join(systems) + "\n")
    for p in ("p50_ms", "p99_ms", "max_ms"):
        f.write(p.replace("_ms", "") + "," + ",".join(lats[s][p] if s in lats else "0" for s in systems) + "\n")
with open(f"{sys.argv[3]}/systems", "w") as f: f.write(str(len(systems)))
EOF
  n=$(cat "$tmp/systems")
  plot="for [i=2:$((n + 1))] f using i:xtic(1) title columnhead(i)"
  gnuplot <<EOF
set terminal pngcairo size 1800,560 noenhanced
set output "$OUT/debezium.png"
set datafile separator ","
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.9 border -1
set linetype 1 lc rgb "#888888"
set linetype 2 lc rgb "#1f4e9c"
set linetype 3 lc rgb "#c0570a"
set xtics rotate by 30 right
set bmargin 7
set key top right
set offsets graph 0, graph 0, graph 0.35, graph 0
set multiplot layout 1,4 title "walrelay vs Debezium on Kafka Connect standalone (one real Apache Kafka broker, same WAL)"
f = "$tmp/chart_rows_s.csv"
set title "rows/s (higher is better)"
set yrange [0:*]
plot $plot
f = "$tmp/chart_start_s.csv"
set title "start to first record, s (lower is better)"
plot $plot
set logscale y
set yrange [1:100000]
set offsets graph 0, graph 0, graph 0, graph 0
f = "$tmp/chart_peak_rss_kb.csv"
set title "peak RSS, MB (log scale)"
plot $plot
f = "$tmp/chart_latency.csv"
set title "latency at 2,000 rows/s, ms (log scale)"
plot $plot
unset multiplot
EOF
}
if [[ ${CHART_ONLY:-0} == 1 ]]; then  # redraws debezium.png from the CSVs in bench/results
  tmp=$(mktemp -d); draw_chart "$tmp"; rm -rf "$tmp"; exit 0
fi

[[ -x $WALRELAY ]] || { echo "$WALRELAY is missing: run 'bash scripts/build.sh' first" >&2; exit 1; }
for s in $SYSTEMS; do
  [[ $s == debezium || $s == walrelay-pgoutput || $s == walrelay-wal2json ]] ||
    { echo "SYSTEMS: '$s' is none of debezium walrelay-pgoutput walrelay-wal2json" >&2; exit 1; }
done
for tool in java mvn psql pgbench kcat python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required (see scripts/install-deps.sh)" >&2; exit 1; }
done
bash scripts/fetch-kafka.sh >/dev/null          # the broker's jars (dev-kafka finds the cache)
CONNECT_LIBS=$(bash scripts/fetch-connect.sh)   # no-op once fetched
source bench/lib/harness.sh
bench_harness walrelay-dbz-bench

# --- PostgreSQL: bench/run.sh's settings, plus commit timestamps for the latency run ---------
start_bench_postgres "max_replication_slots = 40" "track_commit_timestamp = on"
q "CREATE SEQUENCE public.latency_seq"
# Each system reads through a publication of its own, both FOR TABLE public.outbox (walrelay's
# wal2json slot filters with add-tables instead).
q "CREATE PUBLICATION walrelay_publication FOR TABLE public.outbox"
q "CREATE PUBLICATION dbz_publication FOR TABLE public.outbox"
PG_VERSION=$(q "SHOW server_version")
log "PostgreSQL $PG_VERSION at 127.0.0.1:$PORT"

# --- Kafka: one real Apache Kafka broker (walrelay dev-kafka --broker apache) --------------
"$WALRELAY" dev-kafka --broker apache >"$WORK/kafka.out" 2>"$WORK/kafka.err" &
KAFKA_PID=$!
track_pid $KAFKA_PID
for ((i = 0; i < 3000; i++)); do
  grep -q '^bootstrap.servers=' "$WORK/kafka.out" 2>/dev/null && grep -q 'started in' "$WORK/kafka.err" 2>/dev/null && break
  kill -0 $KAFKA_PID 2>/dev/null || break
  sleep 0.1
done
BOOTSTRAP=$(sed -n 's/^bootstrap.servers=//p' "$WORK/kafka.out" | head -1)
[[ -n $BOOTSTRAP ]] || { echo "dev-kafka --broker apache did not start: $(tail -20 "$WORK/kafka.err")" >&2; exit 1; }
BROKER_DESC=$(sed -n 's/^\(Apache Kafka [^ ]*\) (KRaft), \([0-9]*\) node(s), started in .*/\1 (KRaft; \2 node)/p' "$WORK/kafka.err" | head -1)
log "$BROKER_DESC at $BOOTSTRAP"
# A fresh broker JVM first interprets and JIT-compiles its produce and fetch paths; as in
# bench/run.sh, it takes WARMUP_RECORDS records before any timed run.
if [[ ${WARMUP_RECORDS:-300000} -gt 0 ]]; then
  python3 -c '
import sys
pad = "x" * 400
for i in range(int(sys.argv[1])): print(f"warm-{i}:{{\"seq\": {i}, \"note\": \"{pad}\"}}")
' "${WARMUP_RECORDS:-300000}" | kcat -P -b "$BOOTSTRAP" -t bench.warmup -K: -X enable.idempotence=true -X acks=all \
    -X linger.ms=5 2>"$WORK/kcat-warmup.err" || { echo "broker warm-up failed: $(tail -5 "$WORK/kcat-warmup.err")" >&2; exit 1; }
  kcat -C -b "$BOOTSTRAP" -t bench.warmup -o beginning -e -q -f '%o\n' 2>>"$WORK/kcat-warmup.err" >/dev/null
  log "broker warmed up with ${WARMUP_RECORDS:-300000} records"
fi

topic_end() {  # topic -> the next offset of its partitions, summed
  local parts spec=() total=0 off p
  parts=$(kcat -L -b "$BOOTSTRAP" -t "$1" 2>/dev/null | sed -n 's/^ *partition \([0-9]*\),.*/\1/p')
  for p in $parts; do spec+=(-t "$1:$p:-1"); done
  [[ ${#spec[@]} -gt 0 ]] || { echo 0; return; }
  while read -r off; do total=$((total + off)); done < <(kcat -Q -b "$BOOTSTRAP" "${spec[@]}" 2>/dev/null |
    sed -n 's/.* offset \(-\{0,1\}[0-9]*\).*/\1/p')
  echo "$total"
}
# The topic exists (one warm-up record) before a system's first run: in production it does.
ensure_topic() {
  printf 'bench-warmup:{}\n' | kcat -P -b "$BOOTSTRAP" -t "$1" -K: 2>>"$WORK/kcat-warmup.err" ||
    { echo "could not create topic $1: $(tail -5 "$WORK/kcat-warmup.err")" >&2; exit 1; }
}
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0; }
hwm_kb() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null | grep . || echo 0; }
sub() { python3 -c "print(f'{$1 - $2:.3f}')"; }

# --- the systems -------------------------------------------------------------------------
# Connect's worker with the converters that give walrelay's default bytes for the outbox
# (tests/integration/debezium_parity_test.cc, ChooseConverters): StringConverter for key and
# value, Connect's default SimpleHeaderConverter. Everything else is Connect's default: the
# producer (the worker sets acks=all, max.in.flight.requests.per.connection=1 for source tasks),
# offset.flush.interval.ms (60 s), plugin discovery (hybrid_warn: the classpath is scanned).
write_connect_config() {  # slot system -> "worker.properties connector.properties"
  local slot=$1 rest_port
  rest_port=$(free_port)
  cat >"$WORK/$slot.worker.properties" <<EOF
bootstrap.servers=$BOOTSTRAP
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename=$WORK/$slot.offsets
listeners=http://127.0.0.1:$rest_port
EOF
  cat >"$WORK/$slot.connector.properties" <<EOF
name=bench-$slot
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
database.hostname=127.0.0.1
database.port=$PORT
database.user=postgres
database.dbname=postgres
plugin.name=pgoutput
publication.name=dbz_publication
slot.name=$slot
snapshot.mode=no_data
table.include.list=public.outbox
topic.prefix=bench
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.route.topic.replacement=outbox.event.\${routedByValue}.$2
EOF
  echo "$WORK/$slot.worker.properties $WORK/$slot.connector.properties"
}
# connect-log4j.properties of the Kafka distribution: INFO, here to the run's log file.
cat >"$WORK/connect-log4j.properties" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
write_walrelay_config() {  # slot system plugin -> config path (bench/run.sh's, walrelay's defaults)
  cat >"$WORK/$1.json" <<EOF
{"name": "bench-$1", "config": {
  "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
  "database.hostname": "127.0.0.1", "database.port": "$PORT",
  "database.user": "postgres", "database.dbname": "postgres",
  "plugin.name": "$3", "publication.name": "walrelay_publication", "slot.name": "$1", "slot.create": "false",
  "table.include.list": "public.outbox", "topic.prefix": "bench",
  "listeners": "http://127.0.0.1:0",
  "transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
  "transforms.outbox.route.topic.replacement": "outbox.event.\${routedByValue}.$2",
  "kafka.bootstrap.servers": "$BOOTSTRAP"}}
EOF
  echo "$WORK/$1.json"
}
# Sets SYS_PID (not printed: a command substitution's subshell would own the process).
start_system() {  # system slot: starts the process in the background
  local sys=$1 slot=$2 cfg
  if [[ $sys == debezium ]]; then
    cfg=$(write_connect_config "$slot" "$sys")
    # shellcheck disable=SC2086
    java $CONNECT_HEAP $CONNECT_JVM_OPTS -Dlog4j.configuration="file:$WORK/connect-log4j.properties" \
      -cp "$CONNECT_LIBS/*" org.apache.kafka.connect.cli.ConnectStandalone $cfg >"$WORK/$slot.log" 2>&1 &
  else
    cfg=$(write_walrelay_config "$slot" "$sys" "${sys#walrelay-}")
    "$WALRELAY" run --config "$cfg" >"$WORK/$slot.log" 2>&1 &
  fi
  SYS_PID=$!
}
# One psql session waits (5 ms polls) until the slot is active and prints that moment. It says
# "polling" (a notice, on stderr) once connected: the system starts only then, or a fast one
# would already be reading when a slow psql start took its first look.
slot_active_at() {  # slot -> epoch seconds
  psql -X -q -At -v ON_ERROR_STOP=1 -c "SET statement_timeout = '${RUN_TIMEOUT_S}s'" -c "DO \$\$ BEGIN
    RAISE NOTICE 'polling'; LOOP
    EXIT WHEN (SELECT active FROM pg_replication_slots WHERE slot_name = '$1');
    PERFORM pg_sleep(0.005); END LOOP; END \$\$" -c "SELECT extract(epoch FROM clock_timestamp())"
}
wait_polling() {  # slot
  for _ in $(seq 1000); do grep -q polling "$WORK/$1.active.err" 2>/dev/null && return; sleep 0.01; done
  echo "the watcher of slot $1 did not start: $(cat "$WORK/$1.active.err")" >&2; exit 1
}

# The consumer: kcat from the run's first offset, unbuffered, one key per line; python notes the
# arrival of the first and the last record and checks each expected key came exactly once.
CONSUMER='
import collections, sys, time
rows, prefix = int(sys.argv[1]), sys.argv[2]
first = last = None; keys = collections.Counter()
for line in sys.stdin:
    t = time.time()
    if first is None: first = t
    last = t
    keys[line.rstrip("\n").strip("\"")] += 1
want = {f"{prefix}{i}" for i in range(1, rows + 1)}
bad = [k for k in want if keys.get(k) != 1] + [k for k in keys if k not in want]
print(f"{first or 0:.6f} {last or 0:.6f} {sum(keys.values())} {len(bad)} {sorted(bad)[:3]}")
'

measure_run() {  # system slot topic rows -> "start_s read_s total_s startup_cpu_s stream_cpu_s walsender_cpu_s peak_rss_kb"
  local sys=$1 slot=$2 topic=$3 rows=$4 from cons watcher pid t0 t_active cpu_active
  from=$(topic_end "$topic")
  # $! is kcat's pid (bash's wait on a pipeline's pid would wait for the whole pipeline); python
  # ends when kcat does.
  timeout "$RUN_TIMEOUT_S" kcat -C -u -b "$BOOTSTRAP" -t "$topic" -o "$from" -c "$rows" -q -f '%k\n' -X fetch.wait.max.ms=5 \
    2>"$WORK/$slot.kcat.err" > >(python3 -c "$CONSUMER" "$rows" order- >"$WORK/$slot.consumed.tmp" &&
      mv "$WORK/$slot.consumed.tmp" "$WORK/$slot.consumed") &
  cons=$!; track_pid $cons
  sleep 1   # the consumer has its metadata and is fetching at $from before the system starts
  slot_active_at "$slot" >"$WORK/$slot.active" 2>"$WORK/$slot.active.err" &
  watcher=$!; track_pid $watcher
  wait_polling "$slot"
  log "$sys: slot $slot -> $topic ($rows rows from offset $from)"
  t0=$(now)
  start_system "$sys" "$slot"
  pid=$SYS_PID
  track_pid "$pid"
  local finished rc=0
  wait -n -p finished "$watcher" "$pid" || rc=$?
  [[ $finished == "$watcher" && $rc == 0 ]] ||
    { echo "$sys (slot $slot) stopped before reading: $(tail -30 "$WORK/$slot.log")" >&2; exit 1; }
  cpu_active=$(cpu_s "$pid")
  t_active=$(cat "$WORK/$slot.active")
  rc=0; wait -n -p finished "$cons" "$pid" || rc=$?
  [[ $finished == "$cons" ]] ||
    { echo "$sys (slot $slot) stopped before the last record: $(tail -30 "$WORK/$slot.log")" >&2; exit 1; }
  local hwm cpu_end sender sender_cpu=0
  hwm=$(hwm_kb "$pid"); cpu_end=$(cpu_s "$pid")
  sender=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot'")
  [[ -z $sender ]] || sender_cpu=$(cpu_s "$sender")
  stop_pid "$pid" 60
  local t_first t_last got bad
  for _ in $(seq 100); do [[ -f $WORK/$slot.consumed ]] && break; sleep 0.1; done
  read -r t_first t_last got bad _ <"$WORK/$slot.consumed"
  [[ $got == "$rows" && $bad == 0 ]] || { echo "$sys: $topic: $(cat "$WORK/$slot.consumed") (records, keys not exactly once)" >&2; exit 1; }
  echo "$(sub "$t_first" "$t0") $(sub "$t_last" "$t_active") $(sub "$t_last" "$t0") $cpu_active $(sub "$cpu_end" "$cpu_active") $sender_cpu $hwm"
}

# --- the workloads: bench/run.sh's, rows with aggregatetype = the workload's name -----------
PAYLOAD="jsonb_build_object('seq', g, 'customer', 'customer-' || (g % 997), 'amount', 19.99, 'note', rpad(md5(g::text), 220, md5((g+1)::text)))"
outbox_insert() {  # aggregatetype first last
  echo "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), '$1', 'order-' || g, 'OrderCreated', $PAYLOAD FROM generate_series($2, $3) g;"
}
load() {
  local w=$1 f=$WORK/load-$1.sql s
  case $w in
    one_txn) outbox_insert "$w" 1 "$ROWS" >"$f" ;;
    txn_1000) for ((s = 1; s <= ROWS; s += 1000)); do outbox_insert "$w" $s $((s + 999)); done >"$f" ;;
    single_row) for ((s = 1; s <= SINGLE_ROWS; s++)); do outbox_insert "$w" $s $s; done >"$f" ;;
    txn_1000_noise)
      for ((s = 1; s <= ROWS; s += 1000)); do
        echo "BEGIN;"
        outbox_insert "$w" $s $((s + 999))
        echo "INSERT INTO unrelated SELECT g, rpad(md5(g::text), 90, 'x') FROM generate_series($(( (s - 1) * 10 + 1 )), $(( (s + 999) * 10 ))) g;"
        echo "COMMIT;"
      done >"$f" ;;
    *) echo "WORKLOADS: unknown workload '$w'" >&2; exit 1 ;;
  esac
  psql -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null
}

echo "workload,system,rows,wal_bytes,round,start_s,read_s,rows_s,total_s,startup_cpu_s,stream_cpu_s,walsender_cpu_s,cpu_s_per_100k_rows,peak_rss_kb" >"$WORK/runs.csv"
slot_name() { echo "b_${1}_${2//-/_}_r$3"; }   # workload system round
run_workload() {
  local w=$1 first sys r slot rows wal start_lsn end_lsn order
  q "TRUNCATE outbox, unrelated"
  # One slot per system and round, all copies of the first, so every run reads the same WAL.
  first=$(slot_name "$w" template 0)
  q "SELECT 1 FROM pg_create_logical_replication_slot('$first', 'pgoutput')" >/dev/null
  for ((r = 1; r <= ROUNDS; r++)); do
    for sys in $SYSTEMS; do
      local plugin=pgoutput; [[ $sys == walrelay-wal2json ]] && plugin=wal2json
      q "SELECT 1 FROM pg_copy_logical_replication_slot('$first', '$(slot_name "$w" "$sys" $r)', false, '$plugin')" >/dev/null
    done
  done
  start_lsn=$(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '$first'")
  q "SELECT pg_drop_replication_slot('$first')" >/dev/null
  log "$w: loading rows"
  load "$w"
  end_lsn=$(q "SELECT pg_current_wal_lsn()")
  rows=$(q "SELECT count(*) FROM outbox WHERE aggregatetype = '$w'")
  wal=$(q "SELECT pg_wal_lsn_diff('$end_lsn', '$start_lsn')::bigint")
  q "CHECKPOINT" >/dev/null
  for sys in $SYSTEMS; do ensure_topic "outbox.event.$w.$sys"; done
  # The systems take turns, in reverse order in every other round, so none always runs first
  # (cold page cache) or last.
  for ((r = 1; r <= ROUNDS; r++)); do
    order=$SYSTEMS; ((r % 2 == 0)) && order=$(echo "$SYSTEMS" | tr ' ' '\n' | tac | tr '\n' ' ')
    for sys in $order; do
      slot=$(slot_name "$w" "$sys" $r)
      local m; m=$(measure_run "$sys" "$slot" "outbox.event.$w.$sys" "$rows")
      python3 - "$w" "$sys" "$rows" "$wal" "$r" $m >>"$WORK/runs.csv" <<'EOF'
import sys
w, s, rows, wal, r = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
start, read, total, cpu0, cpu, sender, hwm = sys.argv[6:13]
per100k = (float(cpu) + float(sender)) * 100000 / rows
print(f"{w},{s},{rows},{wal},{r},{start},{read},{rows / float(read):.0f},{total},{cpu0},{float(cpu):.2f},{sender},{per100k:.2f},{hwm}")
EOF
      log "$w $sys round $r: $(tail -1 "$WORK/runs.csv")"
      q "SELECT pg_drop_replication_slot('$slot')" >/dev/null
    done
  done
}

echo "system,sent,received,offered_rows_s,p50_ms,p99_ms,max_ms,peak_rss_kb,cpu_s,walsender_cpu_s" >"$WORK/latency.csv"
latency_run() {  # system: commit-to-consumer latency at LAT_RATE rows/s
  local sys=$1 slot=lat_${1//-/_} topic=outbox.event.latency.$1 from pid cons watcher sent cpu0 sender
  local arrivals=$WORK/latency-$1.txt
  q "TRUNCATE outbox"
  ensure_topic "$topic"
  local plugin=pgoutput; [[ $sys == walrelay-wal2json ]] && plugin=wal2json
  q "SELECT 1 FROM pg_create_logical_replication_slot('$slot', '$plugin')" >/dev/null
  from=$(topic_end "$topic")
  kcat -C -u -b "$BOOTSTRAP" -t "$topic" -o "$from" -q -f '%k\n' -X fetch.wait.max.ms=5 -X fetch.min.bytes=1 \
    2>"$WORK/$slot.kcat.err" > >(python3 -u -c '
import sys, time
out = open(sys.argv[1], "w")
for line in sys.stdin:
    out.write(f"{line.strip()} {time.time() * 1000:.3f}\n"); out.flush()
' "$arrivals") &
  cons=$!; track_pid $cons
  slot_active_at "$slot" >/dev/null 2>"$WORK/$slot.active.err" &
  watcher=$!; track_pid $watcher
  wait_polling "$slot"
  start_system "$sys" "$slot"
  pid=$SYS_PID
  track_pid "$pid"
  wait "$watcher" || { echo "$sys (slot $slot) did not start reading: $(tail -30 "$WORK/$slot.log")" >&2; exit 1; }
  sleep 5   # streaming, and the consumer at the end of the topic
  cpu0=$(cpu_s "$pid")
  sender=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot'")
  local sender_cpu0; sender_cpu0=$(cpu_s "$sender")
  cat >"$WORK/lat.pgbench" <<EOF
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), 'latency', 'lat-' || nextval('latency_seq'), 'OrderCreated', $PAYLOAD FROM generate_series(1, $LAT_BATCH) g;
EOF
  log "latency ($sys): $LAT_RATE rows/s ($((LAT_RATE / LAT_BATCH)) transactions/s of $LAT_BATCH rows) for ${LAT_SECONDS}s"
  pgbench -n -c 2 -j 1 -R $((LAT_RATE / LAT_BATCH)) -T "$LAT_SECONDS" -f "$WORK/lat.pgbench" >"$WORK/pgbench-$sys.out" 2>&1
  sent=$(q "SELECT count(*) FROM outbox WHERE aggregatetype = 'latency'")
  for _ in $(seq 300); do [[ $(wc -l <"$arrivals") -ge $sent ]] && break; sleep 0.1; done
  local hwm cpu sender_cpu
  hwm=$(hwm_kb "$pid"); cpu=$(sub "$(cpu_s "$pid")" "$cpu0"); sender_cpu=$(sub "$(cpu_s "$sender")" "$sender_cpu0")
  stop_pid "$pid" 60
  stop_pid "$cons" 10
  q "COPY (SELECT aggregateid, extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000 FROM outbox WHERE aggregatetype = 'latency') TO STDOUT" >"$WORK/commits-$sys.txt"
  for _ in $(seq 100); do [[ $(q "SELECT active FROM pg_replication_slots WHERE slot_name = '$slot'") == f ]] && break; sleep 0.1; done
  q "SELECT pg_drop_replication_slot('$slot')" >/dev/null
  python3 - "$sys" "$arrivals" "$WORK/commits-$sys.txt" "$sent" "$LAT_SECONDS" "$hwm" "$cpu" "$sender_cpu" >>"$WORK/latency.csv" <<'EOF'
import sys
sys_, arrivals, commits, sent, secs, hwm, cpu, sender = sys.argv[1:9]
commit = {}
for line in open(commits):
    k, t = line.split("\t"); commit[k] = float(t)
lat = sorted(float(a) - commit[k] for k, a in (l.split() for l in open(arrivals) if len(l.split()) == 2) if k in commit)
if not lat: sys.exit(f"latency ({sys_}): the consumer received nothing")
def pct(p): return lat[min(len(lat) - 1, int(p * len(lat)))]
print(f"{sys_},{sent},{len(lat)},{int(sent) / int(secs):.0f},{pct(0.5):.1f},{pct(0.99):.1f},{lat[-1]:.1f},{hwm},{cpu},{sender}")
EOF
  log "latency ($sys): $(tail -1 "$WORK/latency.csv")"
}

# Producer settings as each Connect run logged them (its first ProducerConfig block for the task).
connect_producer_settings() {
  local f; f=$(ls "$WORK"/b_*debezium*.log 2>/dev/null | head -1)
  [[ -n $f ]] || return 0
  awk '/ProducerConfig values:/ { on = 1; next } on && /^\[/ { exit } on' "$f" |
    grep -E '^\s*(acks|linger.ms|batch.size|max.in.flight.requests.per.connection|enable.idempotence|compression.type|buffer.memory|max.request.size|delivery.timeout.ms) =' |
    sed 's/^\s*//; s/ = /=/' | paste -sd' '
}

for w in $WORKLOADS; do run_workload "$w"; done
if [[ ${SKIP_LATENCY:-0} != 1 ]]; then for s in $SYSTEMS; do latency_run "$s"; done; fi

# --- output -------------------------------------------------------------------------------
cp "$WORK/runs.csv" "$OUT/debezium_runs.csv"
[[ ${SKIP_LATENCY:-0} == 1 ]] || cp "$WORK/latency.csv" "$OUT/debezium_latency.csv"
mkdir -p "$OUT/logs/debezium"; rm -f "$OUT"/logs/debezium/*.log
rm -f "$OUT"/logs/debezium/*.txt
cp "$WORK"/b_*.log "$WORK"/lat_*.log "$WORK"/latency-*.txt "$WORK"/commits-*.txt "$OUT/logs/debezium/" 2>/dev/null || true
python3 - "$OUT" "$WORK/latency.csv" "$(nproc)" "$PG_VERSION" \
  "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src CMakeLists.txt 2>/dev/null || echo ' (with uncommitted src changes)')" \
  "$(uptime | sed 's/.*load average: //')" "$BROKER_DESC" "$CONNECT_HEAP" "$(connect_producer_settings)" "$ROUNDS" \
  "$(java -version 2>&1 | head -1)" <<'EOF' >"$OUT/debezium.md"
import csv, sys
out, lat_csv, cpus, pgver, rev, load, broker, heap, producer, rounds, java = sys.argv[1:12]
runs = list(csv.DictReader(open(f"{out}/debezium_runs.csv")))
lats = {l["system"]: l for l in csv.DictReader(open(lat_csv))}
systems = list(dict.fromkeys(r["system"] for r in runs)) or list(lats)
workloads = list(dict.fromkeys(r["workload"] for r in runs))
# Per workload and system: rows/s and CPU from the fastest round, start time the lowest, peak
# RSS the highest of the rounds.
best = {}
for w in workloads:
    for s in systems:
        mine = [r for r in runs if r["workload"] == w and r["system"] == s]
        if not mine: continue
        b = dict(max(mine, key=lambda r: float(r["rows_s"])))
        b["start_s"] = f"{min(float(r['start_s']) for r in mine):.2f}"
        b["peak_rss_kb"] = str(max(int(r["peak_rss_kb"]) for r in mine))
        best[(w, s)] = b
with open(f"{out}/debezium.csv", "w") as f:
    cols = ["workload", "system", "rows", "wal_bytes", "start_s", "read_s", "rows_s", "total_s", "startup_cpu_s", "stream_cpu_s", "walsender_cpu_s", "cpu_s_per_100k_rows", "peak_rss_kb"]
    f.write(",".join(cols) + "\n")
    for (w, s), b in best.items(): f.write(",".join(str(b[c]) for c in cols) + "\n")
def verdict(ok): return "met" if ok else "NOT met"
print(f"walrelay {rev}, {broker}, PostgreSQL {pgver}, {java}, {cpus} CPUs shared with other work "
      f"(load average at the end: {load}). Each system ran each workload {rounds} time(s), in turn, on its own slot "
      "(all copies of one slot, so every run read the same WAL); rows/s and CPU are from its fastest run, start time the "
      "lowest, peak RSS the highest.\n")
print(f"- Debezium: 3.2.3.Final PostgreSQL connector (pgoutput, snapshot.mode=no_data, outbox EventRouter; key and value "
      f"StringConverter, SimpleHeaderConverter) in Kafka Connect 3.9.1 standalone (ConnectStandalone), heap {heap}, G1 "
      f"(connect-standalone.sh's JVM options). Its producer, as the worker logged it: {producer or 'n/a'}.")
print("- walrelay: its defaults (enable.idempotence=true, acks=all, librdkafka's linger.ms=5, batch.size 64 KiB), "
      "the same EventRouter settings, plugin pgoutput or wal2json.\n")
print("Start s: process start to the first record at a consumer, the slot already holding the rows. Rows/s: rows / (slot "
      "active to the last record at the consumer). CPU s per 100k rows: the process's and its walsender's CPU while "
      "streaming, per 100,000 rows; start-up CPU: the process's CPU before the slot turned active.\n")
print("| workload | system | rows | start s | rows/s | start-up CPU s | CPU s per 100k rows (process + walsender) | peak RSS MB |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for (w, s), b in best.items():
    per = (float(b['stream_cpu_s']), float(b['walsender_cpu_s']))
    print(f"| {w} | {s} | {int(b['rows']):,} | {b['start_s']} | {int(b['rows_s']):,} | {b['startup_cpu_s']} | "
          f"{b['cpu_s_per_100k_rows']} ({per[0] * 100000 / int(b['rows']):.2f} + {per[1] * 100000 / int(b['rows']):.2f}) | {int(b['peak_rss_kb']) / 1024:.1f} |")
print()
if lats:
    print(f"Commit-to-consumer latency (each row's commit timestamp to its arrival at a kcat consumer), "
          f"transactions of 10 rows offered by pgbench:\n")
    print("| system | rows/s offered | received / sent | p50 ms | p99 ms | max ms | peak RSS MB | CPU s (process / walsender) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for s, l in lats.items():
        print(f"| {s} | {l['offered_rows_s']} | {l['received']} / {l['sent']} | {l['p50_ms']} | {l['p99_ms']} | {l['max_ms']} | "
              f"{int(l['peak_rss_kb']) / 1024:.1f} | {l['cpu_s']} / {l['walsender_cpu_s']} |")
    print()
if "debezium" in systems:
    print("Goals: walrelay >= 3x Debezium's rows/s, <= 1/20 of its peak RSS, <= 1/20 of its start time, lower p99.\n")
    for s in systems:
        if s == "debezium": continue
        for w in workloads:
            d, m = best.get((w, "debezium")), best.get((w, s))
            if not (d and m): continue
            tput = float(m["rows_s"]) / float(d["rows_s"])
            rss = int(m["peak_rss_kb"]) / int(d["peak_rss_kb"])
            start = float(m["start_s"]) / float(d["start_s"])
            print(f"- {s}, {w}: rows/s {tput:.2f}x Debezium's ({verdict(tput >= 3)}); peak RSS 1/{1 / rss:.0f} of Debezium's "
                  f"({verdict(rss <= 1 / 20)}); start time 1/{1 / start:.0f} of Debezium's ({verdict(start <= 1 / 20)}); "
                  f"CPU per 100k rows {float(m['cpu_s_per_100k_rows']) / float(d['cpu_s_per_100k_rows']):.2f}x Debezium's.")
        l, ld = lats.get(s), lats.get("debezium")
        if l and ld:
            print(f"- {s}, latency: p99 {l['p99_ms']} ms against Debezium's {ld['p99_ms']} ms "
                  f"({verdict(float(l['p99_ms']) < float(ld['p99_ms']))}); p50 {l['p50_ms']} against {ld['p50_ms']} ms.")
EOF
draw_chart "$WORK"
cat "$OUT/debezium.md"
