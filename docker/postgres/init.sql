-- Run once by the postgres image on first start: the outbox table (same as docs/outbox.sql),
-- its pgoutput publication, and a replication user for walrelay.
CREATE TABLE IF NOT EXISTS public.outbox (
    id            uuid         PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb,
    created_at    timestamp    NOT NULL DEFAULT (now() AT TIME ZONE 'utc')
);
-- Made here by the table's owner: walrelay's user may not create publications
-- (connector.json sets publication.autocreate.mode=disabled).
CREATE PUBLICATION dbz_publication FOR TABLE public.outbox;
CREATE ROLE walrelay WITH LOGIN REPLICATION PASSWORD 'walrelay';
GRANT SELECT ON ALL TABLES IN SCHEMA public TO walrelay;
