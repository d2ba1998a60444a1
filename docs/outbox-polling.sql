-- What source.mode=polling needs on top of docs/outbox.sql (docs/polling.md).
--
-- The order rows are relayed in (polling.order.column, default seq): an identity column, so
-- each insert takes a larger value than every insert before it. Keep its sequence at CACHE 1
-- (the default): with a larger cache, sessions take values in blocks, and a later event can
-- get a smaller value than an earlier one.
ALTER TABLE public.outbox ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX IF NOT EXISTS outbox_seq ON public.outbox (seq);

-- With polling.mark=column:published_at the rows stay and are stamped once Kafka acknowledged
-- them; the partial index keeps finding the unpublished ones cheap however many published rows
-- the table holds (delete those on your own schedule):
--   ALTER TABLE public.outbox ADD COLUMN IF NOT EXISTS published_at timestamptz;
--   CREATE INDEX IF NOT EXISTS outbox_unpublished ON public.outbox (seq) WHERE published_at IS NULL;
--
-- The relay's database user needs SELECT and DELETE (or UPDATE of the mark column) on the
-- table, and no REPLICATION attribute:
--   GRANT SELECT, DELETE ON public.outbox TO walrelay;
