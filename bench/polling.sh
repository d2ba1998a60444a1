#!/usr/bin/env bash
# What source.mode=polling costs against the replication (CDC) path: rows/s and
# commit-to-consumer latency on the same workloads, and what each mode costs the database
# (statements, rows deleted or updated, dead tuples, WAL written), on one real Apache Kafka
# broker (KRaft, one node, `walrelay dev-kafka --broker apache`) and one PostgreSQL, in one run.
#
#   bash scripts/build.sh         # once; this script builds nothing
#   bash scripts/fetch-kafka.sh   # once, for the broker's jars
#   bash bench/polling.sh         # -> bench/results/polling.md, polling.csv, polling_latency.csv
#
# Modes:
#   cdc              walrelay's default: a logical replication slot (pgoutput), no statements on
#                    the outbox table
#   polling          source.mode=polling with its defaults (polling.mark=delete)
#   polling_column   source.mode=polling, polling.mark=column:published_at, with the partial
#                    index docs/outbox-polling.sql shows
# The outbox table has docs/outbox-polling.sql's seq column (and a nullable published_at, which
# costs a row nothing: the null bitmap fits the tuple header's padding) in every mode.
#
# Throughput: per workload, the rows are loaded once after a slot was created; cdc relays them
# from the slot (up to the load's end LSN, as bench/run.sh), polling from the table (until the
# workload's last row is deleted or stamped: rows are marked in seq order, a batch only after
# Kafka acknowledged all of it, so that is the moment the table holds no unpublished row). Each
# mode runs ROUNDS=2 times, the modes taking turns (cdc reads a copy of the first slot; a polling
# mode whose rows are gone gets them loaded again, the same keys, into an emptied table); the
# faster run counts. Kafka must then hold every row of both runs of each mode exactly twice
# (read back), or the script fails. Each load is followed by ANALYZE, as autovacuum's analyze
# would follow it in production: without statistics the planner reads polling_column's
# unpublished rows with a bitmap scan and a sort of all of them, not the partial index in order.
#
# Database cost: walrelay connects as its own role (walrelay), so pg_stat_statements (loaded
# with shared_preload_libraries) counts its statements apart from this script's. Around each
# relay run: pg_stat_statements is reset, and after walrelay stopped and its backends exited
# (so they flushed their table statistics) the script reads its statements' calls and execution
# time, the outbox's n_tup_del / n_tup_upd deltas and n_dead_tup (autovacuum is off) and the WAL
# written (pg_current_wal_lsn); in the latency runs also the database's committed transactions
# (every session's, pgbench's included).
#
# Latency: pgbench offers LAT_RATE rows/s in 10-row transactions for LAT_SECONDS to a running
# walrelay; a read_committed kcat consumer stamps each record's arrival; latency = arrival - the
# record's timestamp. track_commit_timestamp=on, so a polled record's timestamp is its
# transaction's commit time, as a replicated record's is. The database's cost is taken over the
# pgbench window, per second. The table starts empty and is not analysed during the run.
#
# Environment: BROKERS ("apache"; "mock apache" adds librdkafka's mock cluster), WORKLOADS
# ("txn_1000 single_row"), COLUMN_WORKLOADS ("txn_1000": those also run polling_column), ROWS
# (100000, txn_1000), SINGLE_ROWS (20000), LAT_MODES ("cdc polling polling_column"), LAT_RATE (2000 rows/s),
# LAT_SECONDS (30), SKIP_LATENCY=1, POLLING_CONFIG (JSON members every polling mode adds, e.g.
# '"polling.batch.size": "2000"'), RELAY_EXTRA_CONFIG (JSON members every mode adds),
# WARMUP_RECORDS (300000 kcat records) and WARMUP_ROWS (100000 rows relayed by each mode before
# the timed runs), WALRELAY_BUILD_DIR (build) or WALRELAY, WALRELAY_REV (the revision the binary
# was built from, for the report; default git HEAD). About three minutes with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WALRELAY_BUILD_DIR=${WALRELAY_BUILD_DIR:-$ROOT/build}
WALRELAY=${WALRELAY:-$WALRELAY_BUILD_DIR/walrelay}
BROKERS=${BROKERS:-apache}
WORKLOADS=${WORKLOADS:-txn_1000 single_row}
COLUMN_WORKLOADS=${COLUMN_WORKLOADS:-txn_1000}
LAT_MODES=${LAT_MODES:-cdc polling polling_column}
OUT=$ROOT/bench/results
ROWS=${ROWS:-100000}
SINGLE_ROWS=${SINGLE_ROWS:-20000}
LAT_RATE=${LAT_RATE:-2000}
LAT_SECONDS=${LAT_SECONDS:-30}
LAT_BATCH=10   # rows per transaction in the latency run, as in bench/run.sh
POLLING_CONFIG=${POLLING_CONFIG:-}
ROUNDS=2       # acked_records expects every key twice
PLUGINS=pgoutput FIRST_PLUGIN=pgoutput   # the CDC side reads pgoutput, walrelay's default
RELAY_DB_USER=walrelay

