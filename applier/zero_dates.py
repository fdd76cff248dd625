"""The rows a change key may stand for when it holds the epoch in a date column.

Debezium sends a DATE, DATETIME or TIMESTAMP value of a NOT NULL column (every key column is one) that is zero
('0000-00-00') or has a zero month or day ('2024-00-10') as the epoch, 1970-01-01: such a value has no Java
date. A change key holding the epoch in such a column may so stand for the row of the epoch itself or for any row
whose column holds one of those values; re-copying only the epoch's key would leave the row that changed as it
was, and a deleted one in the new table. So the rows such a key may stand for are looked up in both tables and
re-copied with it: a row found in the source is copied as it is now, one found only in the new table is removed.
Rows written after the lookup send change events of their own.

The lookup cannot use the key's index (the zero values lie all over it): one scan of each table per batch of
changes that holds such a key, and none for a table whose change keys never hold the epoch.
"""
from __future__ import annotations

import pymysql

from core.db import query
from core.keys import Key
from core.table import TablePair

KEYS_PER_LOOKUP = 200   # keys whose rows one statement looks up


def with_zero_date_rows(conn: pymysql.connections.Connection, pair: TablePair, keys: set[Key],
                        target: pymysql.connections.Connection | None = None) -> set[Key]:
    """`keys` with the keys of every row, in the source or the new table, that one of them may stand for."""
    pk = pair.pk
    standing = [key for key in keys if pk.zero_date_positions(key)]
    if not standing:
        return keys
    found = set(keys)
    for start in range(0, len(standing), KEYS_PER_LOOKUP):
        where, params = pk.zero_date_family(standing[start:start + KEYS_PER_LOOKUP])
        for session, table in ((conn, pair.source_name), (target or conn, pair.target_name)):
            found.update(tuple(row) for row in query(session, f"SELECT {pk.column_list()} FROM {table} "
                                                              f"WHERE {where}", params))
    return found
