"""Change appliers: one consumer group; each batch's distinct PKs are re-copied, then offsets committed."""
from __future__ import annotations

import logging
import time
import uuid
from functools import partial

import pymysql
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from applier.giving_way import LockWaits
from applier.recopy import recopy_keys, with_retry
from applier.uncopied import KeySorter, settle_behind_batches
from applier.zero_dates import with_zero_date_rows
from core import redis_keys
from core.context import RunContext
from core.db import query
from core.keys import Key
from core.logs import log_event
from streams.closing import leave_and_close_within
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
    bound_lock_waits(conn)
    return conn


def bound_lock_waits(conn: pymysql.connections.Connection, seconds: int | None = APPLIER_LOCK_WAIT_S) -> None:
    """Bound the session's row-lock waits to `seconds` as an applier's are (applier_session); None: the server's
    default again."""
    if seconds is None:
        query(conn, "SET SESSION innodb_lock_wait_timeout = DEFAULT")
    else:
        query(conn, "SET SESSION innodb_lock_wait_timeout = %s", (seconds,))


def applier_consumer(ctx: RunContext, worker_no: int, member: str, committer: OffsetCommitter) -> Consumer:
    """A member of the migration's applier group, reading the change topic from its start; its positions are
    stored and committed by `committer`.

    A dynamic member, named in `client.id` by its process's appliers (`member`) and `worker_no`. Not a static
    one (`group.instance.id`): with the same names again after a stop, a restart takes its predecessors' place
    without a rebalance, which spared the 5 s a dynamic member's LeaveGroup can wait behind a JoinGroup in
    flight; but once, after both appliers of a process restarted together so (broker log: "replacing
    previously mapped member ... will not trigger a rebalance", twice), the apply stage waited 23 minutes
    for a lag that never fell while both members heartbeated. A dynamic member leaves on close and the
    group rebalances: slower by seconds.
    """
    consumer = Consumer(consumer_config(ctx.endpoints.kafka, **{
        "group.id": ctx.migration.group_id,
        "client.id": f"{ctx.migration.prefix}-applier-{member}-{worker_no}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "max.poll.interval.ms": 300000,
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,   # a rebalance reaches every member at its next heartbeat (default 3 s)
        "enable.auto.offset.store": False,
        "on_commit": committer.on_commit,
    }))
    committer.consumer = consumer
    return consumer


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


# refusals that only say the group's membership moved on since the commit was sent (not UNKNOWN_MEMBER_ID:
# that one also says this member was expelled, which an operator must hear of)
GENERATION_MOVED = frozenset({KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS})


class OffsetCommitter:
    """Commits an applier's positions after each write, without waiting for the broker's answer.

    Positions are stored only once their batch is written (`enable.auto.offset.store` is off), so no commit
    covers a change not yet applied. The commit does not wait: librdkafka's synchronous commit can hang for
    good (confluent-kafka-python #1801; seen here after a commit refused in a rebalance), and a hung applier
    stays a member of the group whose partitions nobody consumes, so the lag that apply and cutover wait for
    stops falling. The broker's answer arrives in on_commit during a later consume(); a refused commit (mid
    rebalance) is owed and made again before the applier's next step: on a quiet table no later batch would
    move the committed offset, and the group's lag would never reach zero. (A partition that moved is re-read
    by its new owner from the committed offset; re-applying is harmless.)
    """

    def __init__(self, worker_no: int) -> None:
        self.worker_no = worker_no
        self.consumer: Consumer | None = None
        self.owed = False
        self.refusing = False   # the last answer was a refusal
        self.warned = False     # a refusal of the current run was said as a warning

    def after_batch(self, messages: list[Message]) -> None:
        """Store the batch's positions (it is written) and commit them."""
        last: dict[tuple[str, int], int] = {}
        for msg in messages:
            if not msg.error():
                last[(msg.topic(), msg.partition())] = msg.offset()
        if last:
            try:
                self._consumer().store_offsets(offsets=[TopicPartition(topic, partition, offset + 1)
                                                        for (topic, partition), offset in last.items()])
            except KafkaException as exc:   # a partition revoked since: its new owner re-reads it
                log_event(log, "positions of revoked partitions not stored", logging.DEBUG, worker=self.worker_no,
                          reason=str(exc))
        self._commit()

    def retry_owed(self) -> None:
        if self.owed:
            self._commit()

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The broker's answer to a commit (called from consume())."""
        if error is None:   # the request went through; a partition may still have been refused
            error = next((tp.error for tp in partitions if tp.error is not None), None)
        if error is None or error.code() == KafkaError._NO_OFFSET:   # nothing stored since the last commit
            self.refusing = self.warned = False
            return
        self.owed = True
        # every commit in flight when the group's generation moves is refused at once: one line per run of
        # refusals, the rest at debug; a rebalance (a member joining or leaving, as at every stop) is routine,
        # said at info, and does not hide a warning-worthy refusal later in the same run
        routine = error.code() in GENERATION_MOVED
        if not routine and not self.warned:
            level, self.warned = logging.WARNING, True
        elif routine and not self.refusing:
            level = logging.INFO
        else:
            level = logging.DEBUG
        log_event(log, "offset commit refused; retried before the next batch", level, worker=self.worker_no,
                  reason=str(error))
        self.refusing = True

    def _commit(self) -> None:
        self.owed = False
        try:
            self._consumer().commit(asynchronous=True)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                self.on_commit(exc.args[0], [])

    def _consumer(self) -> Consumer:
        assert self.consumer is not None, "the committer's consumer is set when the consumer is made"
        return self.consumer


