#!/usr/bin/env bash
# Regenerates the decoder test data from a real PostgreSQL 15 (with wal2json installed): one
# SQL workload, read through two slots created before it, a wal2json slot (with the options
# the relay starts it with, pg/replication_connection.cc) and a pgoutput slot (protocol
# version 1, publication dbz_publication FOR ALL TABLES, messages on), so the two files
# describe the same transactions.
#
#   tests/data/decoder_parity_wal2json.tsv   <lsn> TAB <wal2json message>        one per line
#   tests/data/decoder_parity_pgoutput.tsv   <lsn> TAB <pgoutput message, hex>   one per line
#   tests/data/decoder_parity_keys.tsv       <schema> TAB <table> TAB <pk columns, column order>
#   tests/data/decoder_parity_types.tsv      <type oid> TAB <format_type> (types not built in)
#   tests/data/decoder_parity_columns.tsv    <schema> TAB <table> TAB <column> TAB <format_type>
#   fuzz/corpus/pgoutput/captured-*.bin      seeds for fuzz/pgoutput_decoder_fuzz (see there)
#
# <lsn> is the position the walsender sends as the XLogData dataStart of that message (the
# `lsn` column of pg_logical_slot_peek_*changes). Run as root (the cluster then runs as the
# postgres OS user) or as a user that may run initdb. Not run by CI: the committed files are
# its output.
set -euo pipefail
cd "$(dirname "$0")/../.."
data_dir="$PWD/tests/data"
corpus_dir="$PWD/fuzz/corpus/pgoutput"
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
CREATE SCHEMA "Weird Schema";
CREATE TYPE "Weird Schema"."Mood Ring" AS ENUM ('red', 'blue');
CREATE TABLE wide (
  id bigserial PRIMARY KEY, s smallint, i integer, b bigint, n numeric, n2 numeric(30,10),
  n3 numeric(10,2), r real, d double precision, flag boolean, t text, vc varchar(20),
  vc255 varchar(255), vcn varchar, ch char(5), ch1 char, by bytea, j json, jb jsonb, u uuid,
  ts timestamp, ts3 timestamp(3), tstz timestamptz, tstz0 timestamptz(0), dt date, tm time,
  tm2 time(2), tmtz timetz, iv interval, ia integer[], ba bigint[], ta text[], vca varchar(8)[],
  na numeric(5,1)[], m money, ip inet, cidr_ cidr, mac macaddr, pt point, bits bit(4),
  vbits varbit(8), e mood, ea mood[], dom positive, p pair,
  tv tsvector, x xml, o oid, c "char", nm name);
CREATE TABLE nokey (a text, b integer);
CREATE TABLE nothing (id integer PRIMARY KEY, v text);
ALTER TABLE nothing REPLICA IDENTITY NOTHING;
CREATE TABLE composite (k1 integer, k2 text, v text, PRIMARY KEY (k1, k2));
ALTER TABLE composite REPLICA IDENTITY FULL;
CREATE TABLE keyorder (a integer, b text, v text, PRIMARY KEY (b, a));
CREATE TABLE "Weird Schema"."Tab.le ü" ("col ""q""" text PRIMARY KEY, "ÄÖ" integer);
-- wal2json prints a type name that needs quotes without its outer quotes, so the JSON of
-- this table's rows is invalid; the pgoutput tests use it, the parity test cannot.
CREATE TABLE "Weird Schema".typed (id integer PRIMARY KEY, we "Weird Schema"."Mood Ring");
CREATE TABLE toasty (id integer PRIMARY KEY, big text, small integer, bin bytea);
ALTER TABLE toasty ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE toasty ALTER COLUMN bin SET STORAGE EXTERNAL;
CREATE TABLE toasty_full (id integer PRIMARY KEY, big text, small integer);
ALTER TABLE toasty_full ALTER COLUMN big SET STORAGE EXTERNAL;
ALTER TABLE toasty_full REPLICA IDENTITY FULL;
CREATE TABLE altered (id integer PRIMARY KEY, v text);
CREATE PUBLICATION dbz_publication FOR ALL TABLES;
SQL
# After the DDL, whose empty transactions pgoutput would not send anyway.
psql -c "SELECT pg_create_logical_replication_slot('w2j', 'wal2json')" \
     -c "SELECT pg_create_logical_replication_slot('pgo', 'pgoutput')" >/dev/null
