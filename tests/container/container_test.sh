#!/usr/bin/env bash
# The container image builds and runs: docker/Dockerfile is built with podman from the repository
# (its .dockerignore in effect, so a local build/ directory does not break it), then run on the
# host network against a PostgreSQL and librdkafka's mock Kafka cluster started here. Checks:
# outbox rows reach Kafka, /healthz answers 200, the relay runs as the image's non-root user, and
# SIGTERM stops it with exit 0. Prints the image size and how long each step took.
#
#   bash tests/container/container_test.sh BUILD_DIR SOURCE_DIR   (ctest -L container)
#
# BUILD_DIR holds the host's walrelay, used only for `walrelay dev-kafka`. Needs podman, runc
# and debootstrap (scripts/install-deps.sh) and root (skipped with exit 77 otherwise). No
# registry is reachable here: the Debian base image is made with debootstrap by
# scripts/container-base.sh and cached under ~/.cache/walrelay. podman runs with runc and
# lowered rlimits, as this sandbox requires; that proves nothing about a Docker engine's
# defaults (docs/deploy.md, "Container image").
set -euo pipefail

BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
IMAGE=${WALRELAY_TEST_IMAGE:-localhost/walrelay:test}
NAME=walrelay-container-test-$$
ROWS=5

fail() { echo "container_test: FAIL: $*" >&2; exit 1; }
log() { echo "[$(date +%T)] $*"; }

if [[ $(id -u) != 0 ]]; then
  # ctest reports 77 as skipped (SKIP_RETURN_CODE); CI runs as root, so it never skips there.
  echo "container_test: skipped: needs root (debootstrap, podman's storage)"
  exit 77
fi
for tool in podman runc debootstrap kcat psql curl; do
  command -v "$tool" >/dev/null || fail "'$tool' is missing; run scripts/install-deps.sh"
done
[[ -x $BUILD/walrelay ]] || fail "no walrelay in '$BUILD' (for dev-kafka); build it first"
PGBIN=$(pg_config --bindir 2>/dev/null || true)
[[ -x $PGBIN/initdb ]] || PGBIN=/usr/lib/postgresql/15/bin
[[ -x $PGBIN/initdb ]] || fail "no PostgreSQL initdb (postgresql-15)"

