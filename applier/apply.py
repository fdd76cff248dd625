"""Change appliers: one consumer group; each batch's distinct PKs are re-copied, then offsets committed."""
from __future__ import annotations

import logging
import time

import pymysql
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException

from applier.recopy import recopy_keys, with_retry
from core import redis_keys
from core.context import RunContext
from core.db import query
from core.keys import Key
from core.logs import log_event
from streams.events import decode_key
from streams.topics import TopicNames, consumer_config

log = logging.getLogger("stream_osc.apply")

# consume() returns when a batch is full or after this long: short enough that a lone change is
# applied within tens of milliseconds, long enough to gather a batch under load
APPLY_WAIT_S = 0.05


# How long an applier's statement waits for a row lock (the server's default is 50 s): see applier_session.
APPLIER_LOCK_WAIT_S = 5


def applier_session(ctx: RunContext) -> pymysql.connections.Connection:
    """An applier's database session, its row-lock waits bounded to APPLIER_LOCK_WAIT_S.

    The server notices a vanished client only when it next reads from it, not while a statement waits for a
    lock: an applier whose link is cut while its locking read waits for an application transaction leaves a
    session behind that keeps the share locks it already took on the application's rows until its own wait
    ends (measured: 49 s under the default), and the application's writes to those rows wait as long. A short
    wait bounds that; a re-copy that times out is rolled back and retried (recopy.with_retry).
    """
    conn = ctx.db(autocommit=True)
    query(conn, "SET SESSION innodb_lock_wait_timeout = %s", (APPLIER_LOCK_WAIT_S,))
    return conn


def applier_consumer(ctx: RunContext, client_id: str) -> Consumer:
    """A member of the migration's applier group, reading the change topic from its start."""
    return Consumer(consumer_config(ctx.endpoints.kafka, **{
        "group.id": ctx.migration.group_id,
        "client.id": client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "max.poll.interval.ms": 300000,
        "session.timeout.ms": 10000,
    }))


class ApplyStats:
    """Counters shared by appliers of one process (read by the progress display)."""

    def __init__(self, client: redis.Redis, migration_id: int) -> None:
        self.r = client
        self.key = redis_keys.apply_stats(migration_id)

    def add(self, events: int, keys: int, latency_ms: float) -> None:
        pipe = self.r.pipeline()
        pipe.hincrby(self.key, "events", events)
        pipe.hincrby(self.key, "keys", keys)
        pipe.hset(self.key, "last_batch_ms", int(latency_ms))
        pipe.execute()

    def read(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.r.hgetall(self.key).items()}


class OffsetCommitter:
    """Commits an applier's consumed positions after each write, and again later if a commit was refused.

    A commit refused mid-rebalance leaves the committed offset behind the consumer's position; on a
    quiet table no later batch would move it, and the group's lag would never reach zero. The owed
    commit is retried before the applier's next step (re-applying is harmless either way: a
    partition that moved is re-read by its new owner from the committed offset).
    """

    def __init__(self, consumer: Consumer, worker_no: int) -> None:
        self.consumer = consumer
        self.worker_no = worker_no
        self.owed = False

    def after_batch(self) -> None:
        self.owed = not self._commit()

    def retry_owed(self) -> None:
        if self.owed:
            self.owed = not self._commit()

    def _commit(self) -> bool:
        try:
            self.consumer.commit(asynchronous=False)
            return True
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError._NO_OFFSET:   # nothing consumed since the last commit
                return True
            log_event(log, "offset commit refused; retried before the next batch", logging.WARNING,
                      worker=self.worker_no, reason=str(exc))
            return False


def apply_worker(ctx: RunContext, worker_no: int) -> None:
    """Consume, re-copy the batch's distinct keys, commit offsets after the write; until stopped.

    The database sessions are opened before the consumer joins the group, and the consumer is closed however
    the worker ends: a member that never consumes keeps the partitions the group gives it (librdkafka goes on
    heartbeating for it), so an applier that failed to start during a database outage would hold their
    changes back for as long as its error is kept, and the lag that apply and cutover wait for would not fall.
    """
    names = TopicNames(ctx.migration.prefix, ctx.spec.database, ctx.spec.table)
    conn = applier_session(ctx)
    target: pymysql.connections.Connection | None = None
    consumer: Consumer | None = None
    try:
        target = ctx.target_db() if ctx.pair.remote else None
        stats = ApplyStats(ctx.redis(), ctx.migration.id)
        consumer = applier_consumer(ctx, f"{ctx.migration.prefix}-applier-{worker_no}")
        consumer.subscribe([names.changes])
        committer = OffsetCommitter(consumer, worker_no)
        pk = ctx.pair.pk
        while not ctx.stop.is_set():
            committer.retry_owed()   # before a pause can hold this applier: a refused commit must not wait
            if not ctx.wait_while_paused_or_throttled(conn):
                return
            messages = consumer.consume(num_messages=ctx.spec.apply_batch_size, timeout=APPLY_WAIT_S)
            if not messages:
                continue
            started = time.monotonic()
            keys: set[Key] = set()
            for msg in messages:
                if msg.error():
                    if msg.error().fatal():
                        raise KafkaException(msg.error())
                    continue
                change = decode_key(msg.key(), pk)
                if change is not None and not change.is_fence:
                    keys.add(change.pk)
            if keys:
                with_retry(lambda keys=keys: recopy_keys(conn, ctx.pair, keys, target=target))
            committer.after_batch()
            stats.add(len(messages), len(keys), (time.monotonic() - started) * 1000)
    finally:
        if consumer is not None:
            consumer.close()
        conn.close()
        if target is not None:
            target.close()
