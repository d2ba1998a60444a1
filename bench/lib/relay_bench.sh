# Sourced by the benchmark scripts that relay outbox rows through walrelay to Kafka (run.sh,
# exactly_once.sh), after bench/lib/harness.sh's bench_harness: their PostgreSQL, the Kafka they
# run against (librdkafka's mock cluster or a real Apache Kafka broker, both `walrelay
# dev-kafka`), the workloads, and the timed runs. The caller sets WALRELAY, ROWS, SINGLE_ROWS,
# LAT_RATE, LAT_SECONDS, LAT_BATCH, PLUGINS, FIRST_PLUGIN and KAFKA_LIBS (for DumpLogSegments)
# first.
#
#   start_postgres                     # PostgreSQL on loopback, the outbox, a publication
#   start_broker mock|apache; warm_broker; warm_relay; ...; stop_broker
#   write_config slot plugin [tag]     # walrelay's config; topics outbox.event.<workload>.<tag>
#   relay_run slot end_lsn plugin [tag]
#   latency_run plugin [tag]           # its CSV line on stdout
#
# RELAY_EXTRA_CONFIG (JSON members) goes into every walrelay config written; set it for one
# call (RELAY_EXTRA_CONFIG=... relay_run ...) to run one walrelay with other settings.
# RELAY_DB_USER (default postgres) is the database user walrelay connects as.

# --- PostgreSQL ---------------------------------------------------------------------------
start_postgres() {  # [postgresql.conf line...], passed to start_bench_postgres
  start_bench_postgres "$@"
  # pgoutput reads through a publication (walrelay's default name). Publishing only the outbox
  # keeps the unrelated table's rows out of both pgoutput readers, as wal2json's add-tables does
  # for its readers; the walsender still decodes every change either way. walrelay's default
  # publication.autocreate.mode (all_tables) uses an existing publication as it is.
  PUBLICATION=dbz_publication
  q "CREATE PUBLICATION $PUBLICATION FOR TABLE public.outbox"
  log "PostgreSQL 127.0.0.1:$PORT"
}