[[ -x $WALRELAY ]] || { echo "$WALRELAY is missing: run 'bash scripts/build.sh' first" >&2; exit 1; }
mode_config() {  # mode -> the JSON members it adds to walrelay's config
  local extra=${RELAY_EXTRA_CONFIG:-}
  case $1 in
    cdc) ;;
    polling) extra+="${extra:+, }\"source.mode\": \"polling\"${POLLING_CONFIG:+, $POLLING_CONFIG}" ;;
    polling_column) extra+="${extra:+, }\"source.mode\": \"polling\", \"polling.mark\": \"column:published_at\"${POLLING_CONFIG:+, $POLLING_CONFIG}" ;;
    *) echo "unknown mode '$1' (cdc, polling, polling_column)" >&2; return 1 ;;
  esac
  echo "$extra"
}
for m in $LAT_MODES; do mode_config "$m" >/dev/null || exit 1; done
for b in $BROKERS; do
  [[ $b == mock || $b == apache ]] || { echo "BROKERS: '$b' is neither mock nor apache" >&2; exit 1; }
done
for w in $WORKLOADS $COLUMN_WORKLOADS; do
  [[ $w == txn_1000 || $w == single_row || $w == one_txn ]] ||
    { echo "WORKLOADS: '$w' is not one of txn_1000 single_row one_txn" >&2; exit 1; }
done
KAFKA_LIBS=""
if [[ " $BROKERS " == *" apache "* ]]; then
  command -v java >/dev/null || { echo "java is required for BROKERS=apache (see scripts/install-deps.sh)" >&2; exit 1; }
  KAFKA_LIBS=$(bash scripts/fetch-kafka.sh)
fi
for tool in psql pgbench kcat python3; do
  command -v "$tool" >/dev/null || { echo "$tool is required (see scripts/install-deps.sh)" >&2; exit 1; }
done
# The polling defaults, as the source in this tree sets them (for the report).
POLL_BATCH=$(sed -n 's/.*int64_t batch_size = \([0-9]*\);.*/\1/p' src/config/relay_settings.h | head -1)
POLL_INTERVAL=$(sed -n 's/.*int64_t interval_ms = \([0-9]*\);.*/\1/p' src/config/relay_settings.h | head -1)
source bench/lib/harness.sh
bench_harness walrelay-polling-bench
source bench/lib/relay_bench.sh
T_START=$(now)
start_postgres "shared_preload_libraries = 'pg_stat_statements'" "track_commit_timestamp = on"
psql -X -q -v ON_ERROR_STOP=1 -f docs/outbox-polling.sql >/dev/null
q "ALTER TABLE public.outbox ADD COLUMN published_at timestamptz"
q "CREATE EXTENSION pg_stat_statements"
# Superuser so that both modes run without a grant the other lacks; the role is there to tell
# walrelay's statements from this script's.
q "CREATE ROLE $RELAY_DB_USER LOGIN REPLICATION SUPERUSER"

echo "broker,workload,mode,rows,load_wal_bytes,walrelay_s,rows_s,ratio_to_cdc,runs_s,walrelay_peak_rss_kb,walrelay_cpu_s,backend_cpu_s,broker_cpu_s,statements,statement_ms,rows_deleted,rows_updated,dead_tuples,wal_bytes,wal_bytes_per_row,records_in_topic,ack_check" >"$WORK/polling.csv"
echo "broker,mode,sent,received,offered_rows_s,p50_ms,p99_ms,max_ms,walrelay_peak_rss_kb,walrelay_cpu_s,backend_cpu_s,broker_cpu_s,statements_s,statement_ms_s,transactions_s,wal_mb_s,wal_bytes_per_row,rows_deleted,rows_updated,dead_tuples" >"$WORK/polling_latency.csv"

