-- Run once by the postgres image on first start: the outbox table (same as docs/outbox.sql)
-- and a replication user for walrelay.
CREATE TABLE IF NOT EXISTS public.outbox (
    id            uuid         PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb,
    created_at    timestamp    NOT NULL DEFAULT (now() AT TIME ZONE 'utc')
);
CREATE ROLE walrelay WITH LOGIN REPLICATION PASSWORD 'walrelay';
GRANT SELECT ON ALL TABLES IN SCHEMA public TO walrelay;
