"""Bulk copy: chunk workers copy PK ranges with INSERT … SELECT in batches (docs/invariants.md, 3, 6 and 9)."""
from __future__ import annotations

import logging

import pymysql

from applier.chunks import ChunkQueue, next_boundary
from applier.conflicts import Probe, with_refusals_resolved
from core.context import RunContext
from core.db import query
from core.logs import log_event

log = logging.getLogger("stream_osc.copy")


class LeaseLost(Exception):
    """Another worker took over this chunk."""


COPY_ROUNDS = 10   # batches that meet a refusal: each round re-reads the source and decides again


def copy_batch(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: int, hi: int,
               last: bool) -> int:
    """Copy PKs [lo, hi] and advance the chunk's durable position in the same transaction.

    A plain INSERT: a row the new table refuses is never hidden or allowed to delete another
    (invariants 6 and 9). The refusal is then decided by the server (applier/conflicts.py): rules the
    source's current rows really break stop the migration (ConstraintViolated); a stale row copied
    earlier, whose change is in the topic, is removed and the batch written again.
    """
    def still_ours() -> None:
        """Before the careful rounds: a chunk that moved on has its rows in, copied by another worker."""
        if query(conn, f"SELECT next_pk FROM {ctx.store(conn).t('chunks')} WHERE migration_id=%s AND chunk_no=%s",
                 (ctx.migration.id, chunk_no)) != [(lo,)]:
            raise LeaseLost(f"chunk {chunk_no} moved on without us")

    return with_refusals_resolved(conn, ctx.pair, lambda probe: _copy_batch(conn, ctx, chunk_no, lo, hi, last, probe),
                                  during_apply=False, rounds=COPY_ROUNDS, before_probe=still_ours)


def _copy_batch(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: int, hi: int,
                last: bool, probe: Probe | None) -> int:
    """One transaction of copy_batch; with a probe, the way is cleared (or refused) before the insert."""
    pair, store = ctx.pair, ctx.store(conn)
    conn.begin()
    try:
        if probe is not None:
            keys = [r[0] for r in query(conn, f"SELECT {pair.pk_ident} FROM {pair.source_name} "
                                              f"WHERE {pair.pk_ident} BETWEEN %s AND %s", (lo, hi))]
            removed = probe.clear_way(keys)
            if removed:
                log_event(log, "stale copied rows collided under a UNIQUE key; removed, their changes are applied "
                               "later", chunk=chunk_no, lo=lo, hi=hi, rows=removed)
        with conn.cursor() as cur:
            rows = cur.execute(f"INSERT INTO {pair.target_name} ({pair.target_column_list}) "
                               f"SELECT {pair.source_column_list} "
                               f"FROM {pair.source_name} WHERE {pair.pk_ident} BETWEEN %s AND %s", (lo, hi))
            moved = cur.execute(f"UPDATE {store.t('chunks')} SET next_pk=%s, rows_copied=rows_copied+%s, "
                                "done=%s WHERE migration_id=%s AND chunk_no=%s AND next_pk=%s",
                                (hi + 1, rows, int(last), ctx.migration.id, chunk_no, lo))
        if not moved:
            raise LeaseLost(f"chunk {chunk_no} moved on without us")
        conn.commit()
        return rows
    except BaseException:
        conn.rollback()
        raise


def copy_chunk(conn: pymysql.connections.Connection, ctx: RunContext, queue: ChunkQueue, chunk_no: int) -> int:
    """Copy one chunk from its last committed batch onward; returns rows copied now."""
    store = ctx.store(conn)
    start, end, next_pk, done = query(conn, f"SELECT start_pk, end_pk, next_pk, done FROM {store.t('chunks')} "
                                            "WHERE migration_id=%s AND chunk_no=%s", (ctx.migration.id, chunk_no))[0]
    copied = 0
    while not done and next_pk <= end:
        if not ctx.wait_while_paused_or_throttled(conn):
            return copied
        if not queue.renew(chunk_no):
            raise LeaseLost(f"lease of chunk {chunk_no} expired")
        boundary = next_boundary(conn, ctx.pair.source_name, ctx.pair.pk_ident, next_pk, end, ctx.spec.batch_size)
        hi = end if boundary is None else boundary - 1
        copied += copy_batch(conn, ctx, chunk_no, next_pk, hi, last=hi == end)
        next_pk = hi + 1
    if next_pk > end or done:
        queue.finish(chunk_no)
    return copied


def copy_worker(ctx: RunContext, worker_no: int) -> None:
    """Claim and copy chunks until none is pending or the run stops."""
    conn = ctx.db(autocommit=True)
    queue = ChunkQueue(ctx.redis(), ctx.migration.id)
    try:
        while not ctx.stop.is_set():
            if not ctx.wait_while_paused_or_throttled(conn):
                return
            chunk_no = queue.claim()
            if chunk_no is None:
                if queue.pending_count() == 0:
                    return
                ctx.stop.wait(0.5)  # the rest is leased by other workers; a dead one's lease expires
                continue
            try:
                rows = copy_chunk(conn, ctx, queue, chunk_no)
                log_event(log, "chunk copied", worker=worker_no, chunk=chunk_no, rows=rows)
            except LeaseLost as exc:
                log_event(log, "chunk given up", logging.WARNING, worker=worker_no, reason=str(exc))
            finally:
                queue.release(chunk_no)
    finally:
        conn.close()
