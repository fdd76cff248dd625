"""Rows written to a new table on another server (docs/move.md): no statement can name both tables, so the rows
travel through the tool, and what one INSERT … SELECT does on one server is done in two sessions.

- Reading: the source's rows are read with their key; each column so that the value written on the target is the
  one the server's own conversion would store (core/table.py: remote_read): a FLOAT widened to DOUBLE, whose text
  names the stored value exactly (a FLOAT's own text keeps six digits and would round it); a value going into a
  column of another type converted by the source server.
- Writing: one target transaction deletes the new table's rows of the batch (a key range, or the change
  keys) and inserts the rows read, so a batch written twice (a worker killed between the target's commit
  and its progress) is written once, and a key whose row left the source (or the --where predicate) is gone.
- A UNIQUE refusal: the target's rows the batch collides with are handed back (CollidingKeys), to be re-synced
  from the source as a re-copy syncs a key: their current rows, or none, read with a locking read held until the
  target has committed them. A row read without a lock and written later could land after an applier's newer
  write of it, with no change left to correct it. A re-copy starts again with their keys among its own, so
  that its source reads stay one locking read, in key order (applier/README.md, "Locks in key order"); a copy
  batch re-copies them by themselves, outside its own transaction, and is written again. A collision that
  stays for ROUNDS rounds is the source's own (ConstraintViolated). A value the new table refuses stops the
  migration.
"""
from __future__ import annotations

from collections.abc import Sequence

import pymysql

from applier.conflicts import DUPLICATE, ROUNDS, ConstraintViolated, UniqueKey, drop_unique_keys, primary_key_race, \
    refused_by_new_table, unique_keys, unresolved
from core.db import qualified, query, query_count, quote_ident
from core.keys import Key
from core.table import TablePair

Row = tuple   # the key's values, then the copied columns' values in TablePair order


class CollidingKeys(Exception):
    """The target refused the batch under a UNIQUE key because of its rows of `keys`, outside the batch's own."""

    def __init__(self, keys: list[Key], refusal: pymysql.err.MySQLError) -> None:
        super().__init__(f"{len(keys)} rows of the new table collide with the batch")
        self.keys, self.refusal = keys, refusal


def source_select(pair: TablePair) -> str:
    """`pk…, col…` for SELECT from the source, each column read as core/table.py: remote_read says."""
    return ", ".join([pair.pk.column_list(), *(pair.source_reads or map(quote_ident, pair.source_columns))])


def read_rows(conn: pymysql.connections.Connection, pair: TablePair, where: str, params: Sequence,
              locking: str = "") -> list[Row]:
    """The source rows matching `where` (and --where), keys first; `locking`, a share-lock clause
    (applier/giving_way.py: share_lock), makes it a locking read, by the primary key."""
    source = pair.source_by_key if locking else pair.source_name
    return [tuple(r) for r in query(conn, f"SELECT {source_select(pair)} FROM {source} "
                                          f"WHERE ({where}){pair.source_filter}{locking}", list(params))]


def read_keys(conn: pymysql.connections.Connection, pair: TablePair, keys: Sequence[Key],
              locking: str = "") -> list[Row]:
    """The source rows of `keys` that exist (and match --where)."""
    if not keys:
        return []
    return read_rows(conn, pair, pair.pk.in_list(len(keys)), pair.pk.flat(keys), locking)


