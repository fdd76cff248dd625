"""Row-by-row comparison of two tables on their mapped columns (used after a swap, by demo and tests)."""
from __future__ import annotations

from dataclasses import dataclass

import pymysql

from core.table import TablePair, load_pair
from cutover.validate import row_hasher, row_hashes


@dataclass(frozen=True)
class Comparison:
    """Keys present in only one table, and keys whose mapped columns differ."""

    compared: int
    only_left: list[int]
    only_right: list[int]
    different: list[int]

    @property
    def equal(self) -> bool:
        return not (self.only_left or self.only_right or self.different)


def compare_tables(conn: pymysql.connections.Connection, db: str, left: str, right: str, pk: str,
                   *, alter: str = "") -> Comparison:
    """Compare `db.left` and `db.right` (`right` made from `left` by `alter`, if given) on the columns
    that fill each other, in `right`'s types and with validation's hashing."""
    pair: TablePair = load_pair(conn, db, left, right, pk, alter)
    hasher = row_hasher(conn, pair)
    lo, hi = -(2 ** 63), 2 ** 64 - 1
    a = row_hashes(conn, hasher, True, lo, hi)
    b = row_hashes(conn, hasher, False, lo, hi)
    only_left = sorted(a.keys() - b.keys())
    only_right = sorted(b.keys() - a.keys())
    different = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    return Comparison(len(a.keys() | b.keys()), only_left, only_right, different)
