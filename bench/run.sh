#!/usr/bin/env bash
# walrelay benchmark: walrelay's throughput against the wal2json decode limit (pg_recvlogical),
# commit-to-Kafka latency at a fixed offered rate, and walrelay's peak RSS.
#
#   bash scripts/build.sh      # once; this script builds nothing
#   bash bench/run.sh          # -> bench/results/results.md, results.csv, throughput.png
#
# Environment: WALRELAY (binary, default build/walrelay), ROWS (200000), SINGLE_ROWS (20000),
# LAT_RATE (2000 rows/s), LAT_SECONDS (30), SKIP_LATENCY=1 to skip the latency run, WORKLOADS
# (space-separated subset of one_txn txn_1000 single_row txn_1000_noise), RELAY_WRAPPER (a
# command walrelay runs under, for profiling, e.g. "perf record -g -o /tmp/walrelay.perf"; peak
# RSS and CPU are then the wrapper's), RELAY_EXTRA_CONFIG (extra walrelay settings as JSON
# members, e.g. '"kafka.linger.ms": "20"'). Method and results: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WALRELAY=${WALRELAY:-$ROOT/build/walrelay}
OUT=$ROOT/bench/results
ROWS=${ROWS:-200000}
SINGLE_ROWS=${SINGLE_ROWS:-20000}
LAT_RATE=${LAT_RATE:-2000}
LAT_SECONDS=${LAT_SECONDS:-30}
LAT_BATCH=10   # rows per transaction in the latency run

[[ -x $WALRELAY ]] || { echo "build/walrelay is missing: run 'bash scripts/build.sh' first" >&2; exit 1; }
for tool in pg_recvlogical psql pgbench kcat python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required (see scripts/install-deps.sh)" >&2; exit 1; }
done
if ! command -v gnuplot >/dev/null; then
  echo "installing gnuplot (Debian package gnuplot-nox)" >&2
  apt-get install -y -q gnuplot-nox >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q gnuplot-nox >/dev/null; }
fi
PGBIN=$(pg_config --bindir 2>/dev/null || true)
[[ -x $PGBIN/initdb ]] || PGBIN=$(dirname "$(command -v initdb)")

mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/walrelay-bench.XXXXXX)
chmod 755 "$WORK"
AS_PG=()
if [[ $(id -u) == 0 ]]; then AS_PG=(runuser -u postgres --); chown postgres "$WORK"; fi
PIDS=()
cleanup() {
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [[ -f $WORK/data/postmaster.pid ]] && "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "[$(date +%T)] $*" >&2; }

# --- PostgreSQL ---------------------------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log "initdb in $WORK/data (port $PORT)"
"${AS_PG[@]}" "$PGBIN/initdb" -D "$WORK/data" -A trust -U postgres --no-sync >"$WORK/initdb.log" 2>&1
{
  echo "listen_addresses = '127.0.0.1'"
  echo "port = $PORT"
  echo "unix_socket_directories = '$WORK'"
  echo "wal_level = logical"
  echo "max_replication_slots = 20"
  echo "max_wal_senders = 20"
  echo "fsync = off"
  # Commits flush WAL at once (as in production; fsync=off keeps that cheap here): with
  # synchronous_commit=off the walsender would see a commit only at the WAL writer's next
  # round, up to wal_writer_delay (200 ms) later, and that would dominate the latency.
  echo "synchronous_commit = on"
  echo "full_page_writes = off"
  echo "autovacuum = off"
  echo "max_wal_size = 4GB"
} >>"$WORK/data/postgresql.conf"
if opl=$("${AS_PG[@]}" "$PGBIN/postgres" -C output_plugin_libraries -D "$WORK/data" 2>/dev/null); then
  [[ $opl == *wal2json* ]] || echo "output_plugin_libraries = 'pgoutput, test_decoding, wal2json'" >>"$WORK/data/postgresql.conf"
fi
"${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w start >/dev/null
export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
q() { psql -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }
psql -X -q -v ON_ERROR_STOP=1 -f docs/outbox.sql >/dev/null
q "CREATE TABLE public.unrelated (id bigint PRIMARY KEY, note text NOT NULL)"

# --- mock Kafka ---------------------------------------------------------------------------
"$WALRELAY" dev-kafka >"$WORK/kafka.out" 2>"$WORK/kafka.err" &
KAFKA_PID=$!
PIDS+=($KAFKA_PID)
for _ in $(seq 100); do grep -q '^bootstrap.servers=' "$WORK/kafka.out" 2>/dev/null && break; sleep 0.1; done
BOOTSTRAP=$(sed -n 's/^bootstrap.servers=//p' "$WORK/kafka.out" | head -1)
[[ -n $BOOTSTRAP ]] || { echo "dev-kafka did not start: $(cat "$WORK/kafka.err")" >&2; exit 1; }
log "PostgreSQL 127.0.0.1:$PORT, mock Kafka $BOOTSTRAP"

write_config() {  # slot -> config path
  local cfg=$WORK/$1.json
  cat >"$cfg" <<EOF
{"name": "bench-$1", "config": {
  "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
  "database.hostname": "127.0.0.1", "database.port": "$PORT",
  "database.user": "postgres", "database.dbname": "postgres",
  "plugin.name": "wal2json", "slot.name": "$1", "slot.create": "false",
  "table.include.list": "public.outbox", "topic.prefix": "bench",
  "listeners": "http://127.0.0.1:0",
  "transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
  ${RELAY_EXTRA_CONFIG:+$RELAY_EXTRA_CONFIG,}
  "kafka.bootstrap.servers": "$BOOTSTRAP"}}
EOF
  echo "$cfg"
}

now() { date +%s.%N; }
topic_high_watermarks() {  # topic -> sum over its partitions of the next offset
  local parts spec=() total=0 off
  parts=$(kcat -L -b "$BOOTSTRAP" -t "$1" 2>/dev/null | sed -n 's/^ *partition \([0-9]*\),.*/\1/p')
  for p in $parts; do spec+=(-t "$1:$p:-1"); done
  [[ ${#spec[@]} -gt 0 ]] || { echo 0; return; }
  while read -r off; do total=$((total + off)); done < <(kcat -Q -b "$BOOTSTRAP" "${spec[@]}" 2>/dev/null |
    sed -n 's/.* offset \(-\{0,1\}[0-9]*\).*/\1/p')
  echo "$total"
}
cpu_s() {  # pid -> user+system CPU seconds so far (0 if gone)
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0
}
hwm_kb() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null | grep . || echo 0; }

# Loads the workload's rows; the outbox rows get aggregatetype=$1 (topic outbox.event.$1).
# Payload: a jsonb object of about 300 bytes as text.
PAYLOAD="jsonb_build_object('seq', g, 'customer', 'customer-' || (g % 997), 'amount', 19.99, 'note', rpad(md5(g::text), 220, md5((g+1)::text)))"
outbox_insert() {  # aggregatetype first last
  echo "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), '$1', 'order-' || g, 'OrderCreated', $PAYLOAD FROM generate_series($2, $3) g;"
}
load() {
  local w=$1 f=$WORK/load-$1.sql
  case $w in
    one_txn) outbox_insert "$w" 1 "$ROWS" >"$f" ;;
    txn_1000)
      : >"$f"; for ((s = 1; s <= ROWS; s += 1000)); do outbox_insert "$w" $s $((s + 999)) >>"$f"; done ;;
    single_row)
      : >"$f"; for ((s = 1; s <= SINGLE_ROWS; s++)); do outbox_insert "$w" $s $s >>"$f"; done ;;
    txn_1000_noise)
      # Each transaction: 1,000 outbox rows and 10,000 rows of an unrelated table (~100 bytes each).
      local base; base=$(q "SELECT coalesce(max(id), 0) FROM unrelated")
      : >"$f"
      for ((s = 1; s <= ROWS; s += 1000)); do
        echo "BEGIN;"
        outbox_insert "$w" $s $((s + 999))
        echo "INSERT INTO unrelated SELECT $base + g, rpad(md5(g::text), 90, 'x') FROM generate_series($(( (s - 1) * 10 + 1 )), $(( (s + 999) * 10 ))) g;"
        echo "COMMIT;"
      done >>"$f" ;;
  esac
  psql -X -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null
}

RECV_OPTS=(-o format-version=2 -o include-xids=1 -o include-timestamp=1 -o include-lsn=1
           -o include-pk=1 -o include-types=1 -o add-tables=public.outbox)