# --- Kafka: librdkafka's mock cluster or a real Apache Kafka broker, one at a time -----------
BROKER="" BOOTSTRAP="" KAFKA_PID="" BROKER_DESC="" BROKER_START_S="" BROKER_DATA=""
start_broker() {  # mock|apache
  BROKER=$1
  local out=$WORK/kafka-$1.out err=$WORK/kafka-$1.err i
  "$WALRELAY" dev-kafka --broker "$1" >"$out" 2>"$err" &
  KAFKA_PID=$!
  track_pid $KAFKA_PID
  # The JVM broker takes seconds to start (more on a loaded machine); the mock is at once.
  for ((i = 0; i < 3000; i++)); do
    if grep -q '^bootstrap.servers=' "$out" 2>/dev/null; then
      [[ $1 == mock ]] && break
      grep -q 'started in' "$err" 2>/dev/null && break   # its line follows the bootstrap line
    fi
    kill -0 $KAFKA_PID 2>/dev/null || break
    sleep 0.1
  done
  BOOTSTRAP=$(sed -n 's/^bootstrap.servers=//p' "$out" | head -1)
  [[ -n $BOOTSTRAP ]] || { echo "dev-kafka --broker $1 did not start: $(tail -20 "$err")" >&2; exit 1; }
  if [[ $1 == apache ]]; then
    # "Apache Kafka 3.9.1 (KRaft), 1 node(s), started in 7.2 s; data in /tmp/... (deleted on exit)"
    BROKER_DESC=$(sed -n 's/^\(Apache Kafka [^ ]*\) (KRaft), \([0-9]*\) node(s), started in .*/\1 (KRaft; \2 node)/p' "$err" | head -1)
    BROKER_START_S=$(sed -n 's/.* started in \([0-9.]*\) s.*/\1/p' "$err" | head -1)
    BROKER_DATA=$(sed -n 's/.*; data in \(.*\) (deleted on exit).*/\1/p' "$err" | head -1)
  else
    BROKER_DESC="librdkafka mock cluster" BROKER_START_S=0 BROKER_DATA=""
  fi
  log "$BROKER_DESC at $BOOTSTRAP"
}
stop_broker() { stop_pid "$KAFKA_PID" 60; }
# A broker in production has served traffic for a long time; a fresh JVM first interprets and
# JIT-compiles its produce and fetch paths (a profile of a cold broker during walrelay's first
# run: the C1/C2 compiler threads and the interpreter took more CPU than request handling, on
# the 2 CPUs PostgreSQL and walrelay need). So before any timed run, each broker takes
# WARMUP_RECORDS records of about 450 bytes from an idempotent acks=all producer (kcat), and a
# consumer reads them back. The mock gets the same, for symmetry.
warm_broker() {
  local n=${WARMUP_RECORDS:-300000} t0
  [[ $n -gt 0 ]] || return 0
  t0=$(now)
  python3 -c '
import sys
pad = "x" * 400
for i in range(int(sys.argv[1])): print(f"warm-{i}:{{\"seq\": {i}, \"note\": \"{pad}\"}}")
' "$n" | kcat -P -b "$BOOTSTRAP" -t bench.warmup -K: -X enable.idempotence=true -X acks=all \
    -X linger.ms=5 2>"$WORK/kcat-warmup-$BROKER.err" ||
    { echo "warm-up of $BROKER failed: $(tail -5 "$WORK/kcat-warmup-$BROKER.err")" >&2; exit 1; }
  kcat -C -b "$BOOTSTRAP" -t bench.warmup -o beginning -e -q -f '%o\n' 2>>"$WORK/kcat-warmup-$BROKER.err" | wc -l >"$WORK/warmup-read-$BROKER"
  log "$BROKER warmed up: $n records produced, $(cat "$WORK/warmup-read-$BROKER") read back in $(python3 -c "print(f'{$(now)-$t0:.1f}')") s"
}

# Each plugin's runs go to their own topics (outbox.event.<aggregatetype>.<tag>, the tag being
# the plugin unless given), so the acknowledgement check counts each plugin's records apart.
write_config() {  # slot plugin [tag] -> config path
  local cfg=$WORK/$1.json
  cat >"$cfg" <<EOF
{"name": "bench-$1", "config": {
  "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
  "database.hostname": "127.0.0.1", "database.port": "$PORT",
  "database.user": "${RELAY_DB_USER:-postgres}", "database.dbname": "postgres",
  "plugin.name": "$2", "publication.name": "$PUBLICATION", "slot.name": "$1", "slot.create": "false",
  "table.include.list": "public.outbox", "topic.prefix": "bench",
  "listeners": "http://127.0.0.1:0",
  "transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
  "transforms.outbox.route.topic.replacement": "outbox.event.\${routedByValue}.${3:-$2}",
  ${RELAY_EXTRA_CONFIG:+$RELAY_EXTRA_CONFIG,}
  "kafka.bootstrap.servers": "$BOOTSTRAP"}}
EOF
  echo "$cfg"
}

