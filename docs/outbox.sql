-- The outbox table an application writes its events into, in the same transaction as its
-- business change. Column names are the Debezium Outbox Event Router defaults, so no
-- `transforms.outbox.*` overrides are needed.
CREATE TABLE IF NOT EXISTS public.outbox (
    id            uuid         PRIMARY KEY,      -- table.field.event.id: header `id`, dedup key for consumers
    aggregatetype varchar(255) NOT NULL,         -- route.by.field: topic outbox.event.<aggregatetype>
    aggregateid   varchar(255) NOT NULL,         -- table.field.event.key: Kafka record key
    type          varchar(255) NOT NULL,         -- table.field.event.type: e.g. OrderCreated
    payload       jsonb,                         -- table.field.event.payload: record value
    created_at    timestamp    NOT NULL DEFAULT (now() AT TIME ZONE 'utc')
);

-- Rows can be deleted right after they are written (Debezium's "remove after insert" style):
-- the delete is ignored by the relay and keeps the table small.
--
-- The relay's database user needs the REPLICATION attribute and must be able to read the
-- catalog; on managed services grant the provider's replication role instead:
--   ALTER ROLE walrelay WITH REPLICATION;
