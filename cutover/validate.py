"""Validation: checksums of source and new table per PK range; differing rows are re-copied and re-checked.

What a checksum must get right (docs/invariants.md, 9: the reason validation exists at all):
- columns are compared as mapped by the ALTER (source name on the source side, new name on the new side);
- values compare in the new column's type: the source value is converted as the copy converts it (a
  widening ALTER such as DECIMAL(12,2) -> DECIMAL(14,4) or latin1 -> utf8mb4 compares equal);
- binary data is hashed as bytes; each column is reduced on its own to its CRC32 (digits) or a marker
  letter, joined by commas that none of them holds, so no value can make two different rows look alike,
  and NULL, '' and a value the conversion rejects are told apart;
- a row's hash h is the CRC32 of that text: one differing column is missed if its own CRC32 collides (or,
  about as rarely, the row's), whatever then hashes the row;
- a range's checksum is the row count and the SUM of h*h. CRC32 is linear: the same change in two rows
  (old and new parts of the same length, followed by as many characters) flips the same bits D in both
  hashes; a BIT_XOR of the hashes then always stays equal, and a plain SUM whenever the two hashes differ in
  every bit of D (a value changed from 12 to 129 in two rows was missed one time in eight). Squares do not
  cancel so: (a^D)^2 + (b^D)^2 = a^2 + b^2 holds when the rows trade hashes (b = a^D) and for a few other
  pairs, odds about 2^-32. An MD5 of the text (used before) did not cancel either, at 1.6 times the cost
  (sysbench rows, one side, 300,000 rows: 0.42 s against 0.26 s). A SUM of CRC32(h), which reads the row's
  hash once and costs about a third less, is not enough: h^1 differs from h only in the low bit of its last
  decimal digit, so CRC32(h^1) = CRC32(h) ^ 0x77073096 for every h, and such a pair cancels one time in 2^15.
"""
from __future__ import annotations

import logging
import queue
import re
from collections import Counter
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import pymysql

from applier.chunks import key_ranges
from applier.recopy import recopy_keys, with_retry
from applier.zero_dates import with_zero_date_rows
from core.table import TablePair
from core.context import RunContext, WorkStopped
from core.db import query, quote_ident
from core.keys import BINARY_TYPES, INTEGER_TYPES, STRING_TYPES, Key, PrimaryKey, show_key
from core.logs import log_event

log = logging.getLogger("stream_osc.validate")

ROUNDS = 5                 # re-copies a row may need before a difference that stays is a failure
MAX_ROUNDS = 4 * ROUNDS    # repair rounds of one range (two rows that keep replacing each other take 2 per strike)
KEYS_PER_COMPARISON = 1000  # changed keys compared in one statement per side
UNMERGED = 18446744073709551615   # the largest LIMIT: no row left out, and the derived table is not merged

_TEXTS = STRING_TYPES | {"enum", "set"}
_BLOBS = BINARY_TYPES - {"binary"}
_CHARSET = re.compile(r"^[A-Za-z0-9_]+$")


def show_range(pk: PrimaryKey, lo: Key | None, hi: Key | None) -> str:
    """[lo, hi) for messages."""
    return f"[{'start' if lo is None else show_key(pk, lo)}, {'end' if hi is None else show_key(pk, hi)})"


class ValidationFailed(Exception):
    """Rows still differ after repeated re-copies."""

    user_facing = True


@dataclass(frozen=True)
class ColumnType:
    """What information_schema says about a column of the new table."""

    data_type: str
    column_type: str
    charset: str | None
    precision: int | None
    scale: int | None
    datetime_precision: int | None
    octet_length: int | None