topic_high_watermarks() {  # topic -> sum over its partitions of the next offset
  local parts spec=() total=0 off
  parts=$(kcat -L -b "$BOOTSTRAP" -t "$1" 2>/dev/null | sed -n 's/^ *partition \([0-9]*\),.*/\1/p')
  for p in $parts; do spec+=(-t "$1:$p:-1"); done
  [[ ${#spec[@]} -gt 0 ]] || { echo 0; return; }
  while read -r off; do total=$((total + off)); done < <(kcat -Q -b "$BOOTSTRAP" "${spec[@]}" 2>/dev/null |
    sed -n 's/.* offset \(-\{0,1\}[0-9]*\).*/\1/p')
  echo "$total"
}
topic_layout() {  # topic -> "partitions replication_factor" from the broker's metadata
  kcat -L -b "$BOOTSTRAP" -t "$1" 2>/dev/null | awk '
    /^ *partition [0-9]+,/ { n++; if (!rf) { s = $0; sub(/.*replicas: /, "", s); sub(/,? *isrs:.*/, "", s); rf = split(s, a, ",") } }
    END { print n + 0, rf + 0 }'
}
# Creates the topic with one warm-up record (key bench-warmup) before a timed run, so the
# broker's auto-creation is not timed: in production the topic exists.
ensure_topic() {
  printf 'bench-warmup:{}\n' | kcat -P -b "$BOOTSTRAP" -t "$1" -K: 2>>"$WORK/kcat-warmup.err" ||
    { echo "could not create topic $1 on $BOOTSTRAP: $(tail -5 "$WORK/kcat-warmup.err")" >&2; exit 1; }
}
cpu_s() {  # pid -> user+system CPU seconds so far (0 if gone)
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat" 2>/dev/null || echo 0
}
tree_cpu_s() {  # pid -> CPU seconds of it and its direct children (dev-kafka's JVM is its child)
  local total c
  total=$(cpu_s "$1")
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    total=$(awk -v a="$total" -v b="$(cpu_s "$c")" 'BEGIN { printf "%.2f", a + b }')
  done
  echo "$total"
}
thread_cpu() {  # pid -> per thread: "name cpu_s voluntary_switches involuntary_switches"
  local t hz; hz=$(getconf CLK_TCK)
  for t in /proc/"$1"/task/*; do
    awk -v hz="$hz" -v comm="$(tr ' ' _ <"$t/comm" 2>/dev/null)" '
      FNR == NR { cpu = ($14 + $15) / hz; next }
      /^voluntary_ctxt_switches/ { v = $2 } /^nonvoluntary_ctxt_switches/ { n = $2 }
      END { printf "%s %.2f %d %d\n", comm, cpu, v, n }' "$t/stat" "$t/status" 2>/dev/null
  done
}
wait_s() {  # pid -> seconds its threads spent runnable but waiting for a CPU (schedstat), so far
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $2 } END { printf "%.2f", s / 1e9 }'
}
hwm_kb() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null | grep . || echo 0; }

# Kafka must have acknowledged every row of both walrelay runs. The mock cluster drops the
# oldest records of a large partition, so for it the sum of the partition high watermarks must
# account for them; the real broker keeps them all, so they are read back and every key
# (order-1 .. order-N) must be there exactly twice; with "more" as third argument (runs stopped
# once the slot passed row N, which may have relayed a few rows after it) later keys may be
# there too, at most twice.
acked_records() {  # topic rows [more] -> "records method"; every key ACK_COPIES (2) times
  local topic=$1 rows=$2 n copies=${ACK_COPIES:-2}
  if [[ $BROKER == mock ]]; then
    n=$(( $(topic_high_watermarks "$topic") - 1 ))   # minus the warm-up record
    [[ $n -ge $((copies * rows)) ]] || { echo "$topic holds $n records, expected $((copies * rows))" >&2; exit 1; }
    echo "$n high_watermarks"
  else
    kcat -C -b "$BOOTSTRAP" -t "$topic" -o beginning -e -q -f '%k\n' 2>"$WORK/kcat-readback.err" |
      python3 -c '
import collections, sys
rows, copies = int(sys.argv[1]), int(sys.argv[4])
keys = collections.Counter(line.rstrip("\n").strip("\"") for line in sys.stdin)
keys.pop("bench-warmup", None)
want = {f"order-{i}" for i in range(1, rows + 1)}
more = sys.argv[3] == "more"
bad = [k for k in want if keys.get(k) != copies]
bad += [k for k in keys if k not in want and not (more and keys[k] <= copies)]
if bad:
    sys.exit(f"{sys.argv[2]}: {len(bad)} keys not read back exactly {copies} times, e.g. {sorted(bad)[:3]}")
print(sum(keys.values()), "read_back")
' "$rows" "$topic" "${3:-}" "$copies" || exit 1
  fi
}
# What the real broker stored: Kafka's DumpLogSegments lists each record batch's producer id
# and sequence; an idempotent producer's batches carry both (librdkafka requires acks=all for
# idempotence). kcat's warm-up record is the one batch without.
producer_check() {  # topic -> "batches idempotent_records other_records producer_ids"
  local segs
  mapfile -t segs < <(find "$BROKER_DATA" -path "*/$1-*" -name '*.log' 2>/dev/null | sort)
  [[ ${#segs[@]} -gt 0 ]] || { echo "0 0 0 0"; return; }
  local args=() s
  for s in "${segs[@]}"; do args+=(--files "$s"); done
  java -cp "$KAFKA_LIBS/*" kafka.tools.DumpLogSegments "${args[@]}" 2>"$WORK/dumplog.err" | python3 -c '
import re, sys
batches = idem = other = 0; pids = set()
for line in sys.stdin:
    m = re.search(r"count: (\d+) .*baseSequence: (-?\d+) .*producerId: (-?\d+)", line)
    if not m: continue
    batches += 1
    n, seq, pid = int(m[1]), int(m[2]), int(m[3])
    if pid >= 0 and seq >= 0: idem += n; pids.add(pid)
    else: other += n
print(batches, idem, other, len(pids))
'
}

# Loads the workload's rows; the outbox rows get aggregatetype=$1 (topic outbox.event.$1).
# Payload: a jsonb object of about 300 bytes as text.
PAYLOAD="jsonb_build_object('seq', g, 'customer', 'customer-' || (g % 997), 'amount', 19.99, 'note', rpad(md5(g::text), 220, md5((g+1)::text)))"
outbox_insert() {  # aggregatetype first last
  echo "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), '$1', 'order-' || g, 'OrderCreated', $PAYLOAD FROM generate_series($2, $3) g;"
}
# One transaction per row, committed in a loop on the server (no round trip per row).
single_row_inserts() {  # aggregatetype first last
  echo "DO \$\$ BEGIN FOR i IN $2..$3 LOOP $(outbox_insert "$1" i i) COMMIT; END LOOP; END \$\$;"
}
load() {
  local w=$1 f=$WORK/load-$1.sql
  case $w in
    one_txn) outbox_insert "$w" 1 "$ROWS" >"$f" ;;
    txn_1000)
      : >"$f"; for ((s = 1; s <= ROWS; s += 1000)); do outbox_insert "$w" $s $((s + 999)) >>"$f"; done ;;
    single_row) single_row_inserts "$w" 1 "$SINGLE_ROWS" >"$f" ;;
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

# pg_recvlogical gets the options walrelay starts each plugin's stream with (src/decode/decoder.cc).
recv_opts() {  # plugin -> pg_recvlogical options, one per line
  case $1 in
    pgoutput) printf '%s\n' -o proto_version=1 -o "publication_names=$PUBLICATION" -o messages=true ;;
    wal2json) printf '%s\n' -o format-version=2 -o include-xids=1 -o include-timestamp=1 -o include-lsn=1 \
                -o include-pk=1 -o include-types=1 -o add-tables=public.outbox ;;
  esac
}

# The walsender serving pg_recvlogical exits with it, so its CPU and run-queue wait are sampled
# every 5 ms by one small python process (reading /proc, next to no CPU) and the last sample
# kept. Only walsenders of this benchmark's postmaster count (the machine may run other
# PostgreSQL servers), and only one that was not there at the sampler's first look (a walsender
# of the previous run may still be exiting): that is the decode run's. The sampler creates its
# second argument after that first look, and pg_recvlogical starts only then.
WALSENDER_SAMPLER='
import os, signal, sys, time
hz = os.sysconf("SC_CLK_TCK"); postmaster = sys.argv[1]; last = (0.0, 0.0); before = None; target = None
def done(*_):  # exits at once, wherever the loop was interrupted
    sys.stdout.write(f"{last[0]:.2f} {last[1]:.2f}\n"); sys.stdout.flush(); os._exit(0)
signal.signal(signal.SIGTERM, done)
def walsenders():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if not open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"postgres: walsender"): continue
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1] == postmaster: yield pid
        except (OSError, IndexError):
            pass