# --- the database's side --------------------------------------------------------------------
db_snap() {  # -> "wal_lsn xact_commit n_tup_del n_tup_upd n_dead_tup"
  psql -X -q -At -F ' ' -v ON_ERROR_STOP=1 -c "SELECT pg_current_wal_lsn(),
    (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
    n_tup_del, n_tup_upd, n_dead_tup FROM pg_stat_user_tables WHERE relid = 'public.outbox'::regclass"
}
pgss_reset() { q "SELECT pg_stat_statements_reset()" >/dev/null; }
pgss_sum() {  # -> "calls exec_ms" of walrelay's statements since the reset
  psql -X -q -At -F ' ' -v ON_ERROR_STOP=1 -c "SELECT coalesce(sum(calls), 0), round(coalesce(sum(total_exec_time), 0)::numeric, 1)
    FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = '$RELAY_DB_USER'"
}
pgss_dump() {  # file: walrelay's statements since the reset, most time first (logs/)
  psql -X -q -A -F ' | ' -v ON_ERROR_STOP=1 -c "SELECT calls, round(total_exec_time::numeric, 1) AS ms, rows,
    left(regexp_replace(query, '\s+', ' ', 'g'), 200) AS query
    FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = '$RELAY_DB_USER'
    ORDER BY total_exec_time DESC" >"$1"
}
# A backend flushes its table statistics at exit at the latest (PostgreSQL 15: at most once a
# second while it runs), so the counters are read once walrelay's backends are gone.
wait_relay_backends_gone() {
  local i
  for ((i = 0; i < 200; i++)); do
    [[ $(q "SELECT count(*) FROM pg_stat_activity WHERE usename = '$RELAY_DB_USER'") == 0 ]] && return 0
    sleep 0.05
  done
  echo "walrelay's database sessions did not end" >&2; exit 1
}
db_cost() {  # before after pgss -> "statements statement_ms transactions rows_deleted rows_updated dead_tuples wal_bytes"
  python3 - "$1" "$2" "$3" "$(q "SELECT pg_wal_lsn_diff('${2%% *}', '${1%% *}')::bigint")" <<'EOF'
import sys
b, a, s = sys.argv[1].split(), sys.argv[2].split(), sys.argv[3].split()
print(s[0], s[1], int(a[1]) - int(b[1]), int(a[2]) - int(b[2]), int(a[3]) - int(b[3]), a[4], sys.argv[4])
EOF
}
polling_backend() {  # -> pid of the polling relay's connection (empty if none)
  q "SELECT pid FROM pg_stat_activity WHERE application_name = 'walrelay-polling' ORDER BY backend_start DESC LIMIT 1"
}

# --- the table's rows -----------------------------------------------------------------------
# The polling modes need the workload's rows unpublished in the table: the first load serves the
# first polling run; later runs get the same rows loaded again into an emptied table.
FRESH=0
prepare_table() {  # workload mode -> the workload's last seq
  if [[ $FRESH != 1 || $2 == polling_column ]]; then
    q "TRUNCATE outbox"
    # The partial index only for polling_column: the other modes' tables do not need it.
    [[ $2 != polling_column ]] || q "CREATE INDEX outbox_unpublished ON public.outbox (seq) WHERE published_at IS NULL"
    load "$1"
    q "ANALYZE outbox"
    q "CHECKPOINT" >/dev/null
  fi
  q "SELECT max(seq) FROM outbox"
}
unpublished_rows() {  # mode -> rows of the table still to relay
  case $1 in
    polling) q "SELECT count(*) FROM outbox" ;;
    polling_column) q "SELECT count(*) FROM outbox WHERE published_at IS NULL" ;;
  esac
}