def in_target_type(expr: str, col: ColumnType) -> str:
    """`expr` converted to the new column's type and rendered canonically (equal values, equal text or bytes).

    Applied to both sides: on the new table it changes nothing but the rendering (a DOUBLE(10,2) prints
    '1.50', a FLOAT prints 6 digits), on the source it converts the value as the copy's INSERT does.
    """
    kind = col.data_type.lower()
    if kind in INTEGER_TYPES:
        return f"CAST({expr} AS {'UNSIGNED' if 'unsigned' in col.column_type.lower() else 'SIGNED'})"
    if kind == "bit":
        return f"CAST({expr} AS UNSIGNED)"
    if kind in ("decimal", "numeric"):
        return f"CAST({expr} AS DECIMAL({col.precision},{col.scale or 0}))"
    if kind in ("float", "double", "real"):
        value = expr
        if col.scale is not None:   # FLOAT(M,D)/DOUBLE(M,D) store floor(x) + rint(fraction * 10^D) / 10^D
            value = f"(FLOOR({expr}) + ROUND(({expr} - FLOOR({expr})) * 1e{col.scale}) / 1e{col.scale})"
        if kind == "float":   # widened exactly to DOUBLE, which prints enough digits to tell floats apart
            value = f"CAST({value} AS FLOAT)"
        return f"CAST({value} AS DOUBLE)"
    if kind == "date":
        return f"CAST({expr} AS DATE)"
    if kind in ("datetime", "timestamp"):
        return f"CAST({expr} AS DATETIME({col.datetime_precision or 0}))"
    if kind == "time":
        return f"CAST({expr} AS TIME({col.datetime_precision or 0}))"
    if kind == "json":   # MySQL's JSON type (MariaDB's JSON is a LONGTEXT)
        return f"CAST({expr} AS JSON)"
    if kind == "binary":   # BINARY(n) pads with 0x00, as CAST … AS BINARY(n) does
        return f"CAST({expr} AS BINARY({col.octet_length}))"
    if kind in _BLOBS:
        return f"CAST({expr} AS BINARY)"
    if kind in _TEXTS and col.charset and _CHARSET.match(col.charset):
        text = f"CONVERT({expr} USING {col.charset})"
        return f"RTRIM({text})" if kind == "char" else text   # CHAR drops trailing spaces
    return expr   # YEAR, spatial, UUID, INET6 …: compared as the server renders them


def column_part(ident: str, col: ColumnType) -> str:
    """One column's part of the row hash: 'N' for NULL, 'E' if the conversion yields NULL, else the decimal
    CRC32 of the converted value (never a comma)."""
    return f"IF({ident} IS NULL, 'N', COALESCE(CRC32({in_target_type(ident, col)}), 'E'))"


@dataclass(frozen=True)
class RowHasher:
    """SQL hashing a row's mapped columns, per side; parts hold no comma, so joined by commas they are told apart."""

    pair: TablePair
    source_parts: tuple[str, ...]
    target_parts: tuple[str, ...]

    def table(self, source: bool) -> str:
        return self.pair.source_name if source else self.pair.target_name

    def row_sql(self, source: bool) -> str:
        parts = self.source_parts if source else self.target_parts
        return f"CRC32(CONCAT_WS(',', {', '.join(parts)}))"


Sessions = tuple[pymysql.connections.Connection, pymysql.connections.Connection | None]   # (source, target)


def row_hasher(conn: pymysql.connections.Connection, pair: TablePair) -> RowHasher:
    """Read the new table's column types (through a session of its server) and build the per-side hash
    expressions. On two servers each side's checksum is computed by its own server, with the same SQL."""
    types = {r[0].lower(): ColumnType(*r[1:]) for r in query(conn, """
        SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, NUMERIC_PRECISION, NUMERIC_SCALE,
               DATETIME_PRECISION, CHARACTER_OCTET_LENGTH
        FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s""",
        (pair.target_database or pair.database, pair.target))}
    cols = [types[t.lower()] for t in pair.target_columns]
    return RowHasher(pair,
                     tuple(column_part(quote_ident(s), c) for s, c in zip(pair.source_columns, cols)),
                     tuple(column_part(quote_ident(t), c) for t, c in zip(pair.target_columns, cols)))


def side_filter(pair: TablePair, source: bool) -> str:
    """The --where predicate on the source side: only those rows are the new table's."""
    return pair.source_filter if source else ""