while True:
    if target is None:  # a scan of /proc until the decode run'"'"'s walsender appears, then only it
        seen = set(walsenders())
        if before is None:
            before = seen
            open(sys.argv[2], "w").close()
        target = next(iter(seen - before), None)
    if target is not None:
        try:
            st = open(f"/proc/{target}/stat").read().rsplit(")", 1)[1].split()
            wait = sum(int(open(f"/proc/{target}/task/{t}/schedstat").read().split()[1]) for t in os.listdir(f"/proc/{target}/task"))
            last = ((int(st[11]) + int(st[12])) / hz, wait / 1e9)
        except (OSError, IndexError, ValueError):
            pass  # it has exited: the last sample stands
    time.sleep(0.005)
'
decode_limit() {  # slot end_lsn plugin -> "seconds walsender_cpu_s walsender_wait_s" of pg_recvlogical decoding the slot up to end_lsn
  log "pg_recvlogical --slot $1 ($3) --endpos $2"
  local t0 t1 sampler opts i
  mapfile -t opts < <(recv_opts "$3")
  python3 -c "$WALSENDER_SAMPLER" "$(head -1 "$WORK/data/postmaster.pid")" "$WORK/$1.sampling" >"$WORK/$1.walsender" &
  sampler=$!
  track_pid $sampler
  for ((i = 0; i < 300; i++)); do [[ -e $WORK/$1.sampling ]] && break; sleep 0.02; done
  [[ -e $WORK/$1.sampling ]] || { echo "the walsender sampler did not start" >&2; exit 1; }
  t0=$(now)
  pg_recvlogical -d "host=127.0.0.1 port=$PORT user=postgres dbname=postgres" --slot "$1" --start \
    "${opts[@]}" --endpos "$2" -f /dev/null --no-loop
  t1=$(now)
  kill -TERM $sampler; wait $sampler 2>/dev/null || true
  echo "$(python3 -c "print(f'{$t1-$t0:.3f}')") $(cat "$WORK/$1.walsender")"
}