# The sandbox refuses podman's default rlimits and crun (docs/deploy.md).
PODMAN=(podman --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

WORK=$(mktemp -d /tmp/walrelay-container.XXXXXX)
chmod 755 "$WORK"
KAFKA_PID=""
cleanup() {
  set +e
  "${PODMAN[@]}" rm -f -t 5 "$NAME" >/dev/null 2>&1
  [[ -n $KAFKA_PID ]] && kill "$KAFKA_PID" 2>/dev/null && wait "$KAFKA_PID" 2>/dev/null
  [[ -f $WORK/data/postmaster.pid ]] &&
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
seconds_since() { echo $(($(date +%s) - $1)); }

# --- the image -------------------------------------------------------------------------------
t=$(date +%s)
bash "$SRC/scripts/container-base.sh"
base_s=$(seconds_since "$t")
image_id() { "${PODMAN[@]}" image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
build() {  # extra podman build arguments...
  # --format docker keeps the HEALTHCHECK, which OCI images cannot carry.
  "${PODMAN[@]}" build --pull=never --network host "${LIMITS[@]}" --format docker \
    -f "$SRC/docker/Dockerfile" "$@" "$SRC" >>"$WORK/build.log" 2>&1 || {
    tail -40 "$WORK/build.log" >&2
    fail "podman build failed"
  }
}
t=$(date +%s)
log "podman build -f docker/Dockerfile (log: build.log on failure)"
# The build stage is tagged too (a cache hit, no second compile), so its layers (the apt step,
# the compile) stay for the next run while this test's images of earlier sources are removed:
# each is close to 1 GB.
STAGE=$IMAGE-build-stage
old_ids=("$(image_id "$IMAGE")" "$(image_id "$STAGE")")
build -t "$IMAGE"
build --target build -t "$STAGE"
for id in "${old_ids[@]}"; do
  if [[ -n $id && $id != "$(image_id "$IMAGE")" && $id != "$(image_id "$STAGE")" ]]; then
    "${PODMAN[@]}" rmi "$id" >/dev/null 2>&1 || true
  fi
done
build_s=$(seconds_since "$t")
size_bytes=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")
log "image $IMAGE: $((size_bytes / 1000000)) MB, built in ${build_s} s"
[[ $("${PODMAN[@]}" image inspect --format '{{.Config.User}}' "$IMAGE") == walrelay ]] ||
  fail "the image's USER is not walrelay"
"${PODMAN[@]}" image inspect --format '{{.Config.Healthcheck.Test}}' "$IMAGE" | grep -q /healthz ||
  fail "the image has no HEALTHCHECK on /healthz"

# --- PostgreSQL and Kafka on loopback ----------------------------------------------------------
t=$(date +%s)
PGPORT=$(free_port)
chown postgres "$WORK"
runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/data" -A trust -U postgres --no-sync \
  >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; fail "initdb"; }
cat >>"$WORK/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$WORK'
wal_level = logical
fsync = off
CONF
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/pg.log" -w start >/dev/null
export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
psql -X -q -v ON_ERROR_STOP=1 -f "$SRC/docs/outbox.sql" >/dev/null

"$BUILD/walrelay" dev-kafka --broker mock >"$WORK/kafka.out" 2>"$WORK/kafka.err" &
KAFKA_PID=$!
for _ in $(seq 100); do grep -q '^bootstrap.servers=' "$WORK/kafka.out" && break; sleep 0.1; done
BOOTSTRAP=$(sed -n 's/^bootstrap.servers=//p' "$WORK/kafka.out" | head -1)
[[ -n $BOOTSTRAP ]] || fail "dev-kafka did not start: $(tail -5 "$WORK/kafka.err")"

# --- walrelay in the container -----------------------------------------------------------------
REST_PORT=$(free_port)
cat >"$WORK/connector.json" <<JSON
{
  "name": "outbox",
  "config": {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.hostname": "127.0.0.1",
    "database.port": "$PGPORT",
    "database.user": "postgres",
    "database.dbname": "postgres",
    "plugin.name": "pgoutput",
    "slot.name": "walrelay_container",
    "table.include.list": "public.outbox",
    "topic.prefix": "app",
    "transforms": "outbox",
    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
    "kafka.bootstrap.servers": "$BOOTSTRAP",
    "listeners": "http://127.0.0.1:$REST_PORT"
  }
}
JSON
chmod 644 "$WORK/connector.json"  # read by the container's user, uid 10001
# --no-healthcheck: podman would run the HEALTHCHECK from a systemd timer, and this machine
# has no systemd; its curl is run by hand below.
"${PODMAN[@]}" run -d --name "$NAME" --network host "${LIMITS[@]}" --no-healthcheck \
  -v "$WORK/connector.json:/etc/walrelay/connector.json:ro" "$IMAGE" >/dev/null
health=""
for _ in $(seq 300); do
  health=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$REST_PORT/healthz" || true)
  [[ $health == 200 ]] && break
  "${PODMAN[@]}" container exists "$NAME" &&
    [[ $("${PODMAN[@]}" inspect --format '{{.State.Running}}' "$NAME") == true ]] || break
  sleep 0.2
done
if [[ $health != 200 ]]; then
  "${PODMAN[@]}" logs "$NAME" 2>&1 | tail -30 >&2
  fail "/healthz answered '$health', not 200"
fi
# As the image's HEALTHCHECK asks (its port is 8083; this test's relay listens on a free one).
"${PODMAN[@]}" exec "$NAME" curl -fsS "http://127.0.0.1:$REST_PORT/healthz" >/dev/null ||
  fail "curl in the container cannot reach /healthz"
log "/healthz 200"

# The process in the container runs as the image's user, not root.
uid=$("${PODMAN[@]}" exec "$NAME" id -u)
user=$("${PODMAN[@]}" top "$NAME" user | awk 'NR == 2 {print $1}')
[[ $uid == 10001 && $user == walrelay ]] || fail "runs as uid '$uid' user '$user', not walrelay"
log "runs as $user (uid $uid)"

# Rows committed now are relayed to outbox.event.<aggregatetype>.
for i in $(seq "$ROWS"); do
  psql -X -q -v ON_ERROR_STOP=1 -c "INSERT INTO public.outbox (id, aggregatetype, aggregateid,
    type, payload) VALUES (gen_random_uuid(), 'order', 'order-$i', 'OrderCreated',
    '{\"n\": $i}')"
done
timeout 60 kcat -C -q -b "$BOOTSTRAP" -t outbox.event.order -o beginning -c "$ROWS" \
  -f '%k %s\n' >"$WORK/records.txt" 2>"$WORK/kcat.err" || true
relayed=$(grep -c '^order-' "$WORK/records.txt" || true)
[[ $relayed == "$ROWS" ]] || {
  "${PODMAN[@]}" logs "$NAME" 2>&1 | tail -30 >&2
  fail "$relayed of $ROWS rows relayed: $(cat "$WORK/records.txt" "$WORK/kcat.err")"
}
grep -q '^order-3 .*"n": *3' "$WORK/records.txt" ||
  fail "unexpected records: $(cat "$WORK/records.txt")"
log "$relayed of $ROWS rows relayed"

# podman stop sends SIGTERM: the relay drains and exits 0.
"${PODMAN[@]}" stop -t 30 "$NAME" >/dev/null
code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")
[[ $code == 0 ]] || fail "exit code $code after SIGTERM"
run_s=$(seconds_since "$t")

echo "container_test: image $((size_bytes / 1000000)) MB; base image ${base_s} s, build" \
  "${build_s} s, run ${run_s} s; $relayed/$ROWS rows relayed, /healthz 200, uid $uid, exit $code"
