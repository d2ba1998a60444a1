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

-- With a replication slot (the default source.mode) rows can be deleted right after they are
-- written (Debezium's "remove after insert" style): the delete is ignored by the relay and keeps
-- the table small. NOT with source.mode=polling: a poll never sees a row deleted before it, so
-- every such event is lost there; the polling relay deletes the rows itself (docs/polling.md).
--
-- With pgoutput, a publication that publishes only inserts keeps those deletes (and any update)
-- in PostgreSQL: the walsender never decodes them for the relay. Create it so by hand, as the
-- table's owner (with publication.autocreate.mode=disabled or filtered):
--   CREATE PUBLICATION dbz_publication FOR TABLE public.outbox WITH (publish = 'insert');
-- or let walrelay create it so, as Debezium 3.6 does: skipped.operations=u,d,t.
--
-- The relay's database user needs the REPLICATION attribute and must be able to read the
-- catalog; on managed services grant the provider's replication role instead:
--   ALTER ROLE walrelay WITH REPLICATION;

-- Without logical replication (source.mode=polling, docs/polling.md) the relay reads this table
-- in the order of an identity column and deletes each row once Kafka acknowledged it; with
-- polling.mark=column:published_at it stamps the row instead and finds the unpublished ones
-- through a partial index. docs/outbox-polling.sql adds both:
--   ALTER TABLE public.outbox ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
--   CREATE UNIQUE INDEX outbox_seq ON public.outbox (seq);
--   ALTER TABLE public.outbox ADD COLUMN published_at timestamptz;            -- mark=column only
--   CREATE INDEX outbox_unpublished ON public.outbox (seq) WHERE published_at IS NULL;
