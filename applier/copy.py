"""Bulk copy: chunk workers copy PK ranges with INSERT … SELECT in batches (docs/invariants.md, 3, 6 and 9)."""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import partial

import pymysql
import redis

from applier.apply import bound_lock_waits
from applier.chunks import ChunkQueue, next_boundary
from applier.conflicts import ROUNDS, ConstraintCheck, primary_key_race, with_refusals_resolved
from applier.recopy import PK_RACE_RETRIES, recopy_keys, with_retry
from applier.remote import CollidingKeys, kept_colliding, read_rows, write_rows
from core.context import RunContext
from core.db import query, query_count
from core.keys import Key, dump_key
from core.logs import log_event
from applier.pacing import BatchSizer
from core.table import TablePair

log = logging.getLogger("stream_osc.copy")

# A worker that finds every pending chunk leased looks again this often. The copy ends when its last worker
# has seen none pending, so this is also how long a copy may outlast its last chunk (0.5 s was measured as
# 0.38 s of the stage's end); each look is a few Redis commands.
CLAIM_RETRY_S = 0.1


class LeaseLost(Exception):
    """Another worker took over this chunk."""


def publish_range(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: Key | None,
                  hi: Key | None) -> None:
    """Commit the range `[lo, hi)` a batch of the chunk is about to read, before its read: an applier waits
    for the batch only for rows inside it (applier/uncopied.py). The batch's commit closes it; a batch that
    does not commit leaves it open until the chunk's next batch publishes. `conn` is in autocommit."""
    query(conn, f"UPDATE {ctx.store(conn).t('chunks')} SET batch_open=1, batch_end=%s WHERE migration_id=%s "
                "AND chunk_no=%s AND next_key <=> %s AND NOT done",
          (dump_key(hi), ctx.migration.id, chunk_no, dump_key(lo)))


def hold_chunk(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: Key | None,
               hi: Key | None) -> None:
    """Lock the chunk's row for the batch, before its read, if the chunk is still at `lo` and the published
    range still ends at `hi`: a worker that lost the chunk, or whose range another worker has published over
    since, gives up (an applier that saw the other range would not wait for this batch)."""
    if query(conn, f"SELECT 1 FROM {ctx.store(conn).t('chunks')} WHERE migration_id=%s AND chunk_no=%s "
                   "AND next_key <=> %s AND batch_open AND batch_end <=> %s AND NOT done FOR UPDATE",
             (ctx.migration.id, chunk_no, dump_key(lo), dump_key(hi))) != [(1,)]:
        raise LeaseLost(f"chunk {chunk_no} moved on without us")


def copy_batch(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: Key | None,
               hi: Key | None, last: bool, target: pymysql.connections.Connection | None = None) -> int:
    """Copy the keys [lo, hi) up to the largest key at init (the plan's last chunk is open-ended: keys
    written since, such as rows the application keeps moving to new keys, arrive as changes and must not
    race the copy) and advance the chunk's durable position to `hi` in the same transaction.

    A plain INSERT: a row the new table refuses is never hidden or allowed to delete another
    (invariants 6 and 9). The refusal is then decided by the server (applier/conflicts.py): rules the
    source's current rows really break stop the migration (ConstraintViolated); a stale row copied
    earlier, whose change is in the topic, is removed and the batch written again, from the rows checked
    (ConstraintCheck.write_checked).

    A new table on another server is written through `target` (_copy_batch_remote).
    """
    if ctx.pair.remote:
        assert target is not None, "a new table on another server is written through its own session"
        return _copy_batch_remote(conn, target, ctx, chunk_no, lo, hi, last)

    def still_ours() -> None:
        """Before the careful rounds: a chunk that moved on has its rows in, copied by another worker."""
        if query(conn, f"SELECT 1 FROM {ctx.store(conn).t('chunks')} WHERE migration_id=%s AND chunk_no=%s "
                       "AND next_key <=> %s AND NOT done", (ctx.migration.id, chunk_no, dump_key(lo))) != [(1,)]:
            raise LeaseLost(f"chunk {chunk_no} moved on without us")

    for attempt in range(PK_RACE_RETRIES):
        try:
            return with_refusals_resolved(conn, ctx.pair,
                                          lambda constraint_check: _copy_batch(conn, ctx, chunk_no, lo, hi, last,
                                                                            constraint_check),
                                          during_apply=False, rounds=ROUNDS, before_constraint_check=still_ours)
        except pymysql.err.MySQLError as exc:   # an applier wrote a key of the range after the batch's DELETE
            if not primary_key_race(exc) or attempt == PK_RACE_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _copy_batch(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: Key | None,
                hi: Key | None, last: bool, constraint_check: ConstraintCheck | None) -> int:
    """One transaction of copy_batch; with a ConstraintCheck, the stale rows colliding with the batch's are removed
    (or the batch's rows refused) before the insert.

    The batch's range is published and the chunk's row locked first, before the read's snapshot: an applier
    that asks about a row in the range waits for the batch's commit (applier/uncopied.py). The new table's
    rows in the range are deleted before the insert: an applier writes a key there when its row came back
    after the applier found it missing, or when the change key differs from the row's key only as its
    collation allows (the check's answer is the row's key), and the batch's read is the newer (a change after
    it is applied after the batch). A re-copy that writes such a key between the batch's DELETE and its INSERT
    makes the INSERT meet it on the primary key: the batch is rolled back and written again (copy_batch).
    """
    pair, store = ctx.pair, ctx.store(conn)
    where, params = pair.pk.in_range(lo, hi, ctx.migration.copy_until)
    publish_range(conn, ctx, chunk_no, lo, hi)
    conn.begin()
    try:
        hold_chunk(conn, ctx, chunk_no, lo, hi)
        query(conn, f"DELETE FROM {pair.target_name} WHERE {where}", params)
        if constraint_check is None:
            rows = query_count(conn, f"INSERT INTO {pair.target_name} ({pair.target_column_list}) "
                                     f"SELECT {pair.source_column_list} FROM {pair.source_name} WHERE {where}", params)
        else:
            keys = [tuple(r) for r in query(conn, f"SELECT {pair.pk.column_list()} FROM {pair.source_name} "
                                                  f"WHERE {where}", params)]
            removed = constraint_check.remove_stale_collisions(keys)
            if removed:
                log_event(log, "stale copied rows collided under a UNIQUE key; removed, their changes are applied "
                               "later", chunk=chunk_no, rows=removed)
            rows = constraint_check.write_checked()
        moved = query_count(conn, f"UPDATE {store.t('chunks')} SET next_key=%s, rows_copied=rows_copied+%s, "
                                  "done=%s, batch_open=0 WHERE migration_id=%s AND chunk_no=%s AND next_key <=> %s "
                                  "AND NOT done",
                            (dump_key(hi), rows, int(last), ctx.migration.id, chunk_no, dump_key(lo)))
        if not moved:
            raise LeaseLost(f"chunk {chunk_no} moved on without us")
        conn.commit()
        return rows
    except BaseException:
        conn.rollback()
        raise