# walrelay in a polling mode until the row with seq last_seq is marked. One psql session checks
# every 10 ms (an index lookup), committing each check: a transaction held open across the run
# would hold back the xmin horizon, so the deleted rows' index entries could never be marked dead
# and every read would step over all of them.
poll_run() {  # name mode last_seq -> "seconds peak_rss_kb walrelay_cpu_s backend_cpu_s broker_cpu_s"
  local name=$1 mode=$2 last=$3 cfg t0 t1 pid waiter finished rc=0 done_=0 published
  local hwm relay_cpu backend backend_cpu=0 kafka_cpu0 kafka_cpu
  case $mode in
    polling) published="NOT EXISTS (SELECT 1 FROM outbox WHERE seq = $last)" ;;
    polling_column) published="EXISTS (SELECT 1 FROM outbox WHERE seq = $last AND published_at IS NOT NULL)" ;;
  esac
  log "walrelay run ($mode, $BROKER) until the row with seq $last is marked"
  cfg=$(RELAY_EXTRA_CONFIG=$(mode_config "$mode") write_config "$name" pgoutput "$mode")
  kafka_cpu0=$(tree_cpu_s "$KAFKA_PID")
  t0=$(now)
  "$WALRELAY" run --config "$cfg" >"$WORK/$name.log" 2>&1 &
  pid=$!
  track_pid $pid
  psql -X -q -At -v ON_ERROR_STOP=1 -c "SET statement_timeout = '600s'" -c "DO \$\$ BEGIN LOOP
    EXIT WHEN $published;
    COMMIT;
    PERFORM pg_sleep(0.01);
    COMMIT; END LOOP; END \$\$" 2>"$WORK/$name.wait.err" &
  waiter=$!
  track_pid $waiter
  wait -n -p finished $waiter $pid || rc=$?
  if [[ $finished == "$waiter" && $rc == 0 ]]; then t1=$(now); done_=1; fi
  kill $waiter 2>/dev/null || true
  hwm=$(hwm_kb $pid)
  relay_cpu=$(cpu_s $pid)
  thread_cpu $pid >"$WORK/$name.threads"
  backend=$(polling_backend)
  [[ -z $backend ]] || backend_cpu=$(cpu_s "$backend")
  kafka_cpu=$(python3 -c "print(f'{$(tree_cpu_s "$KAFKA_PID") - $kafka_cpu0:.2f}')")
  stop_pid $pid 60
  if [[ $done_ != 1 ]]; then
    echo "walrelay ($mode) did not mark the row with seq $last; its log:" >&2; tail -20 "$WORK/$name.log" >&2; exit 1
  fi
  echo "$(python3 -c "print(f'{$t1-$t0:.3f}')") $hwm $relay_cpu $backend_cpu $kafka_cpu"
}