def range_checksum(conn: pymysql.connections.Connection, hasher: RowHasher, source: bool, lo: Key | None,
                   hi: Key | None) -> tuple:
    """(row count, sum of the squares of the rows' hashes) of one side over the keys [lo, hi). Both factors
    are the same CRC32 (unsigned, below 2^32): the square fits an unsigned BIGINT, the SUM is exact.

    Each row's hash is computed once, in a derived table that its LIMIT keeps from being merged into the
    outer query: `SUM(h * h)` written out evaluates the whole hash expression twice per row (1M sysbench rows,
    one side: 1.04 s against 0.71 s, docs/benchmarks.md). The derived table holds one number per row of the
    range, about 2 MB at the default 100,000-row chunks; a --chunk-size of millions puts it on disk."""
    where, params = hasher.pair.pk.in_range(lo, hi)
    return tuple(query(conn, f"SELECT COUNT(*), COALESCE(SUM(h * h), 0) FROM (SELECT {hasher.row_sql(source)} AS h "
                             f"FROM {hasher.table(source)} WHERE ({where}){side_filter(hasher.pair, source)} "
                             f"LIMIT {UNMERGED}) AS hashes", params)[0])


def row_hashes(conn: pymysql.connections.Connection, hasher: RowHasher, source: bool, lo: Key | None,
               hi: Key | None) -> dict[Key, int]:
    """Key -> row hash of one side over the keys [lo, hi).

    Keys are told apart by their exact values: a row whose key differs from its copy's only in case (equal
    under the collation) shows as missing and extra, and re-copying both keys repairs it.
    """
    pk = hasher.pair.pk
    where, params = pk.in_range(lo, hi)
    return {tuple(r[:-1]): r[-1] for r in query(conn, f"SELECT {pk.column_list()}, {hasher.row_sql(source)} "
                                                      f"FROM {hasher.table(source)} WHERE ({where})"
                                                      f"{side_filter(hasher.pair, source)}", params)}


@dataclass(frozen=True)
class Differences:
    """Keys of a range whose rows differ: in both tables with other values, or in only one of them."""

    changed: set[Key]
    missing: set[Key]   # in the source, not in the new table
    extra: set[Key]     # in the new table, not in the source

    @property
    def keys(self) -> set[Key]:
        return self.changed | self.missing | self.extra


def differing_keys(conn: pymysql.connections.Connection, hasher: RowHasher, lo: Key | None,
                   hi: Key | None, target_conn: pymysql.connections.Connection | None = None) -> Differences:
    """The rows of the keys [lo, hi) that differ between source and new table (read through `target_conn`
    when it lives on another server)."""
    other = target_conn or conn
    if range_checksum(conn, hasher, True, lo, hi) == range_checksum(other, hasher, False, lo, hi):
        return Differences(set(), set(), set())
    return compared(row_hashes(conn, hasher, True, lo, hi), row_hashes(other, hasher, False, lo, hi))


def compared(source: dict[Key, int], target: dict[Key, int]) -> Differences:
    """The differences between the row hashes of both sides, key by key."""
    return Differences({k for k in source.keys() & target.keys() if source[k] != target[k]},
                       source.keys() - target.keys(), target.keys() - source.keys())


def describe_difference(conn: pymysql.connections.Connection, hasher: RowHasher, key: Key,
                        target_conn: pymysql.connections.Connection | None = None) -> str:
    """Which mapped columns of one row differ between source and new table."""
    pair = hasher.pair
    source = query(conn, f"SELECT {', '.join(hasher.source_parts)} FROM {pair.source_name} "
                         f"WHERE {pair.pk.equals()}{pair.source_filter}", key)
    target = query(target_conn or conn, f"SELECT {', '.join(hasher.target_parts)} FROM {pair.target_name} "
                         f"WHERE {pair.pk.equals()}", key)
    if not source or not target:
        return "missing from the " + ("new" if source else "original") + " table"
    columns = [t if s == t else f"{t} (from {s})"
               for t, s, a, b in zip(pair.target_columns, pair.source_columns, source[0], target[0]) if a != b]
    return "columns differ: " + ", ".join(columns) if columns else "equal now"


def hashes_of_keys(conn: pymysql.connections.Connection, hasher: RowHasher, source: bool,
                   keys: Collection[Key]) -> dict[Key, int]:
    """Key -> row hash of one side, for the given keys (a key without a row is left out)."""
    if not keys:
        return {}
    pair, ordered = hasher.pair, list(keys)
    sql = (f"SELECT {pair.pk.column_list()}, {hasher.row_sql(source)} FROM {hasher.table(source)} "
           f"WHERE ({pair.pk.in_list(len(ordered))}){side_filter(pair, source)}")
    return {tuple(r[:-1]): r[-1] for r in query(conn, sql, pair.pk.flat(ordered))}


