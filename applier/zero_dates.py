"""The rows a change key may stand for when a date column of it holds what Debezium sends for a zero date.

A DATE or DATETIME value with a zero year, month or day ('0000-00-00', '2024-00-10', '0000-05-10') has no Java
date: Debezium sends it, in a NOT NULL column (every key column is one), as the column's DEFAULT if it has one,
else as the epoch, 1970-01-01; a zero TIMESTAMP is sent as the epoch second (core/keys.py, zero_date_stand_ins).
A change key holding such a stand-in may so stand for the row of that value itself or for any row whose column
holds a zero date; re-copying only the stand-in's key would leave the row that changed as it was, and a deleted one
in the new table. So the rows such a key may stand for are looked up in both tables and re-copied with it: a row
found in the source is copied as it is now, one found only in the new table is removed.

The source's lookup is a locking read where others write (the appliers, the drain before the cutover's lock): a
change reaches the binlog, and so an applier, before a plain read can see it, and a locking read waits for its
writer's commit. It gives way as every locking read of the tool does (applier/giving_way.py), page by page.
Validation's lookup reads its snapshot, which holds every change up to its fence.

The lookup reads the key's index by the key's values in the columns before its first stand-in (an index range;
test_zero_date_keys.py counts the rows it reads). Where a key holds one in its first column, zero dates lie all
over the index and each table is scanned. That is once per batch of changes holding such a key, under the
cutover's lock too, and never for a table whose change keys hold no stand-in.
"""
from __future__ import annotations

import pymysql

from applier.giving_way import refused, share_lock
from core.db import query
from core.keys import Key
from core.table import TablePair



def with_zero_date_rows(conn: pymysql.connections.Connection, pair: TablePair, keys: set[Key],
                        target: pymysql.connections.Connection | None = None, locking: bool = True) -> set[Key]:
    """`keys` with the keys of every row, in the source or the new table, that one of them may stand for;
    `locking`: the source's read waits for writers of those rows to commit (not in a snapshot)."""
    pk = pair.pk
    if not pk.has_date_columns:   # most tables: no key to look at
        return keys
    standing = [key for key in keys if pk.zero_date_positions(key)]
    if not standing:
        return keys
    where, params = pk.zero_date_family(standing)
    found = set(keys)
    if locking:
        found.update(_source_family_locked(conn, pair, where, params))
    else:
        found.update(tuple(row) for row in query(conn, f"SELECT {pk.column_list()} FROM {pair.source_name} "
                                                       f"WHERE {where}", params))
    found.update(tuple(row) for row in query(target or conn, f"SELECT {pk.column_list()} FROM {pair.target_name} "
                                                             f"WHERE {where}", params))
    return found


def _source_family_locked(conn: pymysql.connections.Connection, pair: TablePair, where: str,
                          params: list) -> list[Key]:
    """The source's family read as a locking read: NOWAIT first, as every locking read of the tool
    (applier/giving_way.py); refused, it is read again waiting. The one exception to giving way: the family is a
    condition, not a key list, and read in pieces under writers that never stop (a table whose every key holds a
    zero date) it fell behind them for good; so a refused family read waits, holding the family rows it has read,
    for as long as the session's lock wait allows. Only tables whose change keys hold a zero date's stand-in ever
    read one."""
    sql = f"SELECT {pair.pk.column_list()} FROM {pair.source_by_key} WHERE {where}"
    try:
        return [tuple(row) for row in query(conn, sql + share_lock(conn), params)]
    except pymysql.err.OperationalError as exc:
        if not refused(exc):
            raise
    return [tuple(row) for row in query(conn, sql + share_lock(conn, nowait=False), params)]