# --- throughput -----------------------------------------------------------------------------
run_workload() {
  local w=$1 p=${BROKER}_$1 modes="cdc polling" mode round slot start_lsn end_lsn rows="" load_wal=""
  [[ " $COLUMN_WORKLOADS " != *" $w "* ]] || modes+=" polling_column"
  for mode in $modes; do ensure_topic "outbox.event.$w.$mode"; done
  local -A runs=()
  local run before after last left
  # Each round loads the rows afresh after creating its slot, so the slot's WAL holds one load of
  # them: a slot created earlier would also decode the reloads of the polling runs (their keys
  # again) before its walrelay saw the end of the first load.
  for ((round = 1; round <= ROUNDS; round++)); do
    for mode in $modes; do
      slot=bench_${p}_${mode}_$round
      if [[ $mode == cdc ]]; then
        q "TRUNCATE outbox"
        q "SELECT 1 FROM pg_create_logical_replication_slot('$slot', 'pgoutput')" >/dev/null
        start_lsn=$(q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name='$slot'")
        log "$w ($BROKER): loading rows (slot at $start_lsn)"
        load "$w"
        end_lsn=$(q "SELECT pg_current_wal_lsn()")
        : "${rows:=$(q "SELECT count(*) FROM outbox WHERE aggregatetype='$w'")}"
        : "${load_wal:=$(q "SELECT pg_wal_lsn_diff('$end_lsn', '$start_lsn')::bigint")}"
        q "ANALYZE outbox"
        q "CHECKPOINT" >/dev/null
        FRESH=1
        pgss_reset; before=$(db_snap)
        run=$(relay_run "$slot" "$end_lsn" pgoutput cdc)
        run=$(echo "$run" | awk '{ print $1, $2, $3, $4, $5 }')   # the walsender is cdc's backend
      else
        last=$(prepare_table "$w" "$mode")
        FRESH=0   # prepare_table ran in a subshell
        pgss_reset; before=$(db_snap)
        run=$(poll_run "$slot" "$mode" "$last")
        left=$(unpublished_rows "$mode")
        [[ $left == 0 ]] || { echo "$w $mode: $left rows left unpublished after the run" >&2; exit 1; }
      fi
      wait_relay_backends_gone
      after=$(db_snap)
      pgss_dump "$WORK/$slot.statements"
      run+=" $(db_cost "$before" "$after" "$(pgss_sum)")"
      [[ $mode != cdc ]] || q "SELECT pg_drop_replication_slot('$slot')" >/dev/null
      [[ $mode != polling_column ]] || q "DROP INDEX outbox_unpublished"
      log "$w $mode round $round: s rss cpu backend_cpu broker_cpu statements ms xacts deleted updated dead wal = $run"
      runs[$mode]+="$run;"
    done
  done
  for mode in $modes; do
    local acked; acked=$(acked_records "outbox.event.$w.$mode" "$rows")
    python3 - "$BROKER" "$w" "$mode" "$rows" "$load_wal" "${runs[$mode]}" "${runs[cdc]}" "$acked" >>"$WORK/polling.csv" <<'EOF'
import sys
broker, w, mode, rows, load_wal = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def runs_of(arg): return [run.split() for run in arg.split(";") if run.strip()]
mine, cdc = runs_of(sys.argv[6]), runs_of(sys.argv[7])
best = min(mine, key=lambda run: float(run[0]))
cdc_rate = rows / min(float(run[0]) for run in cdc)
s = float(best[0])
# best: seconds rss cpu backend_cpu broker_cpu statements ms xacts deleted updated dead wal; the
# transactions are left out: the end check's commits (100 a second) would dominate them.
print(f"{broker},{w},{mode},{rows},{load_wal},{s:.3f},{rows/s:.0f},{rows/s/cdc_rate:.2f},{'/'.join(r[0] for r in mine)},"
      f"{max(int(r[1]) for r in mine)},{','.join(best[2:7])},{','.join(best[8:12])},{int(best[11])/rows:.1f},{','.join(sys.argv[8].split())}")
EOF
    log "$w $mode: $(tail -1 "$WORK/polling.csv")"
  done
}

# --- latency --------------------------------------------------------------------------------
# As latency_run in bench/lib/relay_bench.sh, for either mode: sent is what pgbench committed
# (polling deletes the rows), and the database's cost is taken over the pgbench window.
steady_run() {  # mode -> its CSV line
  local mode=$1 slot=bench_${BROKER}_latency_$1 topic=outbox.event.latency.$1 cfg rpid cpid sent
  local arrivals=$WORK/latency-$BROKER-$1.txt backend t0 t1 before after pgss i
  local relay_cpu0 backend_cpu0 kafka_cpu0 relay_cpu backend_cpu kafka_cpu hwm
  q "TRUNCATE outbox"
  ensure_topic "$topic"
  [[ $mode != cdc ]] || q "SELECT 1 FROM pg_create_logical_replication_slot('$slot', 'pgoutput')" >/dev/null
  [[ $mode != polling_column ]] || q "CREATE INDEX outbox_unpublished ON public.outbox (seq) WHERE published_at IS NULL"
  q "CHECKPOINT" >/dev/null
  cfg=$(RELAY_EXTRA_CONFIG=$(mode_config "$mode") write_config "$slot" pgoutput "$mode")
  "$WALRELAY" run --config "$cfg" >"$WORK/$slot.log" 2>&1 &
  rpid=$!; track_pid $rpid
  sleep 2
  : >"$arrivals"
  kcat -C -u -b "$BOOTSTRAP" -t "$topic" -o end -f '%T\n' \
    -X isolation.level=read_committed -X fetch.wait.max.ms=5 -X fetch.min.bytes=1 2>"$WORK/kcat-$BROKER-$mode.err" > >(python3 -u -c '
import sys, time
out = open(sys.argv[1], "w")
for line in sys.stdin:
    out.write(f"{line.strip()} {time.time()*1000:.3f}\n"); out.flush()
' "$arrivals") &
  cpid=$!; track_pid $cpid
  sleep 2   # consumer assigned and at the end of the topic
  cat >"$WORK/lat.pgbench" <<EOF
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), 'latency', 'order-' || g, 'OrderCreated', $PAYLOAD FROM generate_series(1, $LAT_BATCH) g;
EOF
  if [[ $mode == cdc ]]; then backend=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot'")
  else backend=$(polling_backend); fi
  [[ -n $backend ]] || { echo "latency ($mode): walrelay has no database session; its log:" >&2; tail -20 "$WORK/$slot.log" >&2; exit 1; }
  log "latency ($BROKER, $mode): $LAT_RATE rows/s ($((LAT_RATE / LAT_BATCH)) transactions/s of $LAT_BATCH rows) for ${LAT_SECONDS}s"
  relay_cpu0=$(cpu_s $rpid); backend_cpu0=$(cpu_s "$backend"); kafka_cpu0=$(tree_cpu_s "$KAFKA_PID")
  pgss_reset; before=$(db_snap); t0=$(now)
  pgbench -n -c 2 -j 1 -R $((LAT_RATE / LAT_BATCH)) -T "$LAT_SECONDS" -f "$WORK/lat.pgbench" >"$WORK/pgbench-$mode.out" 2>&1
  t1=$(now); after=$(db_snap); pgss=$(pgss_sum)
  relay_cpu=$(python3 -c "print(f'{$(cpu_s $rpid) - $relay_cpu0:.2f}')")
  backend_cpu=$(python3 -c "print(f'{$(cpu_s "$backend") - $backend_cpu0:.2f}')")
  kafka_cpu=$(python3 -c "print(f'{$(tree_cpu_s "$KAFKA_PID") - $kafka_cpu0:.2f}')")
  sent=$(( $(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/pgbench-$mode.out") * LAT_BATCH ))
  [[ $sent -gt 0 ]] || { echo "latency ($mode): pgbench committed nothing: $(tail -5 "$WORK/pgbench-$mode.out")" >&2; exit 1; }
  for ((i = 0; i < 300; i++)); do [[ $(wc -l <"$arrivals") -ge $sent ]] && break; sleep 0.1; done
  # The last rows marked too, so the dead tuples at the end are every row's.
  if [[ $mode != cdc ]]; then
    for ((i = 0; i < 300; i++)); do [[ $(unpublished_rows "$mode") == 0 ]] && break; sleep 0.1; done
  fi
  hwm=$(hwm_kb $rpid)
  stop_pid $rpid 60
  stop_pid $cpid 10
  wait_relay_backends_gone
  pgss_dump "$WORK/$slot.statements"
  local end; end=$(db_snap)
  [[ $mode != cdc ]] || q "SELECT pg_drop_replication_slot('$slot')" >/dev/null
  [[ $mode != polling_column ]] || q "DROP INDEX outbox_unpublished"
  python3 - "$arrivals" "$sent" "$LAT_SECONDS" "$BROKER" "$mode" "$hwm" "$relay_cpu" "$backend_cpu" "$kafka_cpu" \
    "$(python3 -c "print($t1 - $t0)")" "$before" "$after" "$end" "$pgss" \
    "$(q "SELECT pg_wal_lsn_diff('${after%% *}', '${before%% *}')::bigint")" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 2]
lat = sorted(float(a) - float(t) for t, a in rows)
sent, secs = int(sys.argv[2]), int(sys.argv[3])
broker, mode, hwm, relay_cpu, backend_cpu, kafka_cpu = sys.argv[4:10]
window = float(sys.argv[10])
before, after, end, pgss, wal = sys.argv[11].split(), sys.argv[12].split(), sys.argv[13].split(), sys.argv[14].split(), int(sys.argv[15])
if len(lat) < sent: sys.exit(f"latency ({mode}): the consumer received {len(lat)} of {sent} records")
def pct(p): return lat[min(len(lat) - 1, int(p * len(lat)))]
print(f"{broker},{mode},{sent},{len(lat)},{sent/secs:.0f},{pct(0.5):.1f},{pct(0.99):.1f},{lat[-1]:.1f},{hwm},{relay_cpu},{backend_cpu},{kafka_cpu},"
      f"{int(pgss[0])/window:.1f},{float(pgss[1])/window:.2f},{(int(after[1])-int(before[1]))/window:.1f},{wal/window/1e6:.3f},{wal/sent:.1f},"
      f"{int(end[2])-int(before[2])},{int(end[3])-int(before[3])},{end[4]}")
EOF
}

for BROKER_ in $BROKERS; do
  start_broker "$BROKER_"
  warm_broker
  # walrelay's own warm-up (bench/lib/relay_bench.sh) leaves its rows in the table: a polling
  # walrelay relays them too (topic outbox.event.warmup.polling), so both paths are warm.
  warm_relay
  if [[ ${WARMUP_ROWS:-100000} -gt 0 ]]; then
    ensure_topic outbox.event.warmup.polling
    poll_run "bench_${BROKER}_warmup_polling" polling "$(q "SELECT max(seq) FROM outbox")" >/dev/null
    wait_relay_backends_gone
  fi
  for w in $WORKLOADS; do run_workload "$w"; done
  if [[ ${SKIP_LATENCY:-0} != 1 ]]; then
    for mode in $LAT_MODES; do
      steady_run "$mode" >>"$WORK/polling_latency.csv"
      log "latency ($BROKER, $mode): $(tail -1 "$WORK/polling_latency.csv")"
    done
  fi
  [[ $BROKER != apache ]] || KAFKA_DESC=$BROKER_DESC
  stop_broker
done
TOTAL_S=$(python3 -c "print(f'{$(now) - $T_START:.0f}')")

# --- output -------------------------------------------------------------------------------
cp "$WORK/polling.csv" "$OUT/polling.csv"
[[ ${SKIP_LATENCY:-0} == 1 ]] || cp "$WORK/polling_latency.csv" "$OUT/polling_latency.csv"
mkdir -p "$OUT/logs/polling"
rm -f "$OUT"/logs/polling/*
cp "$WORK"/bench_*.log "$WORK"/bench_*.statements "$WORK"/bench_*.threads "$WORK"/kafka-*.err "$OUT/logs/polling/" 2>/dev/null || true
python3 - "$WORK/polling.csv" "$WORK/polling_latency.csv" "$(nproc)" "$(psql -X -At -c 'SHOW server_version')" \
  "${WALRELAY_REV:-$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src CMakeLists.txt 2>/dev/null || echo ' (plus uncommitted src changes)')}" \
  "$(uptime | sed 's/.*load average: //')" "${KAFKA_DESC:-librdkafka mock cluster}" "$TOTAL_S" "$LAT_SECONDS" "$LAT_RATE" \
  "${WARMUP_RECORDS:-300000}" "${WARMUP_ROWS:-100000}" "$POLL_BATCH" "$POLL_INTERVAL" "$POLLING_CONFIG" "${RELAY_EXTRA_CONFIG:-}" >"$OUT/polling.md" <<'EOF'
import csv, sys
(thr_csv, lat_csv, cpus, pgver, rev, load, kafka, total_s, lat_s, lat_rate, warm_k, warm_r,
 batch, interval, polling_config, extra) = sys.argv[1:17]
rows = list(csv.DictReader(open(thr_csv)))
lats = list(csv.DictReader(open(lat_csv)))
NAMES = {"cdc": "CDC (slot, pgoutput)", "polling": "polling, mark=delete",
         "polling_column": "polling, mark=column:published_at"}
several = len({r["broker"] for r in rows + lats}) > 1
def name(r): return NAMES[r["mode"]] + (f" ({r['broker']})" if several else "")
def mb(b): return f"{int(b) / 1e6:.1f}"
def ratio(a, b): return f"{float(a) / float(b):.2f}x" if float(b) else "n/a"
print("# Polling the outbox table against logical replication (CDC)\n")
print(f"walrelay {rev}, PostgreSQL {pgver}, {kafka}, {cpus} CPUs shared with whatever else ran on the machine "
      f"(load average at the end: {load}); the whole run took {total_s} s (bench/polling.sh).\n")
print("Settings. CDC: walrelay's defaults, a pgoutput slot and the publication `dbz_publication` FOR TABLE "
      f"public.outbox. Polling: `source.mode=polling` with its defaults (polling.batch.size={batch}, "
      f"polling.interval.ms={interval}, polling.order.column=seq)"
      + (f" plus `{polling_config}`" if polling_config else "")
      + "; mark=delete deletes a batch's rows once Kafka acknowledged it, mark=column:published_at stamps them "
      "(with the partial index `outbox_unpublished (seq) WHERE published_at IS NULL` of docs/outbox-polling.sql)."
      + (f" Every mode also had `{extra}`." if extra else "")
      + " Every mode: the table with docs/outbox-polling.sql's seq and a nullable published_at, walrelay's default producer (idempotent, acks=all), its own topic, its own database role. "
      "PostgreSQL: fsync=off, synchronous_commit=on, full_page_writes=off, autovacuum=off, "
      "track_commit_timestamp=on, pg_stat_statements loaded. The broker first took "
      f"{int(warm_k):,} kcat records, and each mode relayed {int(warm_r):,} rows, before any timed run.\n")
print("**Caveat: machine load.** PostgreSQL, walrelay, the broker's JVM and the consumer share "
      f"{cpus} CPUs with whatever else ran there; each figure comes from this one run (the faster of two runs per "
      "mode; both times are in the runs column).\n")
if rows:
    print("## Throughput\n")
    print("Each round empties the table, creates a slot and loads the rows; CDC relays them from the slot, then "
          "polling from the table (mark=column:published_at gets them loaded again, with its index). rows/s = rows / "
          "(walrelay started to the last row relayed: for CDC the slot's confirmed LSN reaching the end of the load, "
          "for polling the workload's last row deleted or stamped, which happens only after every earlier batch was "
          "acknowledged and marked). Both include walrelay's start. Each load is followed by ANALYZE (autovacuum, "
          "off here, would analyse the table in production). Each mode ran twice, the modes taking turns; the "
          "faster run counts. Backend CPU: the walsender for CDC, the polling connection's backend for polling. "
          "Every key of both runs of each mode was read back from Kafka exactly twice.\n")
    print("| workload | mode | rows | rows/s | vs CDC | runs s | walrelay CPU s | backend CPU s | broker CPU s | peak RSS MB |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {name(r)} | {int(r['rows']):,} | {int(r['rows_s']):,} | {r['ratio_to_cdc']}x | "
              f"{r['runs_s'].replace('/', ' / ')} | {r['walrelay_cpu_s']} | {r['backend_cpu_s']} | {r['broker_cpu_s']} | "
              f"{int(r['walrelay_peak_rss_kb']) / 1024:.1f} |")
    print()
    print("### What each run cost the database\n")
    print("Over the run (walrelay's start to its sessions' exit): walrelay's statements (pg_stat_statements, "
          "its role only; each is a transaction of its own) and their execution time, the outbox's n_tup_del / n_tup_upd deltas, its n_dead_tup afterwards (autovacuum "
          "off: what vacuum has to clean), and the WAL written during the run, also per row relayed and against "
          "the WAL the load itself wrote.\n")
    print("| workload | mode | statements | statement ms | rows deleted | rows updated | dead tuples after | WAL MB | WAL bytes/row | vs the load's WAL |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {name(r)} | {int(r['statements']):,} | {float(r['statement_ms']):,.1f} | "
              f"{int(r['rows_deleted']):,} | {int(r['rows_updated']):,} | {int(r['dead_tuples']):,} | "
              f"{mb(r['wal_bytes'])} | {float(r['wal_bytes_per_row']):.1f} | {int(r['wal_bytes']) / int(r['load_wal_bytes']) * 100:.1f}% |")
    print()
if lats:
    cdcs = {l["broker"]: l for l in lats if l["mode"] == "cdc"}
    print("## Commit-to-consumer latency and steady-state cost\n")
    print(f"pgbench offers {int(lat_rate):,} rows/s (10-row transactions, 2 clients) for {lat_s} s to a running walrelay; a kcat "
          "consumer (isolation.level=read_committed) stamps each record's arrival; latency = arrival - the record's "
          "timestamp (the transaction's commit time, ms; for polling from track_commit_timestamp). Sent = rows pgbench "
          "committed. The per-second figures are over the pgbench window: walrelay's statements, every session's "
          "committed transactions (pgbench's own included), WAL written (pgbench's inserts included: the CDC row is "
          "the writer's WAL alone, so polling's extra is the difference; per row = over the rows pgbench committed in the "
          "window); dead tuples once every row was relayed. The table starts empty and is not analysed.\n")
    print("| mode | sent | received | p50 ms | p99 ms | max ms | p50 vs CDC | p99 vs CDC | walrelay CPU s | backend CPU s | broker CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for l in lats:
        cdc = cdcs.get(l["broker"])
        print(f"| {name(l)} | {int(l['sent']):,} | {int(l['received']):,} | {l['p50_ms']} | {l['p99_ms']} | {l['max_ms']} | "
              f"{ratio(l['p50_ms'], cdc['p50_ms']) if cdc else 'n/a'} | {ratio(l['p99_ms'], cdc['p99_ms']) if cdc else 'n/a'} | "
              f"{l['walrelay_cpu_s']} | {l['backend_cpu_s']} | {l['broker_cpu_s']} |")
    print()
    print("| mode | walrelay statements/s | statement ms/s | transactions/s | WAL MB/s | WAL bytes/row | beyond CDC's bytes/row | rows deleted | rows updated | dead tuples at the end |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for l in lats:
        cdc = cdcs.get(l["broker"])
        extra_wal = f"{float(l['wal_bytes_per_row']) - float(cdc['wal_bytes_per_row']):+.1f} ({ratio(l['wal_bytes_per_row'], cdc['wal_bytes_per_row'])})" if cdc else "n/a"
        print(f"| {name(l)} | {l['statements_s']} | {l['statement_ms_s']} | {l['transactions_s']} | {l['wal_mb_s']} | "
              f"{l['wal_bytes_per_row']} | {extra_wal} | {int(l['rows_deleted']):,} | {int(l['rows_updated']):,} | {int(l['dead_tuples']):,} |")
    print()
print("Per run, walrelay's statements with their calls and time are in bench/results/logs/polling/*.statements "
      "(not committed).")
EOF
cat "$OUT/polling.md"
