// walrelay's idempotent consumer: a librdkafka consumer-group member that calls a handler at
// most once to completion per idempotency key, however often Kafka delivers the record.
//
// walrelay delivers at least once, so a record may arrive twice (rebalances, poll timeouts,
// restarts, a relay restart that repeats a transaction). Each record's idempotency key (by
// default its `id` header, the outbox event id) is claimed in an IdempotencyStore, scoped by
// ConsumerOptions::name, before the handler runs:
//
//  - PostgresStore (the default choice): the handler receives the open database transaction
//    that also marks the key COMPLETED, so the handler's writes, any outbox rows it adds and
//    the key commit together or not at all. Exactly-once effects for everything in that
//    database.
//  - RedisStore: for handlers whose effects live elsewhere. One atomic Lua script claims the
//    key with a lease on the Redis server's clock. A crash after the effect and before the key
//    is marked COMPLETED repeats the effect; see docs/consumer.md.
//  - DynamoStore: the same guarantees as RedisStore on a DynamoDB table (conditional writes),
//    for services on AWS without a Redis to run.
//
// Records are handled a poll batch at a time (max_batch), in partition order, with the same
// guarantees record by record. The Kafka offset is committed only after the store recorded
// the outcome: per batch by default, or every commit_interval and before partitions are given up in
// a rebalance (cooperative-sticky by default, so a rebalance moves only the partitions that change
// owner while the others keep flowing). A failing handler is retried with exponential backoff up to
// max_attempts (counted in the store, so restarts and crashes count too); then, or at once for a
// non-retriable error, the record goes to the dead-letter topic with reason headers, its key is
// marked FAILED and the partition moves on.
//
// Threading: Run() blocks the calling thread and uses the store from it only; Stop() and
// stats() may be called from any thread. Separate Consumer objects are independent.
//
// This header includes the whole library. Each part has its own header, so a program that
// uses one store needs only that store's client headers: walrelay/consumer/consumer.h (the
// consumer), walrelay/consumer/store.h (the store interface, for a store of one's own), and
// walrelay/consumer/postgres_store.h (needs libpq's headers), redis_store.h, dynamo_store.h.
#pragma once

#include "walrelay/consumer/consumer.h"
#include "walrelay/consumer/dynamo_store.h"
#include "walrelay/consumer/handler.h"
#include "walrelay/consumer/postgres_store.h"
#include "walrelay/consumer/redis_store.h"
#include "walrelay/consumer/store.h"
