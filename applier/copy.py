"""Bulk copy: chunk workers copy PK ranges with INSERT … SELECT in batches (invariants 3 and 6)."""
from __future__ import annotations

import logging

import pymysql

from applier.chunks import ChunkQueue, next_boundary
from applier.table import TablePair, unique_keys_of
from migration.context import RunContext
from migration.db import query, quote_ident
from migration.logs import log_event

log = logging.getLogger("stream_osc.copy")


class DuplicateKeyInSource(Exception):
    """The ALTER adds a UNIQUE key that the table's data violates."""

    user_facing = True


class LeaseLost(Exception):
    """Another worker took over this chunk."""


def find_source_duplicate(conn: pymysql.connections.Connection, pair: TablePair, lo: int, hi: int) -> str | None:
    """Describe a UNIQUE key of the new table violated by source rows in [lo, hi], or None."""
    for name, cols in unique_keys_of(conn, pair.database, pair.target).items():
        if not all(c in pair.target_columns for c in cols):
            continue
        tup = ", ".join(quote_ident(c) for c in cols)
        rows = query(conn, f"SELECT {tup}, COUNT(*) FROM {pair.source_name} WHERE ({tup}) IN "
                           f"(SELECT {tup} FROM {pair.source_name} WHERE {pair.pk_ident} BETWEEN %s AND %s) "
                           f"GROUP BY {tup} HAVING COUNT(*) > 1 LIMIT 1", (lo, hi))
        if rows:
            value = ", ".join(repr(v) for v in rows[0][:-1])
            return (f"the ALTER adds UNIQUE key {name!r} ({', '.join(cols)}) but {rows[0][-1]} rows of "
                    f"{pair.database}.{pair.source} share the value ({value})")
    return None


def copy_batch(conn: pymysql.connections.Connection, ctx: RunContext, chunk_no: int, lo: int, hi: int,
               last: bool) -> int:
    """Copy PKs [lo, hi] and advance the chunk's durable position in the same transaction."""
    pair, store = ctx.pair, ctx.store(conn)
    for verb in ("INSERT", "REPLACE"):
        conn.begin()
        try:
            with conn.cursor() as cur:
                rows = cur.execute(f"{verb} INTO {pair.target_name} ({pair.target_column_list}) SELECT {pair.source_column_list} "
                                   f"FROM {pair.source_name} WHERE {pair.pk_ident} BETWEEN %s AND %s", (lo, hi))
                moved = cur.execute(f"UPDATE {store.t('chunks')} SET next_pk=%s, rows_copied=rows_copied+%s, "
                                    "done=%s WHERE migration_id=%s AND chunk_no=%s AND next_pk=%s",
                                    (hi + 1, rows, int(last), ctx.migration.id, chunk_no, lo))
            if not moved:
                conn.rollback()
                raise LeaseLost(f"chunk {chunk_no} moved on without us")
            conn.commit()
            return rows
        except pymysql.err.IntegrityError as exc:
            conn.rollback()
            if exc.args[0] != 1062 or verb == "REPLACE":
                raise
            # A UNIQUE conflict is either real (the source has duplicates: fail like the ALTER would)
            # or with a stale row already copied whose change is in the topic (replace it; apply fixes it).
            problem = find_source_duplicate(conn, pair, lo, hi)
            if problem:
                raise DuplicateKeyInSource(problem) from None
            log_event(log, "unique conflict with a stale copied row; batch replaced", chunk=chunk_no, lo=lo, hi=hi)
    raise AssertionError("unreachable")


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