def _copy_batch_remote(conn: pymysql.connections.Connection, target: pymysql.connections.Connection,
                       ctx: RunContext, chunk_no: int, lo: Key | None, hi: Key | None, last: bool) -> int:
    """copy_batch for a new table on another server, where rows and progress cannot share a transaction.

    The chunk's row is locked (FOR UPDATE, still at `lo` and not done) for the whole batch: a worker that
    lost the chunk cannot write the target after its new owner moved on. The target transaction deletes the
    range and inserts the rows read (applier/remote.py), so a batch whose progress was lost to a crash after
    the target's commit is written again, not twice; the progress commits after the rows.

    Rows of the target outside the range that the batch collides with under a UNIQUE key are re-copied as an
    applier re-copies a key, outside the batch's transaction (their current rows, locked on the source until
    the target has committed them), and the batch is written again. Nothing holds such a row for the batch: a
    plain read of it written with the batch could land after an applier's write of a newer version, and no
    change would be left to correct it.
    """
    pair = ctx.pair
    where, params = pair.pk.in_range(lo, hi, ctx.migration.copy_until)
    refusal: pymysql.err.MySQLError | None = None
    for _ in range(ROUNDS):
        try:
            return _write_batch_remote(conn, target, ctx, chunk_no, lo, hi, last, where, params)
        except CollidingKeys as colliding:
            refusal = colliding.refusal
            log_event(log, "rows of the target collided with a copy batch under a UNIQUE key; re-copied from the "
                           "source, the batch written again", chunk=chunk_no, rows=len(colliding.keys))
            recopy_as_an_applier(conn, pair, colliding.keys, target, ctx.stop)
    assert refusal is not None
    raise kept_colliding(pair, refusal, during_apply=False)


def recopy_as_an_applier(conn: pymysql.connections.Connection, pair: TablePair, keys: list[Key],
                         target: pymysql.connections.Connection, stop: threading.Event) -> None:
    """recopy_keys in a copy worker's session, its row-lock waits bounded as an applier's are (applier_session):
    the re-copy share-locks application rows, which a copy batch never does, and a session cut while it waits
    would keep the locks it took until its wait ends."""
    bound_lock_waits(conn)
    try:
        with_retry(partial(recopy_keys, conn, pair, keys, target=target), stop=stop)
    finally:
        bound_lock_waits(conn, None)


def _write_batch_remote(conn: pymysql.connections.Connection, target: pymysql.connections.Connection,
                        ctx: RunContext, chunk_no: int, lo: Key | None, hi: Key | None, last: bool, where: str,
                        params: list) -> int:
    """One attempt of _copy_batch_remote; CollidingKeys when the target's rows outside the range are in the way."""
    pair, store = ctx.pair, ctx.store(conn)
    publish_range(conn, ctx, chunk_no, lo, hi)
    conn.begin()
    try:
        hold_chunk(conn, ctx, chunk_no, lo, hi)
        rows = read_rows(conn, pair, where, params)
        write_rows(target, pair, where, params, rows, during_apply=False)
        query(conn, f"UPDATE {store.t('chunks')} SET next_key=%s, rows_copied=rows_copied+%s, done=%s, "
                    "batch_open=0 WHERE migration_id=%s AND chunk_no=%s",
              (dump_key(hi), len(rows), int(last), ctx.migration.id, chunk_no))
        conn.commit()
        return len(rows)
    except BaseException:
        conn.rollback()
        raise