relay_run() {  # slot end_lsn plugin [tag] -> "seconds peak_rss_kb walrelay_cpu_s walsender_cpu_s broker_cpu_s walrelay_wait_s walsender_wait_s"
  local slot=$1 end_lsn=$2 cfg t0 t1
  log "walrelay run (slot $slot, $3, $BROKER) until confirmed_flush_lsn >= $end_lsn"
  cfg=$(write_config "$slot" "$3" "${4:-$3}")
  t0=$(now)
  ${RELAY_WRAPPER:-} "$WALRELAY" run --config "$cfg" >"$WORK/$slot.log" 2>&1 &
  local pid=$! done_=0 waiter finished rc hwm relay_cpu sender_pid sender_cpu=0 sender_wait=0 relay_wait kafka_cpu0 kafka_cpu
  track_pid $pid
  kafka_cpu0=$(tree_cpu_s "$KAFKA_PID")
  # One psql session polls the slot every 10 ms, so the end is seen within about 10 ms (a
  # shell loop spawning psql per check adds 50-100 ms of detection delay).
  # Each check is logged (time, confirmed LSN) to logs/<slot>.progress, to see where a run's
  # time went: start-up, steady rate, or the tail.
  psql -X -q -At -v ON_ERROR_STOP=1 -c "SET statement_timeout = '600s'" -c "DO \$\$ DECLARE c pg_lsn; BEGIN LOOP
    SELECT confirmed_flush_lsn INTO c FROM pg_replication_slots WHERE slot_name = '$slot';
    RAISE NOTICE '% %', to_char(clock_timestamp(), 'HH24:MI:SS.MS'), c;
    EXIT WHEN c >= '$end_lsn';
    PERFORM pg_sleep(0.01); END LOOP; END \$\$" 2>"$WORK/$slot.wait.err" &
  waiter=$!
  track_pid $waiter
  rc=0; wait -n -p finished $waiter $pid || rc=$?
  if [[ $finished == "$waiter" && $rc == 0 ]]; then t1=$(now); done_=1; fi
  kill $waiter 2>/dev/null || true
  # Peak RSS is the kernel's high-water mark, CPU the process's user + system time so far.
  hwm=$(hwm_kb $pid)
  relay_cpu=$(cpu_s $pid)
  relay_wait=$(wait_s $pid)
  # Its CPU per thread (the loop thread, librdkafka's broker and main threads) and voluntary
  # context switches (how often each thread slept), for logs/<slot>.threads.
  thread_cpu $pid >"$WORK/$slot.threads"
  sender_pid=$(q "SELECT active_pid FROM pg_replication_slots WHERE slot_name='$slot'")
  [[ -z $sender_pid ]] || { sender_cpu=$(cpu_s "$sender_pid"); sender_wait=$(wait_s "$sender_pid"); }
  kafka_cpu=$(python3 -c "print(f'{$(tree_cpu_s "$KAFKA_PID") - $kafka_cpu0:.2f}')")
  stop_pid $pid 60
  if [[ $done_ != 1 ]]; then
    echo "walrelay did not reach $end_lsn on slot $slot; its log:" >&2; tail -20 "$WORK/$slot.log" >&2; exit 1
  fi
  echo "$(python3 -c "print(f'{$t1-$t0:.3f}')") $hwm $relay_cpu $sender_cpu $kafka_cpu $relay_wait $sender_wait"
}

