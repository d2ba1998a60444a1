#!/usr/bin/env bash
# Regenerates fuzz/corpus/wal2json/captured-*.json from a real PostgreSQL (15+, wal2json): a
# throwaway cluster, statements covering the column types, actions and identifiers the relay
# can meet, and the slot read with the options the relay starts it with
# (pg/replication_connection.cc), one message per file. Run as root (the cluster then runs as
# the postgres OS user) or as a user that may run initdb. Not run by CI: the committed files
# are its output.
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir="$PWD/fuzz/corpus/wal2json"
bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
work=$(mktemp -d /tmp/walrelay-capture-XXXXXX)
chmod 755 "$work"
as_owner=()
if [ "$(id -u)" -eq 0 ]; then chown postgres "$work"; as_owner=(runuser -u postgres --); fi
port=$((20000 + RANDOM % 20000))
cleanup() {
  "${as_owner[@]}" "$bindir/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"${as_owner[@]}" "$bindir/initdb" -D "$work/data" -A trust -U postgres -E UTF8 --locale=C >/dev/null
settings="-c listen_addresses= -c unix_socket_directories=$work -c port=$port -c wal_level=logical"
# Builds that restrict output plugins need wal2json listed (docs/configuration.md).
if "${as_owner[@]}" "$bindir/postgres" -C output_plugin_libraries -D "$work/data" >/dev/null 2>&1; then
  settings+=" -c output_plugin_libraries=pgoutput,test_decoding,wal2json"
fi
"${as_owner[@]}" "$bindir/pg_ctl" -D "$work/data" -l "$work/server.log" -w -o "$settings" start >/dev/null
psql() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$work" -p "$port" -U postgres -d postgres "$@"; }

psql -f docs/outbox.sql >/dev/null
psql <<'SQL'
CREATE TYPE mood AS ENUM ('ok', 'sad');
CREATE DOMAIN positive AS integer CHECK (VALUE > 0);
CREATE TYPE pair AS (a integer, b text);
CREATE TABLE wide (
  id bigserial PRIMARY KEY, s smallint, i integer, b bigint, n numeric, n2 numeric(30,10),
  r real, d double precision, flag boolean, t text, vc varchar(20), ch char(5), by bytea,
  j json, jb jsonb, u uuid, ts timestamp, tstz timestamptz, dt date, tm time, iv interval,
  ia integer[], ta text[], m money, ip inet, pt point, e mood, dom positive, p pair,
  tv tsvector, x xml, o oid);
CREATE TABLE nokey (a text, b integer);
CREATE TABLE composite (k1 integer, k2 text, v text, PRIMARY KEY (k1, k2));
ALTER TABLE composite REPLICA IDENTITY FULL;
CREATE SCHEMA "Weird Schema";
CREATE TABLE "Weird Schema"."Tab.le ü" ("col ""q""" text PRIMARY KEY, "ÄÖ" integer);
CREATE TABLE toasty (id integer PRIMARY KEY, big text, small integer);
ALTER TABLE toasty ALTER COLUMN big SET STORAGE EXTERNAL;
SQL
# After the DDL, whose empty transactions would only repeat the sample's.
psql -c "SELECT pg_create_logical_replication_slot('capture', 'wal2json')" >/dev/null
psql -o /dev/null 2>/dev/null <<'SQL'
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
  (gen_random_uuid(), 'Order', 'order-1', 'OrderCreated',
   jsonb_build_object('amount', 19.99, 'note', 'événement "n°1" \ tab	end', 'items', jsonb_build_array(1, 'two', null, true))),
  (gen_random_uuid(), 'Customer', 'customer-7', 'CustomerRegistered', '{}'),
  (gen_random_uuid(), 'Order', '', 'Empty', 'null');
INSERT INTO wide (s, i, b, n, n2, r, d, flag, t, vc, ch, by, j, jb, u, ts, tstz, dt, tm, iv, ia, ta, m, ip, pt, e, dom, p, tv, x, o)
VALUES (-32768, 2147483647, 9223372036854775807, 123456789012345678901234567890.123456789,
        -0.0000000001, 3.4e38, -1.7976931348623157e308, false, E'line1\nline2\r\t\\ "q" \u00e9 \U0001F600',
        'varchar', 'ab', '\x00ff10', '{"a": [1, 2.5e10, "x"], "b": {"c": null}}', '{"z": 1, "a": "b"}',
        'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1999-12-31 23:59:59.999999', '2000-01-01 00:00:00+14',
        '4713-01-01 BC', '24:00:00', '1 year 2 mons -3 days 04:05:06.789', '{1,NULL,3}', '{"a b","c,d",NULL}',
        '$1,234.56', '192.168.0.1/24', '(1.5,-2)', 'sad', 7, ROW(1, 'x'), 'a fat cat', '<a b="c">d</a>', 42);
INSERT INTO wide (n, r, d, ts, tstz, dt) VALUES ('NaN', 'Infinity', '-Infinity', 'infinity', '-infinity', 'infinity');
INSERT INTO wide DEFAULT VALUES;
INSERT INTO nokey VALUES ('no primary key', NULL);
INSERT INTO composite VALUES (1, 'a', 'v1'), (2, 'b', NULL);
INSERT INTO "Weird Schema"."Tab.le ü" VALUES ('k', 1);
INSERT INTO toasty VALUES (1, repeat('toast ', 5000), 1);
UPDATE toasty SET small = 2 WHERE id = 1;
UPDATE wide SET i = i - 1 WHERE s = -32768;
UPDATE wide SET id = 100 WHERE s = -32768;
UPDATE composite SET v = 'v2' WHERE k1 = 1;
UPDATE nokey SET b = 1;
UPDATE "Weird Schema"."Tab.le ü" SET "col ""q""" = 'k2';
DELETE FROM composite WHERE k1 = 2;
DELETE FROM "Weird Schema"."Tab.le ü";
DELETE FROM outbox;
BEGIN;
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
  VALUES (gen_random_uuid(), 'Shipment', 'ship-1', 'Shipped', '[1, 2, 3]');
SELECT pg_logical_emit_message(true, 'walrelay', 'transactional message');
SELECT pg_logical_emit_message(false, 'walrelay', E'\\x00ff'::bytea);
COMMIT;
SELECT pg_logical_emit_message(false, '', 'non-transactional, empty prefix');
TRUNCATE composite, nokey RESTART IDENTITY;
SQL

opts="'format-version', '2', 'include-xids', '1', 'include-timestamp', '1', 'include-lsn', '1', 'include-pk', '1', 'include-types', '1'"
# Commit timestamps are rendered in the session's time zone; the relay must read any offset.
{
  psql -At -c "SET timezone = 'UTC'; SELECT data FROM pg_logical_slot_peek_changes('capture', NULL, NULL, $opts)"
  psql -At -c "SET timezone = 'America/St_Johns'; SELECT data FROM pg_logical_slot_peek_changes('capture', NULL, NULL, $opts) WHERE data LIKE '{\"action\":\"B\"%' LIMIT 2"
  psql -At -c "SET timezone = 'Asia/Kathmandu'; SELECT data FROM pg_logical_slot_peek_changes('capture', NULL, NULL, $opts) WHERE data LIKE '{\"action\":\"I\"%' LIMIT 1"
  # Without the relay's options: what a slot read by another consumer looks like.
  psql -At -c "SELECT data FROM pg_logical_slot_peek_changes('capture', NULL, NULL, 'format-version', '2') LIMIT 6"
} > "$work/lines"

rm -f "$out_dir"/captured-*.json
n=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  n=$((n + 1))
  printf '%s' "$line" > "$out_dir/captured-$(printf %03d "$n").json"
done < "$work/lines"
echo "capture: $n messages written to $out_dir"