def key_differences(conn: pymysql.connections.Connection, hasher: RowHasher, keys: Collection[Key],
                    target_conn: pymysql.connections.Connection | None = None) -> Differences:
    """The rows of the given keys that differ between source and new table."""
    return compared(hashes_of_keys(conn, hasher, True, keys), hashes_of_keys(target_conn or conn, hasher, False, keys))


@dataclass(frozen=True)
class KeyRange:
    """The keys [lo, hi): what validation compares when it checks a range."""

    lo: Key | None
    hi: Key | None

    def differences(self, conn: pymysql.connections.Connection, hasher: RowHasher,
                    target_conn: pymysql.connections.Connection | None = None) -> Differences:
        return differing_keys(conn, hasher, self.lo, self.hi, target_conn)

    def show(self, pk: PrimaryKey) -> str:
        return f"in key range {show_range(pk, self.lo, self.hi)}"


@dataclass(frozen=True)
class KeyList:
    """Keys changed since their range was checked ahead (cutover/validate_ahead.py): only they are compared."""

    keys: tuple[Key, ...]

    def differences(self, conn: pymysql.connections.Connection, hasher: RowHasher,
                    target_conn: pymysql.connections.Connection | None = None) -> Differences:
        keys = with_zero_date_rows(conn, hasher.pair, set(self.keys), target_conn, locking=False)   # the snapshot
        return key_differences(conn, hasher, tuple(keys), target_conn)

    def show(self, pk: PrimaryKey) -> str:
        return f"among {len(self.keys)} keys changed since their range was checked, from {show_key(pk, self.keys[0])}"


Region = KeyRange | KeyList


def repair(conn: pymysql.connections.Connection, hasher: RowHasher, region: Region, diff: set[Key], table: str,
           target_conn: pymysql.connections.Connection | None = None) -> int:
    """Re-copy `diff` and re-check the whole region until it matches; returns the number of rows re-copied.

    The whole region is re-checked, not only the re-copied keys: a row of the new table that another
    write removed brings no change event of its own. A key that differs again after being re-copied,
    while its source row held still from before the re-copy to the re-check, gets a strike (a lossy
    conversion, two rows colliding on a UNIQUE key); ROUNDS strikes fail. A key whose source row was
    written meanwhile (a hot row, such as a counter the application bumps without pause) is a write in
    flight: the appliers and the cutover's drain under the lock apply it, and it is not re-copied here
    again, or a row written that often would fail validation. A key that newly differs in both tables,
    or exists only in the new table, is a write in flight too; a key newly missing from the new table
    is re-copied.
    """
    recopied: set[Key] = set()
    strikes: Counter[Key] = Counter()
    where = region.show(hasher.pair.pk)
    for _ in range(MAX_ROUNDS):
        if not diff:
            return len(recopied)
        before = hashes_of_keys(conn, hasher, True, diff)
        with_retry(partial(recopy_keys, conn, hasher.pair, diff, target=target_conn))
        recopied |= diff
        now = region.differences(conn, hasher, target_conn)
        suspects = now.keys & recopied
        after = hashes_of_keys(conn, hasher, True, suspects)
        written = {k for k in suspects if before.get(k) != after.get(k)}
        persisting = suspects - written
        strikes.update(persisting)
        worst = max(persisting, key=lambda k: strikes[k], default=None)
        if worst is not None and strikes[worst] >= ROUNDS:
            raise ValidationFailed(
                f"{len(persisting)} rows of {table} {where} still differ right after being "
                f"re-copied {ROUNDS} times; first {show_key(hasher.pair.pk, worst)}: "
                f"{describe_difference(conn, hasher, worst, target_conn)}. "
                "The ALTER may change values (a lossy type change) or make rows collide on a UNIQUE key")
        diff = persisting | (now.missing - written)
    sample = "; ".join(show_key(hasher.pair.pk, k) for k in list(diff)[:10])
    raise ValidationFailed(f"rows of {table} {where} kept differing through {MAX_ROUNDS} rounds of "
                           f"re-copies (still {sample}); retry when writes to the table are fewer")