psql -o /dev/null 2>/dev/null <<'SQL'
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
  ('00000000-0000-4000-8000-000000000001', 'Order', 'Order-1', 'OrderHappened',
   jsonb_build_object('seq', 1, 'key', 'Order-1', 'text', 'ünï "q" \ ok')),
  (gen_random_uuid(), 'Customer', 'customer-7', 'CustomerRegistered', '{}'),
  (gen_random_uuid(), 'Order', '', 'Empty', 'null');
INSERT INTO wide (s, i, b, n, n2, n3, r, d, flag, t, vc, vc255, vcn, ch, ch1, by, j, jb, u, ts, ts3,
                  tstz, tstz0, dt, tm, tm2, tmtz, iv, ia, ba, ta, vca, na, m, ip, cidr_, mac, pt,
                  bits, vbits, e, ea, dom, p, tv, x, o, c, nm)
VALUES (-32768, 2147483647, 9223372036854775807, 123456789012345678901234567890.123456789,
        -0.0000000001, 12345678.91, 3.4e38, -1.7976931348623157e308, true,
        E'line1\nline2\r\t\\ "q" \u00e9 \U0001F600', 'varchar', 'v255', 'unbounded', 'ab', 'z',
        '\x00ff10', '{"a": [1, 2.5e10, "x"], "b": {"c": null}}', '{"z": 1, "a": "b"}',
        'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '1999-12-31 23:59:59.999999',
        '2001-02-03 04:05:06.789', '2000-01-01 00:00:00+14', '2000-01-01 12:00:00.6+00',
        '4713-01-01 BC', '24:00:00', '12:34:56.789', '01:02:03+05:30',
        '1 year 2 mons -3 days 04:05:06.789', '{1,NULL,3}', '{-9223372036854775808}',
        '{"a b","c,d",NULL}', '{x,"y z"}', '{1.5,NULL}', '$1,234.56', '192.168.0.1/24',
        '10.0.0.0/8', '08:00:2b:01:02:03', '(1.5,-2)', B'1010', B'101', 'sad', '{ok,sad}',
        7, ROW(1, 'x'), 'a fat cat', '<a b="c">d</a>', 42, 'q', 'a name');
INSERT INTO wide (n, r, d, ts, tstz, dt) VALUES ('NaN', 'Infinity', '-Infinity', 'infinity', '-infinity', 'infinity');
INSERT INTO wide (n, n3, r, d, flag) VALUES ('-0.5', '0', '-0', 'NaN', false);
INSERT INTO wide DEFAULT VALUES;
INSERT INTO "Weird Schema".typed VALUES (1, 'blue');
INSERT INTO nokey VALUES ('no primary key', NULL);
INSERT INTO nothing VALUES (1, 'replica identity nothing');
INSERT INTO composite VALUES (1, 'a', 'v1'), (2, 'b', NULL);
INSERT INTO keyorder VALUES (1, 'one', 'x');
INSERT INTO "Weird Schema"."Tab.le ü" VALUES ('k', 1);
INSERT INTO toasty VALUES (1, repeat('toast ', 600), 1, convert_to(repeat('bin ', 800), 'UTF8'));
INSERT INTO toasty_full VALUES (1, repeat('full ', 700), 1);
UPDATE toasty SET small = 2 WHERE id = 1;
UPDATE toasty SET id = 2 WHERE id = 1;
UPDATE toasty_full SET small = 2 WHERE id = 1;
UPDATE wide SET i = i - 1 WHERE s = -32768;
UPDATE wide SET id = 100 WHERE s = -32768;
UPDATE composite SET v = 'v2' WHERE k1 = 1;
UPDATE keyorder SET v = 'y';
UPDATE keyorder SET a = 2;
UPDATE "Weird Schema"."Tab.le ü" SET "col ""q""" = 'k2';
DELETE FROM composite WHERE k1 = 2;
DELETE FROM keyorder;
DELETE FROM toasty;
DELETE FROM "Weird Schema"."Tab.le ü";
DELETE FROM outbox;
BEGIN;
INSERT INTO altered VALUES (1, 'before');
ALTER TABLE altered ADD COLUMN extra numeric(10,2) DEFAULT 1.5, ALTER COLUMN v TYPE varchar(40);
INSERT INTO altered VALUES (2, 'after', 2.25);
COMMIT;
INSERT INTO altered VALUES (3, 'later', NULL);
BEGIN;
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
  VALUES (gen_random_uuid(), 'Shipment', 'ship-1', 'Shipped', '[1, 2, 3]');