def write_rows(target: pymysql.connections.Connection, pair: TablePair, where: str, params: Sequence,
               rows: list[Row], during_apply: bool) -> int:
    """In one target transaction: delete the new table's rows matching `where`, insert `rows`; returns rows
    deleted. Rows of the new table outside `where` that `rows` collide with under a UNIQUE key are raised as
    CollidingKeys, for the caller to re-copy with a locking read (module docstring)."""
    width = len(pair.pk.names)
    for attempt in range(ROUNDS):
        target.begin()
        try:
            deleted = query_count(target, f"DELETE FROM {pair.target_name} WHERE {where}", list(params))
            if rows:
                with target.cursor() as cur:
                    cur.executemany(f"INSERT INTO {pair.target_name} ({pair.target_column_list}) VALUES "
                                    f"({', '.join(['%s'] * len(pair.target_columns))})", [r[width:] for r in rows])
            target.commit()
            return deleted
        except pymysql.err.MySQLError as exc:
            target.rollback()
            if primary_key_race(exc):   # a re-copy wrote a key of `where` after the DELETE: written again
                if attempt < ROUNDS - 1:
                    continue
                raise
            if not refused_by_new_table(exc):
                raise
            if exc.args[0] not in DUPLICATE:
                raise unresolved(pair, exc, during_apply) from None
            ours = {r[:width] for r in rows}
            colliding = [k for k in colliding_keys(target, pair, rows) if k not in ours]
            if not colliding:
                raise unresolved(pair, exc, during_apply) from None
            raise CollidingKeys(colliding, exc) from None
    raise AssertionError("unreachable")


def kept_colliding(pair: TablePair, refusal: pymysql.err.MySQLError, during_apply: bool) -> ConstraintViolated:
    """The stop for rows that still collide on the target after ROUNDS re-reads: the source's own collision."""
    return ConstraintViolated(f"{unresolved(pair, refusal, during_apply)}; the rows colliding on the target kept "
                              f"colliding after being re-read from the source {ROUNDS} times")


def colliding_keys(target: pymysql.connections.Connection, pair: TablePair, rows: list[Row]) -> list[Key]:
    """Keys of the new table's rows that hold a UNIQUE value one of `rows` would write."""
    width = len(pair.pk.names)
    position = {c.lower(): i for i, c in enumerate(pair.target_columns)}
    names, keys = unique_keys(target, pair.target_database or pair.database, pair.target)
    found: list[Key] = []
    computed: list[UniqueKey] = []
    for key in keys:
        if not all(column.lower() in position for column, _ in key.parts):
            computed.append(key)   # a part the server computes (a generated column): compared in a probe below
            continue
        values = [tuple(r[width + position[c.lower()]] for c, _ in key.parts) for r in rows]
        values = [v for v in values if None not in v]
        if not values:
            continue
        one = "(" + ", ".join("%s" if n is None else f"LEFT(%s, {int(n)})" for _, n in key.parts) + ")"
        found += [tuple(r) for r in query(
            target, f"SELECT {pair.pk.column_list()} FROM {pair.target_name} WHERE ({', '.join(key.exprs())}) "
                    f"IN ({', '.join([one] * len(values))})", [v for row in values for v in row])]
    if computed:
        found += _colliding_computed(target, pair, rows, names, computed)
    return list(dict.fromkeys(found))


def _colliding_computed(target: pymysql.connections.Connection, pair: TablePair, rows: list[Row], names: list[str],
                        keys: list[UniqueKey]) -> list[Key]:
    """colliding_keys for keys with a generated part: `rows` written into a TEMPORARY copy of the new table without
    its UNIQUE keys, where the server computes the generated values, and joined with the new table."""
    width = len(pair.pk.names)
    probe = qualified(pair.target_database or pair.database, f"{pair.target[:58]}_probe")
    query(target, f"DROP TEMPORARY TABLE IF EXISTS {probe}")
    query(target, f"CREATE TEMPORARY TABLE {probe} LIKE {pair.target_name}")
    try:
        drop_unique_keys(target, probe, pair.target_database or pair.database, pair.target, names)
        with target.cursor() as cur:
            cur.executemany(f"INSERT INTO {probe} ({pair.target_column_list}) VALUES "
                            f"({', '.join(['%s'] * len(pair.target_columns))})", [r[width:] for r in rows])
        found: list[Key] = []
        for key in keys:
            found += [tuple(r) for r in query(
                target, f"SELECT DISTINCT {pair.pk.column_list('t')} FROM {pair.target_name} t "
                        f"JOIN {probe} p ON {key.equal('t', 'p')}")]
        return found
    finally:
        query(target, f"DROP TEMPORARY TABLE IF EXISTS {probe}")