def validate_region(ctx: RunContext, hasher: RowHasher, region: Region, snapshots: queue.Queue | None = None) -> int:
    """Check one region; re-copy differing rows and re-check the region until it matches. Returns rows repaired.

    With `snapshots` (sessions holding one consistent snapshot in which the new table equals the
    source), the region is compared in a snapshot, so a difference is a real one. Without, it is
    compared live: under traffic new differences keep appearing (the appliers and the cutover drain
    handle those), and what must not happen is a row that still differs right after being re-copied.
    """
    conn = ctx.db()
    target_conn = ctx.target_db() if ctx.pair.remote else None
    try:
        if not ctx.wait_while_paused_or_throttled(conn):
            raise WorkStopped(f"validation of {ctx.spec.qualified_name} stopped")
        with ctx.yielding.turn(ctx.stop.is_set) as allowed:   # the checksums and the repair alike
            if not allowed or not ctx.wait_while_paused_or_throttled(conn):
                raise WorkStopped(f"validation of {ctx.spec.qualified_name} stopped")
            if snapshots is None:
                diff = region.differences(conn, hasher, target_conn).keys
            else:
                source, target = snapshots.get()
                try:
                    diff = region.differences(source, hasher, target).keys
                finally:
                    snapshots.put((source, target))
            return repair(conn, hasher, region, diff, ctx.spec.qualified_name, target_conn)
    finally:
        conn.close()
        if target_conn is not None:
            target_conn.close()


def validation_ranges(conn: pymysql.connections.Connection, ctx: RunContext,
                      reader: pymysql.connections.Connection) -> list[tuple[Key | None, Key | None]]:
    """Key ranges covering every key: the copy chunks, with the keys above the last chunk's start cut
    into chunk-sized ranges again (rows inserted since the plan), read through `reader` (the snapshot
    session when validating in a snapshot, so the ranges cover exactly its rows)."""
    pair = ctx.pair
    ranges = [(c.start, c.end) for c in ctx.store(conn).chunks(ctx.migration.id)] or [(None, None)]
    if ranges[0][0] is not None:
        ranges.insert(0, (None, ranges[0][0]))
    top = ranges.pop()
    tail_from = top[0] if top[1] is None else top[1]
    if top[1] is not None:
        ranges.append(top)
    return ranges + key_ranges(reader, pair.source_name, pair.pk, tail_from, None, ctx.spec.chunk_size)


def regions_to_compare(ranges: list[tuple[Key | None, Key | None]], skipped: frozenset[tuple[Key | None, Key | None]],
                       changed: Collection[Key], batch: int) -> list[Region]:
    """The ranges not `skipped` (checked ahead), and the `changed` keys in batches of at most `batch`."""
    keys = list(changed)
    return ([KeyRange(lo, hi) for lo, hi in ranges if (lo, hi) not in skipped]
            + [KeyList(tuple(keys[i:i + batch])) for i in range(0, len(keys), batch)])


def validate(ctx: RunContext, snapshots: list[Sessions] | None = None,
             skipped: frozenset[tuple[Key | None, Key | None]] = frozenset(), changed: Collection[Key] = ()) -> int:
    """Validate every range in parallel (in the given snapshot sessions, if any), but for the `skipped` ones
    (checked ahead: cutover/validate_ahead.py), whose `changed` keys are compared one by one; returns rows
    repaired."""
    conn = ctx.db()
    target_conn = ctx.target_db() if ctx.pair.remote else None
    try:
        hasher = row_hasher(target_conn or conn, ctx.pair)
        ranges = validation_ranges(conn, ctx, snapshots[0][0] if snapshots else conn)
    finally:
        conn.close()
        if target_conn is not None:
            target_conn.close()
    sessions: queue.Queue | None = None
    if snapshots:
        sessions = queue.Queue()
        for session in snapshots:
            sessions.put(session)
    regions = regions_to_compare(ranges, skipped, changed, KEYS_PER_COMPARISON)
    workers = len(snapshots) if snapshots else ctx.spec.copy_workers
    with ThreadPoolExecutor(max_workers=workers) as pool:
        repaired = sum(pool.map(lambda region: validate_region(ctx, hasher, region, sessions), regions))
    log_event(log, "validation done", ranges=len(ranges), skipped=len(skipped), changed_keys=len(changed),
              repaired=repaired, in_snapshot=bool(snapshots))
    return repaired
