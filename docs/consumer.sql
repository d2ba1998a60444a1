-- The processed-keys table of walrelay's idempotent consumer (include/walrelay/consumer.h,
-- PostgresStore). One row per (consumer, idempotency key): a consumer's handler has run to
-- completion for a key exactly when its row is COMPLETED. Put it in the database the handlers
-- write to, so the row and the handler's writes commit in one transaction.
-- See docs/consumer.md for what each state and column means.
CREATE TABLE IF NOT EXISTS public.walrelay_consumer_keys (
    consumer_name   text        NOT NULL,           -- ConsumerOptions::name: scopes the key
    idempotency_key text        NOT NULL,           -- the record's `id` header (outbox event id)
    state           text        NOT NULL DEFAULT 'PENDING'
                    CHECK (state IN ('PENDING', 'COMPLETED', 'FAILED')),
    attempts        integer     NOT NULL DEFAULT 0, -- handler runs started, crashed ones included
    locked_by       text,                           -- owner token of the live claim, NULL when free
    locked_at       timestamptz,                    -- when the latest attempt claimed the key
    expires_at      timestamptz NOT NULL,           -- PENDING: end of the claim's lease;
                                                    -- COMPLETED/FAILED: when the GC may delete it
    result          text,                           -- COMPLETED: what the handler returned
    last_error      text,                           -- the latest failure, "class: message"
    topic           text,                           -- the record that last claimed the key
    kafka_partition integer,
    kafka_offset    bigint,
    payload_hash    text,                           -- SHA-256 of the first claiming record's value
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_name, idempotency_key)
);

-- Tables created before the payload check: the column it needs.
ALTER TABLE public.walrelay_consumer_keys ADD COLUMN IF NOT EXISTS payload_hash text;

-- `walrelay consumer-gc` and PostgresStore::Cleanup delete expired rows in batches through it.
CREATE INDEX IF NOT EXISTS walrelay_consumer_keys_expires_at_idx
    ON public.walrelay_consumer_keys (expires_at);
