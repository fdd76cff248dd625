"""Validation: checksums of source and new table per PK range; differing rows are re-copied and re-checked."""
from __future__ import annotations

import logging
import queue
from concurrent.futures import ThreadPoolExecutor

import pymysql

from applier.chunks import key_ranges
from applier.recopy import recopy_keys, with_retry
from applier.table import TablePair
from migration.context import RunContext, WorkStopped
from migration.db import query, quote_ident, scalar
from migration.logs import log_event

log = logging.getLogger("stream_osc.validate")

ROUNDS = 5


class ValidationFailed(Exception):
    """Rows still differ after repeated re-copies."""

    user_facing = True


def row_hash_sql(pair: TablePair) -> str:
    """CRC32 of a row's shared columns, NULL-safe and independent of column charset."""
    parts = []
    for col in pair.target_columns:
        ident = quote_ident(col)
        parts.append(f"ISNULL({ident})")
        parts.append(f"CONVERT({ident} USING utf8mb4)")
    return f"CRC32(CONCAT_WS('#', {', '.join(parts)}))"


def range_checksum(conn: pymysql.connections.Connection, table: str, pair: TablePair, lo: int, hi: int) -> tuple:
    """(row count, xor of row hashes) of one table over PKs [lo, hi]."""
    return tuple(query(conn, f"SELECT COUNT(*), COALESCE(BIT_XOR({row_hash_sql(pair)}), 0) FROM {table} "
                             f"WHERE {pair.pk_ident} BETWEEN %s AND %s", (lo, hi))[0])


def row_hashes(conn: pymysql.connections.Connection, table: str, pair: TablePair, lo: int, hi: int) -> dict[int, int]:
    return dict(query(conn, f"SELECT {pair.pk_ident}, {row_hash_sql(pair)} FROM {table} "
                            f"WHERE {pair.pk_ident} BETWEEN %s AND %s", (lo, hi)))


def differing_keys(conn: pymysql.connections.Connection, pair: TablePair, lo: int, hi: int) -> set[int]:
    """PKs in [lo, hi] whose rows differ between source and new table (or exist in only one)."""
    if range_checksum(conn, pair.source_name, pair, lo, hi) == range_checksum(conn, pair.target_name, pair, lo, hi):
        return set()
    source = row_hashes(conn, pair.source_name, pair, lo, hi)
    target = row_hashes(conn, pair.target_name, pair, lo, hi)
    return {k for k in source.keys() | target.keys() if source.get(k) != target.get(k)}


def describe_difference(conn: pymysql.connections.Connection, pair: TablePair, key: int) -> str:
    """Which shared columns of one row differ between source and new table."""
    select = f"SELECT {pair.target_column_list} FROM {{}} WHERE {pair.pk_ident}=%s"
    source = query(conn, select.format(pair.source_name), (key,))
    target = query(conn, select.format(pair.target_name), (key,))
    if not source or not target:
        return "missing from the " + ("new" if source else "original") + " table"
    columns = [c for c, a, b in zip(pair.target_columns, source[0], target[0]) if a != b]
    return "columns differ: " + ", ".join(columns) if columns else "same values, different bytes (charset?)"


def still_different(conn: pymysql.connections.Connection, pair: TablePair, keys: set[int]) -> set[int]:
    """The keys among `keys` whose rows differ right now."""
    marks = ", ".join(["%s"] * len(keys))
    hashes = f"SELECT {pair.pk_ident}, {row_hash_sql(pair)} FROM {{}} WHERE {pair.pk_ident} IN ({marks})"
    source = dict(query(conn, hashes.format(pair.source_name), sorted(keys)))
    target = dict(query(conn, hashes.format(pair.target_name), sorted(keys)))
    return {k for k in keys if source.get(k) != target.get(k)}


def validate_range(ctx: RunContext, lo: int, hi: int, snapshots: queue.Queue | None = None) -> int:
    """Check one range; re-copy differing rows and re-check them until they match. Returns rows repaired.

    With `snapshots` (sessions holding one consistent snapshot in which the new table equals the
    source), the range is compared in a snapshot, so a difference is a real one. Without, it is
    compared live: under traffic new differences keep appearing (the appliers and the cutover drain
    handle those), and what must not happen is a row that still differs right after being re-copied.
    """
    conn = ctx.db()
    try:
        if not ctx.wait_while_paused_or_throttled(conn):
            raise WorkStopped(f"validation of {ctx.spec.qualified_name} stopped")
        if snapshots is None:
            diff = differing_keys(conn, ctx.pair, lo, hi)
        else:
            session = snapshots.get()
            try:
                diff = differing_keys(session, ctx.pair, lo, hi)
            finally:
                snapshots.put(session)
        repaired = len(diff)
        for _ in range(ROUNDS):
            if not diff:
                return repaired
            with_retry(lambda: recopy_keys(conn, ctx.pair, diff))
            diff = still_different(conn, ctx.pair, diff)
        key = min(diff)
        raise ValidationFailed(
            f"{len(diff)} rows of {ctx.spec.qualified_name} in PK range {lo}..{hi} still differ right after "
            f"{ROUNDS} re-copies; first {ctx.pair.pk}={key}: {describe_difference(conn, ctx.pair, key)}. "
            "The ALTER may change values (a lossy type change) or make rows collide on a UNIQUE key")
    finally:
        conn.close()


def validation_ranges(conn: pymysql.connections.Connection, ctx: RunContext) -> list[tuple[int, int]]:
    """The copy chunks plus everything above them (rows inserted since the copy started)."""
    ranges = [(start, end) for _, start, end, *_ in ctx.store(conn).chunks(ctx.migration.id)]
    top = max(scalar(conn, f"SELECT COALESCE(MAX({ctx.pair.pk_ident}), 0) FROM {ctx.pair.source_name}") or 0,
              scalar(conn, f"SELECT COALESCE(MAX({ctx.pair.pk_ident}), 0) FROM {ctx.pair.target_name}") or 0)
    low = min(scalar(conn, f"SELECT COALESCE(MIN({ctx.pair.pk_ident}), 0) FROM {ctx.pair.source_name}") or 0,
              scalar(conn, f"SELECT COALESCE(MIN({ctx.pair.pk_ident}), 0) FROM {ctx.pair.target_name}") or 0)
    covered_hi = ranges[-1][1] if ranges else low - 1
    covered_lo = ranges[0][0] if ranges else low
    if low < covered_lo:
        ranges.insert(0, (low, covered_lo - 1))
    if top > covered_hi:
        ranges += key_ranges(conn, ctx.pair.source_name, ctx.pair.pk_ident, covered_hi + 1, top, ctx.spec.chunk_size)
    return ranges


def validate(ctx: RunContext, snapshots: list[pymysql.connections.Connection] | None = None) -> int:
    """Validate every range in parallel (in the given snapshot sessions, if any); returns rows repaired."""
    conn = ctx.db()
    try:
        ranges = validation_ranges(conn, ctx)
    finally:
        conn.close()
    sessions: queue.Queue | None = None
    if snapshots:
        sessions = queue.Queue()
        for session in snapshots:
            sessions.put(session)
    workers = len(snapshots) if snapshots else ctx.spec.copy_workers
    with ThreadPoolExecutor(max_workers=workers) as pool:
        repaired = sum(pool.map(lambda r: validate_range(ctx, *r, sessions), ranges))
    log_event(log, "validation done", ranges=len(ranges), repaired=repaired, in_snapshot=bool(snapshots))
    return repaired
