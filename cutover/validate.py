"""Validation: checksums of source and new table per PK range; differing rows are re-copied and re-checked."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import pymysql

from applier.recopy import recopy_keys, with_retry
from applier.table import TablePair
from migration.context import RunContext
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
    for col in pair.shared_columns:
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


def validate_range(ctx: RunContext, lo: int, hi: int) -> int:
    """Check one range, re-copying differences until clean; returns how many rows were repaired."""
    conn = ctx.db()
    repaired = 0
    try:
        for _ in range(ROUNDS):
            diff = differing_keys(conn, ctx.pair, lo, hi)
            if not diff:
                return repaired
            repaired += len(diff)
            with_retry(lambda: recopy_keys(conn, ctx.pair, diff))
        still = differing_keys(conn, ctx.pair, lo, hi)
        if still:
            raise ValidationFailed(
                f"{len(still)} rows of {ctx.spec.qualified_name} in PK range {lo}..{hi} still differ after "
                f"{ROUNDS} re-copies (e.g. {sorted(still)[:5]}); the ALTER may change values (lossy type "
                "change) or make rows collide on a UNIQUE key")
        return repaired
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
        step = max(ctx.spec.chunk_size, 1)
        ranges += [(lo, min(lo + step - 1, top)) for lo in range(covered_hi + 1, top + 1, step)]
    return ranges


def validate(ctx: RunContext) -> int:
    """Validate every range in parallel; returns rows repaired (0 means the copy was already exact)."""
    conn = ctx.db()
    try:
        ranges = validation_ranges(conn, ctx)
    finally:
        conn.close()
    with ThreadPoolExecutor(max_workers=ctx.spec.copy_workers) as pool:
        repaired = sum(pool.map(lambda r: validate_range(ctx, *r), ranges))
    log_event(log, "validation done", ranges=len(ranges), repaired=repaired)
    return repaired
