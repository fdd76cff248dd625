"""Secondary indexes deferred past the bulk copy (`--defer-indexes`): which ones, their exact definitions, and
adding them back in one ALTER.

Why: loading rows into a table that has only its primary and unique keys, then building each other index once
from the loaded rows, is faster than maintaining every index row by row during the copy (TiDB's and SB-OSC's
finding). PRIMARY and UNIQUE keys stay from the start: copy and apply rely on them to meet real unique conflicts
(invariant 6, applier/conflicts.py). An index a foreign key needs stays too: the server refuses to drop it, and
the key's checks would scan the table without it.

Every function takes a connection and the table's schema and name, so the same steps run on whichever server
holds the new table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pymysql

from core.db import qualified, query, quote_ident

# In the migration's options: the deferred indexes, as recorded before they were dropped ([{name, clause}]).
DEFERRED_INDEXES_OPTION = "deferred_indexes"

ER_DUP_KEYNAME = 1061
# The server cannot add these indexes in place without locks (e.g. more than one FULLTEXT index at a time).
ER_ALTER_OPERATION_NOT_SUPPORTED = (1845, 1846)

# One index line of SHOW CREATE TABLE: `KEY `name` (...)`, FULLTEXT/SPATIAL too; names quoted with ` or "
# (ANSI_QUOTES), the quote doubled inside.
_INDEX_LINE = re.compile(r'^(?:(?:FULLTEXT|SPATIAL)\s+)?KEY\s+(?:`((?:[^`]|``)+)`|"((?:[^"]|"")+)")\s')


@dataclass(frozen=True)
class DeferredIndex:
    """One deferred index: its name and its clause as SHOW CREATE TABLE prints it (columns, prefix lengths,
    order, type, comment, visibility), which re-creates it identically on the same kind of server."""

    name: str
    clause: str

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "clause": self.clause}

    @classmethod
    def from_json(cls, value: dict[str, str]) -> "DeferredIndex":
        return cls(value["name"], value["clause"])


@dataclass(frozen=True)
class IndexShape:
    """What decides whether an index may be deferred: uniqueness and its (column, prefix length) list."""

    unique: bool
    columns: tuple[tuple[str, int | None], ...]


def deferred_names(indexes: dict[str, IndexShape],
                   foreign_keys: list[tuple[str, ...]]) -> tuple[list[str], list[str]]:
    """(the names to defer, the non-unique ones kept because a foreign key may need them), each in name order.

    A foreign key on columns (a, b) needs an index starting with a, b in that order, whole columns; every
    such non-unique index is kept, so whichever the server chose stays.
    """
    deferred, kept = [], []
    for name in sorted(indexes):
        shape = indexes[name]
        if shape.unique:
            continue
        columns = [column.lower() if sub_part is None else None for column, sub_part in shape.columns]
        needed = any(columns[:len(fk)] == [c.lower() for c in fk] for fk in foreign_keys)
        (kept if needed else deferred).append(name)
    return deferred, kept


def index_shapes(conn: pymysql.connections.Connection, database: str, table: str) -> dict[str, IndexShape]:
    """Every index of the table, PRIMARY included."""
    shapes: dict[str, tuple[bool, list[tuple[str, int | None]]]] = {}
    for name, non_unique, column, sub_part in query(conn, """
            SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
            WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX""", (database, table)):
        shapes.setdefault(name, (not int(non_unique), []))[1].append((column, None if sub_part is None
                                                                      else int(sub_part)))
    return {name: IndexShape(unique, tuple(columns)) for name, (unique, columns) in shapes.items()}


def foreign_key_columns(conn: pymysql.connections.Connection, database: str, table: str) -> list[tuple[str, ...]]:
    """The column lists of the table's foreign keys, and of other tables' foreign keys that reference it."""
    rows = query(conn, """
        SELECT CONSTRAINT_SCHEMA, CONSTRAINT_NAME, TABLE_NAME, COLUMN_NAME, REFERENCED_TABLE_SCHEMA,
               REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME
        FROM information_schema.KEY_COLUMN_USAGE
        WHERE REFERENCED_TABLE_NAME IS NOT NULL AND ((TABLE_SCHEMA=%s AND TABLE_NAME=%s)
           OR (REFERENCED_TABLE_SCHEMA=%s AND REFERENCED_TABLE_NAME=%s))
        ORDER BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, ORDINAL_POSITION""",
                 (database, table, database, table))
    keys: dict[tuple[str, str, str, str], list[str]] = {}
    for schema, constraint, owner, column, ref_schema, ref_table, ref_column in rows:
        if owner == table and schema == database:
            keys.setdefault(("own", schema, owner, constraint), []).append(column)
        if ref_table == table and ref_schema == database:
            keys.setdefault(("referenced", schema, owner, constraint), []).append(ref_column)
    return [tuple(columns) for columns in keys.values()]


def index_clauses(conn: pymysql.connections.Connection, database: str, table: str) -> dict[str, str]:
    """{index name: its clause} of every KEY, FULLTEXT KEY and SPATIAL KEY line of SHOW CREATE TABLE."""
    return parse_index_clauses(query(conn, f"SHOW CREATE TABLE {qualified(database, table)}")[0][1])


def parse_index_clauses(create: str) -> dict[str, str]:
    """{index name: its clause} of the non-unique index lines of a CREATE TABLE as SHOW CREATE TABLE prints it
    (one index a line, a comment's line breaks escaped)."""
    clauses = {}
    for line in create.splitlines():
        clause = line.strip()
        clause = clause[:-1] if clause.endswith(",") else clause
        found = _INDEX_LINE.match(clause)
        if found:
            backticked, double_quoted = found.groups()
            name = backticked.replace("``", "`") if backticked is not None else double_quoted.replace('""', '"')
            clauses[name] = clause
    return clauses


def deferrable_indexes(conn: pymysql.connections.Connection, database: str,
                       table: str) -> tuple[list[DeferredIndex], list[str]]:
    """(the table's indexes that can be deferred, with their definitions; the names of non-unique indexes kept
    for foreign keys). Reads only."""
    names, kept = deferred_names(index_shapes(conn, database, table), foreign_key_columns(conn, database, table))
    clauses = index_clauses(conn, database, table)
    unread = [name for name in names if name not in clauses]
    if unread:
        raise LookupError(f"index {', '.join(unread)} of {database}.{table} not found in SHOW CREATE TABLE")
    return [DeferredIndex(name, clauses[name]) for name in names], kept


def present_index_names(conn: pymysql.connections.Connection, database: str, table: str) -> set[str]:
    """The table's index names, lower case (index names compare case-insensitively)."""
    return {r[0].lower() for r in query(conn, "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS "
                                              "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (database, table))}


def drop_indexes(conn: pymysql.connections.Connection, database: str, table: str,
                 indexes: list[DeferredIndex]) -> None:
    """Drop those of `indexes` the table has, in one ALTER (again after a kill: only what is left)."""
    present = present_index_names(conn, database, table)
    drops = [f"DROP INDEX {quote_ident(i.name)}" for i in indexes if i.name.lower() in present]
    if drops:
        query(conn, f"ALTER TABLE {qualified(database, table)} {', '.join(drops)}")


def missing_indexes(conn: pymysql.connections.Connection, database: str, table: str,
                    indexes: list[DeferredIndex]) -> list[DeferredIndex]:
    """Those of `indexes` the table does not have (yet)."""
    present = present_index_names(conn, database, table)
    return [i for i in indexes if i.name.lower() not in present]


def add_indexes(conn: pymysql.connections.Connection, database: str, table: str,
                indexes: list[DeferredIndex]) -> list[DeferredIndex]:
    """Add those of `indexes` the table lacks, all in one ALTER (in place without locks where the server can,
    else as the server chooses); returns those this call added. Idempotent: after a kill during or after the
    ALTER it adds exactly the missing ones. An ALTER of a killed run may still be running on the server: ours
    then waits for it, and if it added some of ours first, the missing ones are read again."""
    tried: list[DeferredIndex] = []
    while True:
        missing = missing_indexes(conn, database, table, indexes)
        if not missing:
            return []
        try:
            _alter_in_place(conn, f"ALTER TABLE {qualified(database, table)} "
                                  + ", ".join(f"ADD {i.clause}" for i in missing))
            return missing
        except pymysql.err.MySQLError as exc:
            if exc.args[0] != ER_DUP_KEYNAME or missing == tried:   # a name taken by no index read back
                raise
            tried = missing


def _alter_in_place(conn: pymysql.connections.Connection, alter: str) -> None:
    """Run `alter` with ALGORITHM=INPLACE, LOCK=NONE, or as the server chooses where it cannot (nothing writes
    to the table while its indexes are built, so a stronger lock costs nothing)."""
    try:
        query(conn, f"{alter}, ALGORITHM=INPLACE, LOCK=NONE")
    except pymysql.err.MySQLError as exc:
        if exc.args[0] not in ER_ALTER_OPERATION_NOT_SUPPORTED:
            raise
        query(conn, alter)