echo "workload,rows,wal_bytes,payload_bytes,decode_s,decode_rows_s,decode_wal_mb_s,walrelay_s,walrelay_rows_s,walrelay_wal_mb_s,ratio,walrelay_peak_rss_kb,walrelay_cpu_s,walsender_cpu_s,mock_kafka_cpu_s" >"$WORK/results.csv"

decode_limit() {  # slot end_lsn -> seconds pg_recvlogical takes to decode the slot up to end_lsn
  log "pg_recvlogical --slot $1 --endpos $2"
  local t0 t1
  t0=$(now)
  pg_recvlogical -d "host=127.0.0.1 port=$PORT user=postgres dbname=postgres" --slot "$1" --start \
    "${RECV_OPTS[@]}" --endpos "$2" -f /dev/null --no-loop
  t1=$(now)
  python3 -c "print(f'{$t1-$t0:.3f}')"
}

relay_run() {  # slot end_lsn -> "seconds peak_rss_kb walrelay_cpu_s walsender_cpu_s mock_kafka_cpu_s"
  local slot=$1 end_lsn=$2 cfg t0 t1
  log "walrelay run (slot $slot) until confirmed_flush_lsn >= $end_lsn"
  cfg=$(write_config "$slot")
  t0=$(now)
  ${RELAY_WRAPPER:-} "$WALRELAY" run --config "$cfg" >"$WORK/$slot.log" 2>&1 &
  local pid=$! done_=0 waiter finished rc hwm relay_cpu sender_pid sender_cpu=0 kafka_cpu0 kafka_cpu
  kafka_cpu0=$(cpu_s "$KAFKA_PID")
  PIDS+=($pid)
  # One psql session polls the slot every 10 ms, so the end is seen within about 10 ms (a
  # shell loop spawning psql per check adds 50-100 ms of detection delay).
  psql -X -q -At -v ON_ERROR_STOP=1 -c "SET statement_timeout = '600s'" -c "DO \$\$ BEGIN LOOP
    EXIT WHEN (SELECT confirmed_flush_lsn >= '$end_lsn' FROM pg_replication_slots WHERE slot_name = '$slot');
    PERFORM pg_sleep(0.01); END LOOP; END \$\$" 2>"$WORK/$slot.wait.err" &
  waiter=$!
  rc=0; wait -n -p finished $waiter $pid || rc=$?
  if [[ $finished == "$waiter" && $rc == 0 ]]; then t1=$(now); done_=1; fi
  kill $waiter 2>/dev/null || true
  # Peak RSS is the kernel's high-water mark, CPU the process's user + system time so far.
  hwm=$(hwm_kb $pid)
  relay_cpu=$(cpu_s $pid)
  sender_pid=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name='$slot'")
  [[ -z $sender_pid ]] || sender_cpu=$(cpu_s "$sender_pid")
  kafka_cpu=$(python3 -c "print(f'{$(cpu_s "$KAFKA_PID") - $kafka_cpu0:.2f}')")
  kill -TERM $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  if [[ $done_ != 1 ]]; then
    echo "walrelay did not reach $end_lsn on slot $slot; its log:" >&2; tail -20 "$WORK/$slot.log" >&2; exit 1
  fi
  echo "$(python3 -c "print(f'{$t1-$t0:.3f}')") $hwm $relay_cpu $sender_cpu $kafka_cpu"
}