# kcat's records do not take every path walrelay's do (headers, walrelay's batch shapes): in
# runs with only that warm-up the first workload against the real broker was still its slowest,
# with the broker's CPU twice that of the next workload for the same rows. So walrelay itself
# then relays WARMUP_ROWS rows (1,000-row transactions, untimed, to topic
# outbox.event.warmup.<plugin>) once with each plugin.
warm_relay() {
  local n=${WARMUP_ROWS:-100000} first=bench_${BROKER}_warmup_$FIRST_PLUGIN end_lsn s plugin
  [[ $n -gt 0 ]] || return 0
  q "TRUNCATE outbox, unrelated"
  q "SELECT 1 FROM pg_create_logical_replication_slot('$first', '$FIRST_PLUGIN')" >/dev/null
  for plugin in $PLUGINS; do
    [[ $plugin == "$FIRST_PLUGIN" ]] ||
      q "SELECT 1 FROM pg_copy_logical_replication_slot('$first', 'bench_${BROKER}_warmup_$plugin', false, '$plugin')" >/dev/null
  done
  for ((s = 1; s <= n; s += 1000)); do outbox_insert warmup $s $((s + 999)); done >"$WORK/load-warmup.sql"
  psql -X -q -v ON_ERROR_STOP=1 -f "$WORK/load-warmup.sql" >/dev/null
  end_lsn=$(q "SELECT pg_current_wal_lsn()")
  for plugin in $PLUGINS; do
    ensure_topic "outbox.event.warmup.$plugin"
    relay_run "bench_${BROKER}_warmup_$plugin" "$end_lsn" "$plugin" >/dev/null
    q "SELECT pg_drop_replication_slot('bench_${BROKER}_warmup_$plugin')" >/dev/null
  done
  log "$BROKER warmed up: walrelay relayed $n rows with each of $PLUGINS"
}

