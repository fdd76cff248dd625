"""Row-by-row comparison of two tables on their shared columns (used after a swap, by demo and tests)."""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import pymysql

from applier.table import TablePair, load_pair
from cutover.validate import row_hashes


@dataclass(frozen=True)
class Comparison:
    """Keys present in only one table, and keys whose shared columns differ."""

    compared: int
    only_left: list[int]
    only_right: list[int]
    different: list[int]

    @property
    def equal(self) -> bool:
        return not (self.only_left or self.only_right or self.different)


def compare_tables(conn: pymysql.connections.Connection, db: str, left: str, right: str, pk: str,
                   ignore_keys: Collection[int] = ()) -> Comparison:
    """Compare `db.left` and `db.right` on the columns both have, skipping `ignore_keys`."""
    pair: TablePair = load_pair(conn, db, left, right, pk)
    lo, hi = -(2 ** 63), 2 ** 63 - 1
    a = row_hashes(conn, pair.source_name, pair, lo, hi)
    b = row_hashes(conn, pair.target_name, pair, lo, hi)
    skip = set(ignore_keys)
    only_left = sorted(k for k in a.keys() - b.keys() if k not in skip)
    only_right = sorted(k for k in b.keys() - a.keys() if k not in skip)
    different = sorted(k for k in a.keys() & b.keys() if a[k] != b[k] and k not in skip)
    return Comparison(len(a.keys() | b.keys()) - len(skip), only_left, only_right, different)
