# Sourced by the benchmark scripts (run.sh, exactly_once.sh, debezium.sh) after their own checks: gnuplot for the
# charts, PostgreSQL's binaries, a work directory, and the process bookkeeping that stops every
# process the script started, by pid, however it ends.
#
#   bench_harness <work-dir prefix>     # sets PGBIN, WORK, AS_PG; installs the EXIT trap
#
# Functions: track_pid PID, stop_pid PID [seconds], log MESSAGE..., free_port, now (epoch seconds),
# q SQL (one statement, its value), start_bench_postgres ["setting = value"...] (below).
bench_harness() {
  if ! command -v gnuplot >/dev/null; then
    echo "installing gnuplot (Debian package gnuplot-nox)" >&2
    apt-get install -y -q gnuplot-nox >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q gnuplot-nox >/dev/null; }
  fi
  PGBIN=$(pg_config --bindir 2>/dev/null || true)
  [[ -x $PGBIN/initdb ]] || PGBIN=$(dirname "$(command -v initdb)")
  mkdir -p "$OUT"
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 755 "$WORK"
  AS_PG=()
  if [[ $(id -u) == 0 ]]; then AS_PG=(runuser -u postgres --); chown postgres "$WORK"; fi
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}
# Every process started is recorded in $WORK/pids (command substitutions run in subshells, so an
# array would not see theirs).
track_pid() { echo "$1" >>"$WORK/pids"; }
stop_pid() {  # pid [seconds]: SIGTERM, wait up to seconds (default 30), then SIGKILL
  local p=$1 i
  kill -TERM "$p" 2>/dev/null || return 0
  for ((i = 0; i < ${2:-30} * 10; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}
bench_cleanup() {
  set +e
  local p
  if [[ -f $WORK/pids ]]; then
    # dev-kafka --broker apache stops its JVM and deletes the broker's data on SIGTERM.
    for p in $(tac "$WORK/pids"); do kill -TERM "$p" 2>/dev/null; done
    for p in $(tac "$WORK/pids"); do stop_pid "$p" 60; done
  fi
  [[ -f $WORK/data/postmaster.pid ]] && "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1
  rm -rf "$WORK"
}
log() { echo "[$(date +%T)] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
q() { psql -X -q -At -v ON_ERROR_STOP=1 -c "$1"; }

# PostgreSQL on loopback in $WORK/data for a benchmark: logical decoding, no fsync, the outbox
# (docs/outbox.sql) and an unrelated table; sets PORT and the PG* variables psql and pgbench read.
# Each argument is one more postgresql.conf line; a later line overrides a setting set here.
start_bench_postgres() {
  PORT=$(free_port)
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
    local line
    for line in "$@"; do echo "$line"; done
  } >>"$WORK/data/postgresql.conf"
  if opl=$("${AS_PG[@]}" "$PGBIN/postgres" -C output_plugin_libraries -D "$WORK/data" 2>/dev/null); then
    [[ $opl == *wal2json* ]] || echo "output_plugin_libraries = 'pgoutput, test_decoding, wal2json'" >>"$WORK/data/postgresql.conf"
  fi
  "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w start >/dev/null
  export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
  psql -X -q -v ON_ERROR_STOP=1 -f docs/outbox.sql >/dev/null
  q "CREATE TABLE public.unrelated (id bigint PRIMARY KEY, note text NOT NULL)"
}