run_workload() {
  local w=$1 slot
  # Four slots at the same LSN (copies of the first): decode, walrelay, decode, walrelay.
  local slots=(bench_${w}_dec1 bench_${w}_rel1 bench_${w}_dec2 bench_${w}_rel2)
  q "SELECT 1 FROM pg_create_logical_replication_slot('${slots[0]}', 'wal2json')" >/dev/null
  for slot in "${slots[@]:1}"; do
    q "SELECT 1 FROM pg_copy_logical_replication_slot('${slots[0]}', '$slot')" >/dev/null
  done
  local start_lsn; start_lsn=$(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name='${slots[0]}'")
  log "$w: loading rows (slots ${slots[*]} at $start_lsn)"
  load "$w"
  local end_lsn rows wal payload
  end_lsn=$(q "SELECT pg_current_wal_lsn()")
  rows=$(q "SELECT count(*) FROM outbox WHERE aggregatetype='$w'")
  wal=$(q "SELECT pg_wal_lsn_diff('$end_lsn', '$start_lsn')::bigint")
  payload=$(q "SELECT sum(octet_length(payload::text)) FROM outbox WHERE aggregatetype='$w'")
  q "CHECKPOINT" >/dev/null

  # Each side runs twice, alternating, and its faster run counts: neither gains from a warmer
  # cache, and one unlucky run on a shared 2-CPU machine does not decide the ratio. Peak RSS
  # is the higher of walrelay's two runs.
  local dec_times=() rel_runs=()
  dec_times+=("$(decode_limit "${slots[0]}" "$end_lsn")")
  rel_runs+=("$(relay_run "${slots[1]}" "$end_lsn")")
  dec_times+=("$(decode_limit "${slots[2]}" "$end_lsn")")
  rel_runs+=("$(relay_run "${slots[3]}" "$end_lsn")")
  # Kafka must have acknowledged every row, twice: the sum of the topic's partition high
  # watermarks (the mock cluster drops old records of a large partition, so they cannot all
  # be read back).
  local n; n=$(topic_high_watermarks "outbox.event.$w")
  [[ $n -ge $((2 * rows)) ]] || { echo "outbox.event.$w holds $n records, expected $((2 * rows))" >&2; exit 1; }
  for slot in "${slots[@]}"; do q "SELECT pg_drop_replication_slot('$slot')" >/dev/null; done
  python3 - "$w" "$rows" "$wal" "$payload" "${dec_times[*]}" "${rel_runs[0]}" "${rel_runs[1]}" >>"$WORK/results.csv" <<'EOF'
import sys
w, rows, wal, payload = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
d = min(float(x) for x in sys.argv[5].split())
runs = [a.split() for a in sys.argv[6:8]]
best = min(runs, key=lambda run: float(run[0]))
r, hwm = float(best[0]), max(int(run[1]) for run in runs)
print(f"{w},{rows},{wal},{payload},{d:.3f},{rows/d:.0f},{wal/d/1e6:.2f},{r:.3f},{rows/r:.0f},{wal/r/1e6:.2f},{d/r:.2f},{hwm},{','.join(best[2:5])}")
EOF
  log "$w: $(tail -1 "$WORK/results.csv")"
}

for w in ${WORKLOADS:-one_txn txn_1000 single_row txn_1000_noise}; do run_workload "$w"; done

# --- latency ------------------------------------------------------------------------------
LAT_LINE=""
if [[ ${SKIP_LATENCY:-0} != 1 ]]; then
  slot=bench_latency
  q "SELECT 1 FROM pg_create_logical_replication_slot('$slot', 'wal2json')" >/dev/null
  cfg=$(write_config "$slot")
  "$WALRELAY" run --config "$cfg" >"$WORK/$slot.log" 2>&1 &
  rpid=$!; PIDS+=($rpid)
  sleep 2
  total=$((LAT_RATE * LAT_SECONDS))
  # Consumer: kcat prints each record's timestamp (the commit time, ms); python stamps arrival.
  kcat -C -u -b "$BOOTSTRAP" -t outbox.event.latency -o end -f '%T\n' \
    -X fetch.wait.max.ms=5 -X fetch.min.bytes=1 2>"$WORK/kcat.err" > >(python3 -u -c '
import sys, time
out = open(sys.argv[1], "w")
for line in sys.stdin:
    out.write(f"{line.strip()} {time.time()*1000:.3f}\n"); out.flush()
' "$WORK/latency.txt") &
  cpid=$!; PIDS+=($cpid)
  sleep 2   # consumer assigned and at the end of the (empty) topic
  cat >"$WORK/lat.pgbench" <<EOF
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), 'latency', 'order-' || g, 'OrderCreated', $PAYLOAD FROM generate_series(1, $LAT_BATCH) g;
EOF
  log "latency: $LAT_RATE rows/s ($((LAT_RATE / LAT_BATCH)) transactions/s of $LAT_BATCH rows) for ${LAT_SECONDS}s"
  pgbench -n -c 2 -j 1 -R $((LAT_RATE / LAT_BATCH)) -T "$LAT_SECONDS" -f "$WORK/lat.pgbench" >"$WORK/pgbench.out" 2>&1
  sent=$(q "SELECT count(*) FROM outbox WHERE aggregatetype='latency'")
  for _ in $(seq 300); do [[ $(wc -l <"$WORK/latency.txt") -ge $sent ]] && break; sleep 0.1; done
  lat_hwm=$(hwm_kb $rpid)
  kill -TERM $rpid 2>/dev/null || true; wait $rpid 2>/dev/null || true
  kill $cpid 2>/dev/null || true
  LAT_LINE=$(python3 - "$WORK/latency.txt" "$sent" "$LAT_SECONDS" "$lat_hwm" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 2]
lat = sorted(float(a) - float(t) for t, a in rows)
sent, secs, hwm = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def pct(p): return lat[min(len(lat) - 1, int(p * len(lat)))]
print(f"{sent},{len(lat)},{sent/secs:.0f},{pct(0.5):.1f},{pct(0.99):.1f},{lat[-1]:.1f},{hwm}")
EOF
)
  log "latency: sent,received,rows_s,p50,p99,max,rss = $LAT_LINE"