# Commit-to-consumer latency at LAT_RATE rows/s against the current broker, read by a
# read_committed consumer (librdkafka's default, named so: with exactly.once.support it sees a
# record only once its Kafka transaction committed). Prints
# "broker,plugin,sent,received,offered_rows_s,p50_ms,p99_ms,max_ms,walrelay_peak_rss_kb,walrelay_cpu_s,broker_cpu_s".
latency_run() {  # plugin [tag]; the tag names the slot, the topic and the files (default: the plugin)
  local plugin=$1 tag=${2:-$1} cfg rpid cpid total sent kafka_cpu0 line
  local slot=bench_${BROKER}_latency_$tag arrivals=$WORK/latency-$BROKER-$tag.txt topic=outbox.event.latency.$tag
  q "TRUNCATE outbox"
  ensure_topic "$topic"
  q "SELECT 1 FROM pg_create_logical_replication_slot('$slot', '$plugin')" >/dev/null
  cfg=$(write_config "$slot" "$plugin" "$tag")
  "$WALRELAY" run --config "$cfg" >"$WORK/$slot.log" 2>&1 &
  rpid=$!; track_pid $rpid
  sleep 2
  total=$((LAT_RATE * LAT_SECONDS))
  # Consumer: kcat prints each record's timestamp (the commit time, ms); python stamps arrival.
  : >"$arrivals"
  kcat -C -u -b "$BOOTSTRAP" -t "$topic" -o end -f '%T\n' \
    -X isolation.level=read_committed -X fetch.wait.max.ms=5 -X fetch.min.bytes=1 2>"$WORK/kcat-$BROKER.err" > >(python3 -u -c '
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
  log "latency ($BROKER, $tag): $LAT_RATE rows/s ($((LAT_RATE / LAT_BATCH)) transactions/s of $LAT_BATCH rows) for ${LAT_SECONDS}s"
  local relay_cpu0; relay_cpu0=$(cpu_s $rpid)
  kafka_cpu0=$(tree_cpu_s "$KAFKA_PID")
  pgbench -n -c 2 -j 1 -R $((LAT_RATE / LAT_BATCH)) -T "$LAT_SECONDS" -f "$WORK/lat.pgbench" >"$WORK/pgbench.out" 2>&1
  sent=$(q "SELECT count(*) FROM outbox WHERE aggregatetype='latency'")
  for _ in $(seq 300); do [[ $(wc -l <"$arrivals") -ge $sent ]] && break; sleep 0.1; done
  local lat_hwm relay_cpu kafka_cpu
  lat_hwm=$(hwm_kb $rpid)
  relay_cpu=$(python3 -c "print(f'{$(cpu_s $rpid) - $relay_cpu0:.2f}')")
  kafka_cpu=$(python3 -c "print(f'{$(tree_cpu_s "$KAFKA_PID") - $kafka_cpu0:.2f}')")
  stop_pid $rpid 60
  stop_pid $cpid 10
  q "SELECT pg_drop_replication_slot('$slot')" >/dev/null
  line=$(python3 - "$arrivals" "$sent" "$LAT_SECONDS" "$lat_hwm" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 2]
lat = sorted(float(a) - float(t) for t, a in rows)
sent, secs, hwm = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if not lat: sys.exit("latency: the consumer received nothing")
def pct(p): return lat[min(len(lat) - 1, int(p * len(lat)))]
print(f"{sent},{len(lat)},{sent/secs:.0f},{pct(0.5):.1f},{pct(0.99):.1f},{lat[-1]:.1f},{hwm}")
EOF
)
  echo "$BROKER,$plugin,$line,$relay_cpu,$kafka_cpu"
  log "latency ($BROKER, $tag): sent,received,rows_s,p50,p99,max,rss,walrelay_cpu,broker_cpu = $line,$relay_cpu,$kafka_cpu"
}