def close_applier_consumer(consumer: Consumer, worker_no: int) -> bool:
    """Leave the applier group, then close: a member closed while the group rebalanced stayed in it until its
    session timed out, and the other appliers' stop waited as long (streams/closing.py)."""
    return leave_and_close_within(consumer, f"applier-{worker_no}")


def new_member_name() -> str:
    """A name for one process's appliers, kept across their stops and starts: their client ids in the group."""
    return uuid.uuid4().hex[:12]


def apply_changed_keys(conn: pymysql.connections.Connection, ctx: RunContext, keys: set[Key],
                       target: pymysql.connections.Connection | None, sorter: KeySorter,
                       waits: LockWaits | None = None) -> int:
    """Re-copy the changed keys; returns how many were re-copied.

    During the copy the keys it has yet to read are left to it, and those inside an open batch's range are
    settled after that batch (applier/uncopied.py), once the rest are written: a change is held back only by
    a batch that may be reading its row, or, for a key without a row, by every batch running."""
    def recopy(some: set[Key]) -> int:
        if some:
            with_retry(lambda: recopy_keys(conn, ctx.pair, some, target=target, waits=waits, stop=ctx.stop),
                       stop=ctx.stop)
        return len(some)

    if sorter.copy_complete or not keys:
        return recopy(keys)
    sorted_keys = with_retry(lambda: sorter.sort(conn, ctx, list(keys)), stop=ctx.stop)
    if sorted_keys is None:
        return recopy(keys)
    written = recopy(sorted_keys.now)
    if sorted_keys.behind:
        left = with_retry(lambda: settle_behind_batches(conn, ctx, sorted_keys), stop=ctx.stop)
        written += recopy(sorted_keys.behind - left)
    return written


def apply_worker(ctx: RunContext, worker_no: int, member: str) -> None:
    """Consume, re-copy the batch's distinct keys, commit offsets after the write; until stopped. During the
    copy, keys it has yet to read are left to it (applier/uncopied.py).

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
        waits = LockWaits(ctx.redis(), ctx.migration.id)
        committer = OffsetCommitter(worker_no)
        consumer = applier_consumer(ctx, worker_no, member, committer)
        consumer.subscribe([names.changes])
        pk = ctx.pair.pk
        sorter = KeySorter()   # while chunks remain, keys the copy has yet to read are left to it
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
            keys = with_retry(partial(with_zero_date_rows, conn, ctx.pair, keys, target), stop=ctx.stop)
            written = apply_changed_keys(conn, ctx, keys, target, sorter, waits)
            committer.after_batch(messages)
            stats.add(len(messages), written, (time.monotonic() - started) * 1000)
    finally:
        if consumer is not None:
            close_applier_consumer(consumer, worker_no)
        conn.close()
        if target is not None:
            target.close()
