"""The fence and the drains to it: every change committed before a fence is re-copied once the fence is read back
from the change topic (docs/cutover.md, "The swap", step 3). The catch-up drains without the lock, so that only
the last moment's changes are left for the window."""
from __future__ import annotations

import logging
import time
import uuid

import pymysql
from confluent_kafka import Consumer

from applier.recopy import recopy_keys, with_retry
from applier.zero_dates import with_zero_date_rows
from core.context import RunContext
from core.keys import Key
from core.logs import log_event
from cutover.outcome import CutoverAborted
from streams.closing import close_within
from streams.events import decode_key
from streams.fence import FenceReader, FenceTimeout, fence_consumer
from streams.topics import TopicNames, committed_offsets

log = logging.getLogger("stream_osc.cutover")

PRE_DRAIN_PASSES = 5          # catch-up passes before the lock, at most
PRE_DRAIN_TIMEOUT_S = 30.0    # a fence not captured by then means capture is stalled: retry the attempt later
PRE_DRAIN_ENOUGH_KEYS = 50    # a pass with no more keys than this, and no longer than
PRE_DRAIN_ENOUGH_S = 0.25     # this, leaves little enough for the locked drain
PRE_DRAIN_MIN_SHRINK = 0.7    # a pass must leave at most this share of the previous one's keys to go on


class FenceDrain:
    """One migration's fence consumer, kept for every attempt, and the drains that read to a fence."""

    def __init__(self, ctx: RunContext, names: TopicNames, partitions: int) -> None:
        self.ctx = ctx
        self.names = names
        self.partitions = partitions
        self._fence: tuple[Consumer, FenceReader] | None = None

    def reader(self) -> tuple[Consumer, FenceReader]:
        """The fence consumer and its reader, made once and kept for every attempt: a new consumer's first
        read waits for its connection (measured: about 0.8 s), which would follow every wait for a holder."""
        if self._fence is None:
            consumer = fence_consumer(self.ctx.endpoints.kafka, self.ctx.migration.group_id)
            try:
                self._fence = consumer, FenceReader(consumer, self.names.changes, self.partitions)
            except BaseException:
                close_within(consumer, "fence")
                raise
        return self._fence

    def close(self) -> None:
        """Close the fence consumer, if one was made."""
        if self._fence is not None:
            close_within(self._fence[0], "fence")
            self._fence = None

    def drain(self, conn: pymysql.connections.Connection, reader: FenceReader, start: dict[int, int], token: str,
               timeout: float, in_transaction: bool,
               target: pymysql.connections.Connection | None = None) -> tuple[dict[int, int], int]:
        """Fence, read to the fence in every partition, re-copy the keys seen (into `target` when the new table is
        on another server); (positions, keys)."""
        positions, keys = self.drain_keys(conn, reader, start, token, timeout, in_transaction, target)
        return positions, len(keys)

    def drain_keys(self, conn: pymysql.connections.Connection, reader: FenceReader, start: dict[int, int],
                    token: str, timeout: float, in_transaction: bool,
                    target: pymysql.connections.Connection | None) -> tuple[dict[int, int], set[Key]]:
        """drain, returning the keys re-copied."""
        self.ctx.store(conn).write_fence(self.ctx.migration.id, token)
        keys: set[Key] = set()
        pk = self.ctx.pair.pk

        def collect(raw: bytes) -> None:
            change = decode_key(raw, pk)
            if change is not None and change.pk is not None:
                keys.add(change.pk)

        started = time.monotonic()
        positions = reader.read(start, token, timeout, collect)
        read_at = time.monotonic()
        if in_transaction:   # others write meanwhile: a locking read may wait for them, or be a deadlock's victim
            keys = with_retry(lambda: with_zero_date_rows(conn, self.ctx.pair, keys, target))
            with_retry(lambda: recopy_keys(conn, self.ctx.pair, keys, target=target))
        else:
            keys = with_zero_date_rows(conn, self.ctx.pair, keys, target)
            recopy_keys(conn, self.ctx.pair, keys, in_transaction=False, target=target)
        log_event(log, "drained to fence", logging.DEBUG, fence=token, keys=len(keys),
                  read_ms=round((read_at - started) * 1000, 1), recopy_ms=round((time.monotonic() - read_at) * 1000, 1))
        return positions, keys

    def catch_up(self, lock_conn: pymysql.connections.Connection, reader: FenceReader,
                  consumer, target: pymysql.connections.Connection | None = None) -> dict[int, int]:
        """Drain without the lock, so that only the last moment's changes remain for the window.

        Each pass drains what arrived during the one before, until few keys are left. A pass is short
        enough when it re-copied few keys and took little time (the changes made during a pass are
        what the next one, or the locked drain, has to handle). A pass that did not shrink the work
        much shows the fence's round trip is the floor: stop there. Returns the positions reached.
        """
        start = committed_offsets(consumer, self.names.changes, self.partitions)
        previous_keys: int | None = None
        for _ in range(PRE_DRAIN_PASSES):
            pass_started = time.monotonic()
            try:
                start, keys = self.drain(lock_conn, reader, start, f"pre-{uuid.uuid4().hex[:12]}",
                                          PRE_DRAIN_TIMEOUT_S, True, target)
            except FenceTimeout as exc:
                raise CutoverAborted(f"change capture is behind: {exc}") from None
            if keys <= PRE_DRAIN_ENOUGH_KEYS and time.monotonic() - pass_started <= PRE_DRAIN_ENOUGH_S:
                break
            if previous_keys is not None and keys > previous_keys * PRE_DRAIN_MIN_SHRINK:
                break
            previous_keys = keys
        return start
