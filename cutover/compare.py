"""Row-by-row comparison of two tables on their mapped columns (used after a swap, by demo and tests)."""
from __future__ import annotations

from dataclasses import dataclass

import pymysql

from core.keys import Key
from core.table import TablePair, load_pair
from cutover.validate import row_hasher, row_hashes


@dataclass(frozen=True)
class Comparison:
    """Keys present in only one table, and keys whose mapped columns differ."""

    compared: int
    only_left: list[Key]
    only_right: list[Key]
    different: list[Key]

    @property
    def equal(self) -> bool:
        return not (self.only_left or self.only_right or self.different)


def compare_tables(conn: pymysql.connections.Connection, db: str, left: str, right: str,
                   *, alter: str = "") -> Comparison:
    """Compare `db.left` and `db.right` (`right` made from `left` by `alter`, if given) on the columns
    that fill each other, in `right`'s types and with validation's hashing."""
    pair: TablePair = load_pair(conn, db, left, right, alter)
    hasher = row_hasher(conn, pair)
    a = row_hashes(conn, hasher, True, None, None)
    b = row_hashes(conn, hasher, False, None, None)
    only_left = [k for k in a if k not in b]       # exact values: a key changed only in case differs
    only_right = [k for k in b if k not in a]
    different = [k for k in a if k in b and a[k] != b[k]]
    return Comparison(len(a.keys() | b.keys()), only_left, only_right, different)