DEADLOCK = 1213
BATCH_ATTEMPTS = 5   # a batch the server chose as a deadlock's victim this many times in a row: the run restarts


def copy_batch_past_deadlocks(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: Key | None,
                              hi: Key | None, last: bool, target: pymysql.connections.Connection | None,
                              renew: Callable[[], None]) -> int:
    """copy_batch, written again when the server rolled it back whole as a deadlock's victim (an applier's
    insert and the batch's each checking a UNIQUE entry the other deleted), its lease renewed in between.

    Left to the run's restart, each deadlock cost 2, 4, 8 … s of backoff, and eight in a row stopped the
    migration. A lock wait timeout is not retried here: a batch waits only on the tool's own short
    transactions, so one means something else holds a lock, which the restart's backoff lets go (the
    re-copy of target rows a batch to another server collides with waits as an applier does).
    """
    for attempt in range(BATCH_ATTEMPTS):
        try:
            return copy_batch(conn, ctx, chunk_no, lo, hi, last, target=target)
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != DEADLOCK or attempt == BATCH_ATTEMPTS - 1:
                raise
        log_event(log, "copy batch rolled back as a deadlock's victim; written again", logging.DEBUG,
                  chunk=chunk_no, attempt=attempt + 1)
        time.sleep(0.05 * 2 ** attempt)
        renew()
    raise AssertionError("unreachable")


def copy_chunk(conn: pymysql.connections.Connection, ctx: RunContext, queue: ChunkQueue, chunk_no: int,
               sizer: BatchSizer, target: pymysql.connections.Connection | None = None) -> int:
    """Copy one chunk from its last committed batch onward, in batches sized by `sizer`, each run while
    holding one of the places the application's latency allows (throttle/yielding.py); returns rows copied now."""
    chunk = ctx.store(conn).find_chunk(ctx.migration.id, chunk_no)
    position, done = chunk.next, chunk.done
    copied = 0

    def renew() -> None:
        if not queue.renew(chunk_no):
            raise LeaseLost(f"lease of chunk {chunk_no} expired")

    def keep_lease() -> None:
        """Renew while waiting (paused, or for a place); if Redis does not answer, the lease may lapse, and the
        renewal before the next batch says so."""
        try:
            renew()
        except redis.RedisError as exc:
            log_event(log, "chunk lease not renewed while waiting", logging.DEBUG, chunk=chunk_no, reason=str(exc))

    while not done:
        if not ctx.wait_while_paused_or_throttled(conn, while_paused=keep_lease):
            return copied
        with ctx.yielding.turn(ctx.stop.is_set, waiting=keep_lease) as allowed:
            # a pause set while this worker waited for its turn holds it here, before the batch
            if not allowed or not ctx.wait_while_paused_or_throttled(conn, while_paused=keep_lease):
                return copied
            renew()
            sizer.restart(ctx.spec.batch_size, ctx.spec.target_batch_s())
            began = time.monotonic()
            boundary = next_boundary(conn, ctx.pair.source_name, ctx.pair.pk, position, chunk.end, sizer.rows(),
                                     ctx.migration.copy_until)
            done = boundary is None
            hi = chunk.end if done else boundary
            rows = copy_batch_past_deadlocks(conn, ctx, chunk_no, position, hi, done, target, renew)
            sizer.observe(rows, time.monotonic() - began, ctx.yielding.time_scale)
        copied += rows
        position = hi
    queue.finish(chunk_no)
    return copied


def copy_worker(ctx: RunContext, worker_no: int) -> None:
    """Claim and copy chunks until none is pending or the run stops."""
    conn = ctx.db(autocommit=True)
    target = ctx.target_db() if ctx.pair.remote else None
    queue = ChunkQueue(ctx.redis(), ctx.migration.id)
    sizer = BatchSizer(ctx.spec.batch_size, ctx.spec.target_batch_s())
    try:
        while not ctx.stop.is_set():
            if not ctx.wait_while_paused_or_throttled(conn):
                return
            chunk_no = queue.claim()
            if chunk_no is None:
                if queue.pending_count() == 0:
                    return
                ctx.stop.wait(CLAIM_RETRY_S)  # the rest is leased by other workers; a dead one's lease expires
                continue
            try:
                rows = copy_chunk(conn, ctx, queue, chunk_no, sizer, target)
                log_event(log, "chunk copied", worker=worker_no, chunk=chunk_no, rows=rows)
            except LeaseLost as exc:
                log_event(log, "chunk given up", logging.WARNING, worker=worker_no, reason=str(exc))
            finally:
                queue.release(chunk_no)
    finally:
        conn.close()
        if target is not None:
            target.close()