SELECT pg_logical_emit_message(true, 'walrelay', 'transactional message');
SELECT pg_logical_emit_message(true, 'outbox', '{"id": "x", "payload": {"a": 1}}');
SELECT pg_logical_emit_message(false, 'walrelay', 'non-transactional inside');
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
  SELECT gen_random_uuid(), 'Order', 'Order-' || g, 'OrderHappened', jsonb_build_object('seq', g)
  FROM generate_series(2, 6) g;
COMMIT;
SELECT pg_logical_emit_message(false, '', 'non-transactional, empty prefix');
BEGIN;
INSERT INTO composite VALUES (9, 'rolled back', 'never');
SELECT pg_logical_emit_message(true, 'outbox', 'rolled back');
ROLLBACK;
TRUNCATE composite, nokey RESTART IDENTITY;
TRUNCATE nothing;
SQL

w2j_opts="'format-version', '2', 'include-xids', '1', 'include-timestamp', '1', 'include-lsn', '1', 'include-pk', '1', 'include-types', '1'"
pgo_opts="'proto_version', '1', 'publication_names', 'dbz_publication', 'messages', 'true'"
psql -At -F $'\t' -c "SELECT lsn, data FROM pg_logical_slot_peek_changes('w2j', NULL, NULL, $w2j_opts)" \
  > "$data_dir/decoder_parity_wal2json.tsv"
psql -At -F $'\t' -c "SELECT lsn, encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('pgo', NULL, NULL, $pgo_opts)" \
  > "$data_dir/decoder_parity_pgoutput.tsv"
psql -At -F $'\t' > "$data_dir/decoder_parity_keys.tsv" <<'SQL'
SELECT n.nspname, c.relname,
       string_agg(a.attname, ',' ORDER BY a.attnum)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL unnest(i.indkey) AS k(attnum)
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE i.indisprimary AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
GROUP BY n.nspname, c.relname ORDER BY 1, 2;
SQL
psql -At -F $'\t' -c "SELECT oid, format_type(oid, NULL) FROM pg_type WHERE oid >= 16384 ORDER BY 1" \
  > "$data_dir/decoder_parity_types.tsv"
psql -At -F $'\t' > "$data_dir/decoder_parity_columns.tsv" <<'SQL'
SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
ORDER BY n.nspname, c.relname, a.attnum;
SQL

# Fuzz seeds: one file per transaction (and per non-transactional message), each preceded by
# the Relation and Type messages the stream sent before it, framed as the fuzz target reads
# them (a 4-byte big-endian length before each message).
rm -f "$corpus_dir"/captured-*.bin
mkdir -p "$corpus_dir"
python3 - "$data_dir/decoder_parity_pgoutput.tsv" "$corpus_dir" <<'PY'
import struct, sys
rows = [bytes.fromhex(l.rstrip("\n").split("\t")[1]) for l in open(sys.argv[1]) if l.strip()]
schema = {}  # relation or type id -> its latest R/Y message
seeds, current = [], None
for m in rows:
    kind = chr(m[0])
    if kind in "RY":
        schema[(kind, m[1:5])] = m
        if current is not None:
            current.append(m)
        continue
    if kind == "B":
        current = list(schema.values()) + [m]
        continue
    if current is None:
        seeds.append([m])
        continue
    current.append(m)
    if kind == "C":
        seeds.append(current)
        current = None
for n, seed in enumerate(seeds, 1):
    with open(f"{sys.argv[2]}/captured-{n:03d}.bin", "wb") as f:
        for m in seed:
            f.write(struct.pack(">I", len(m)) + m)
print(f"capture: {len(rows)} pgoutput messages, {len(seeds)} fuzz seeds")
PY
echo "capture: $(wc -l < "$data_dir/decoder_parity_wal2json.tsv") wal2json messages"