fi

# --- output -------------------------------------------------------------------------------
cp "$WORK/results.csv" "$OUT/results.csv"
mkdir -p "$OUT/logs"; rm -f "$OUT"/logs/*.log; cp "$WORK"/bench_*.log "$OUT/logs/"
if [[ -n $LAT_LINE ]]; then
  { echo "sent,received,offered_rows_s,p50_ms,p99_ms,max_ms,walrelay_peak_rss_kb"; echo "$LAT_LINE"; } >"$OUT/latency.csv"
fi
python3 - "$OUT" "$LAT_LINE" "$(nproc)" "$(psql -X -At -c 'SHOW server_version')" "$(git rev-parse --short HEAD)" <<'EOF' >"$OUT/results.md"
import csv, sys
out, lat, cpus, pgver, rev = sys.argv[1:6]
rows = list(csv.DictReader(open(f"{out}/results.csv")))
print(f"walrelay {rev}, PostgreSQL {pgver}, librdkafka mock cluster, {cpus} CPUs. "
      "MB = bytes of WAL between the slots' start and end LSN (10^6 bytes).\n")
print("| workload | rows | WAL MB | payload MB | decode limit rows/s | decode limit MB/s | walrelay rows/s | walrelay MB/s | ratio | walrelay peak RSS MB | walrelay CPU s | its walsender CPU s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['workload']} | {int(r['rows']):,} | {int(r['wal_bytes'])/1e6:.1f} | {int(r['payload_bytes'])/1e6:.1f} | "
          f"{int(r['decode_rows_s']):,} | {r['decode_wal_mb_s']} | {int(r['walrelay_rows_s']):,} | {r['walrelay_wal_mb_s']} | "
          f"{r['ratio']}x | {int(r['walrelay_peak_rss_kb'])/1024:.1f} | {r['walrelay_cpu_s']} | {r['walsender_cpu_s']} |")
rss = [int(r['walrelay_peak_rss_kb']) / 1024 for r in rows]
ratios = [float(r['ratio']) for r in rows]
def verdict(ok): return "met" if ok else "NOT met"
print()
if rows:
    print(f"- Throughput >= 0.9x the decode limit on every workload: {verdict(min(ratios) >= 0.9)} "
          f"(lowest {min(ratios):.2f}x).")
    print(f"- Peak RSS <= 16 MB on every workload: {verdict(max(rss) <= 16)} (highest {max(rss):.1f} MB).")
if lat:
    sent, recv, rate, p50, p99, mx, hwm = lat.split(",")
    print(f"- p99 commit-to-consumer latency < 50 ms at {rate} rows/s: {verdict(float(p99) < 50)} "
          f"({recv} of {sent} records; p50 {p50} ms, p99 {p99} ms, max {mx} ms; walrelay peak RSS "
          f"{int(hwm)/1024:.1f} MB).")
EOF
gnuplot <<EOF
set terminal pngcairo size 900,500 noenhanced
set output "$OUT/throughput.png"
set datafile separator ","
set title "rows/s per workload: walrelay vs the pg_recvlogical decode limit"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "rows/s"
set yrange [0:*]
set key top right
plot "$OUT/results.csv" every ::1 using 6:xtic(1) title "decode limit (pg_recvlogical)", "" every ::1 using 9 title "walrelay to Kafka"
EOF
cat "$OUT/results.md"
