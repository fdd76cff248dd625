"""What a copy needs to know about the source and new tables: columns, primary key, unique keys."""
from __future__ import annotations

import re
from dataclasses import dataclass

import pymysql

from core.alter_columns import column_changes
from core.db import qualified, query, quote_ident
from core.keys import INTEGER_TYPES, STRING_TYPES, PrimaryKey, primary_key

_NUMBERS = INTEGER_TYPES | {"decimal", "numeric", "float", "double", "real"}
_IN_NUMBER_CONTEXT = {"bit", "enum", "set", "date", "time", "datetime", "timestamp"}   # `+ 0` is the server's number
_TEMPORAL = {"time", "datetime", "timestamp"}
_RENDERED = {"time", "datetime", "timestamp", "float", "double"}   # text as the server renders it


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

@dataclass(frozen=True)
class TablePair:
    """Source table and new table of one migration, and which source column fills which new column.

    `target_columns[i]` is filled from `source_columns[i]` (the same name unless the ALTER renames it),
    in new-table order. Generated columns of the new table are not among them: the server computes them.
    """

    database: str
    source: str
    target: str
    pk: PrimaryKey
    target_columns: tuple[str, ...]
    source_columns: tuple[str, ...]
    target_database: str = ""   # the new table's schema ("": the source's)
    remote: bool = False        # the new table lives on another server: no statement names both tables
    where: str = ""             # only the source rows matching it are copied and kept (remote only)
    source_reads: tuple[str, ...] = ()   # remote: how each of source_columns is read (remote_read)
    upsert: bool = False   # re-copies write in place (applier/recopy.py: _write_upserting); see key_only_unique

    @property
    def source_name(self) -> str:
        return qualified(self.database, self.source)

    @property
    def source_by_key(self) -> str:
        """The source as a locking read names it: through its primary key only, so that its row locks are taken in
        key order. Left to itself the server reads a list covering much of the table by a full scan of the smallest
        covering index, a secondary one: its locks would come in that index's order and leave the rows themselves
        unlocked (applier/README.md, "Locks in key order")."""
        return f"{self.source_name} FORCE INDEX (PRIMARY)"

    @property
    def target_name(self) -> str:
        return qualified(self.target_database or self.database, self.target)

    @property
    def source_filter(self) -> str:
        """` AND (<where>)` for a statement reading the source, or nothing. Every such statement carries parameters,
        so a `%` of the predicate (modulo, a LIKE wildcard) is doubled, as the driver's formatting wants it."""
        return f" AND ({self.where.replace('%', '%%')})" if self.where else ""

    @property
    def target_column_list(self) -> str:
        """The new table's copied columns, for INSERT INTO target (…)."""
        return ", ".join(quote_ident(c) for c in self.target_columns)

    @property
    def source_column_list(self) -> str:
        """The source columns that fill them, in the same order, for SELECT … FROM source."""
        return ", ".join(quote_ident(c) for c in self.source_columns)


def columns_of(conn: pymysql.connections.Connection, database: str, table: str) -> list[str]:
    return [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                                      "AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION", (database, table))]


def is_generated(extra: str) -> bool:
    """information_schema.COLUMNS.EXTRA of a generated column: 'VIRTUAL GENERATED', 'STORED GENERATED'
    (MySQL, MariaDB), 'PERSISTENT GENERATED' or 'VIRTUAL'/'PERSISTENT' (older MariaDB); not MySQL's
    'DEFAULT_GENERATED', which is an ordinary column with an expression default."""
    return bool({"VIRTUAL", "STORED", "PERSISTENT"} & set((extra or "").upper().split()))


def load_pair(conn: pymysql.connections.Connection, database: str, source: str, target: str,
              alter: str = "", target_conn: pymysql.connections.Connection | None = None,
              target_database: str = "", where: str = "") -> TablePair:
    """Describe the pair from information_schema and the ALTER text (its renamed and dropped columns).

    A source column fills the new column of the same name, or of the name the ALTER gives it; a column
    the ALTER drops fills nothing (a column added again under its name starts empty). Column names
    compare case-insensitively, as the server compares them.
    """
    changes = column_changes(alter)
    renamed = {old.lower(): new for old, new in changes.renamed.items()}
    dropped = {name.lower() for name in changes.dropped}
    fills: dict[str, str] = {}
    for column in columns_of(conn, database, source):
        new = renamed.get(column.lower())
        if new is None and column.lower() in dropped:
            continue
        fills[(new or column).lower()] = column
    rows = query(target_conn or conn, "SELECT COLUMN_NAME, EXTRA, COLUMN_DEFAULT FROM information_schema.COLUMNS "
                                      "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY ORDINAL_POSITION",
                 (target_database or database, target))
    mapped = [(name, fills[name.lower()]) for name, extra, _ in rows
              if not is_generated(extra) and name.lower() in fills]
    # a column the source does not fill takes its DEFAULT: one that is an expression (`(v * 2)`, `uuid()`) is worked
    # out again by each re-copy that inserts the row, and kept by one that writes it in place
    computed_default = any(not is_generated(extra) and name.lower() not in fills and not literal_default(default, extra)
                           for name, extra, default in rows)
    reads: tuple[str, ...] = ()
    if target_conn is not None:
        source_types = data_types(conn, database, source)
        target_types = data_types(target_conn, target_database or database, target)
        reads = tuple(remote_read(s, source_types[s.lower()], target_types[t.lower()]) for t, s in mapped)
    pk = primary_key(conn, database, source)
    upsert = (target_conn is None and not computed_default
              and key_only_unique(conn, database, source, pk, target_database or database, target))
    return TablePair(database, source, target, pk, tuple(t for t, _ in mapped), tuple(s for _, s in mapped),
                     target_database, target_conn is not None, where, reads, upsert)


def literal_default(default: str | None, extra: str) -> bool:
    """Whether information_schema.COLUMNS.COLUMN_DEFAULT is a constant: none, NULL, a quoted string or a number
    (MariaDB quotes string literals; MySQL marks an expression DEFAULT_GENERATED and leaves strings unquoted, which
    count here as expressions: the safe side)."""
    if "DEFAULT_GENERATED" in (extra or "").upper():
        return False
    return default is None or default == "NULL" or default.startswith("'") or bool(_NUMBER.fullmatch(default))


def key_only_unique(conn: pymysql.connections.Connection, source_database: str, source: str, source_key: PrimaryKey,
                    database: str, table: str) -> bool:
    """Whether the new table's only unique key is its primary key, on the source key's columns with their types,
    collations and prefix lengths. Then a row the new table already holds under a key can only be that key's own
    row, and a re-copy may write it in place: under another unique key, or a key the ALTER changed (a collation that
    folds two source keys into one, a key narrowed to a prefix), writing in place could merge rows the ALTER would
    refuse, so those re-copies delete and insert, which meets the refusal (applier/conflicts.py)."""
    unique = {r[0] for r in query(conn, "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE "
                                        "TABLE_SCHEMA=%s AND TABLE_NAME=%s AND NON_UNIQUE=0", (database, table))}
    if unique != {"PRIMARY"} or not source_key.columns:
        return False
    shape = [(c.name.lower(), c.column_type, c.collation) for c in source_key.columns]
    if [(c.name.lower(), c.column_type, c.collation) for c in primary_key(conn, database, table).columns] != shape:
        return False
    return _key_prefixes(conn, database, table) == _key_prefixes(conn, source_database, source)


def _key_prefixes(conn: pymysql.connections.Connection, database: str, table: str) -> list[int | None]:
    """The primary key's prefix lengths (STATISTICS.SUB_PART, None for a whole column), in key order."""
    return [None if r[0] is None else int(r[0]) for r in query(
        conn, "SELECT SUB_PART FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
              "AND INDEX_NAME='PRIMARY' ORDER BY SEQ_IN_INDEX", (database, table))]


def data_types(conn: pymysql.connections.Connection, database: str, table: str) -> dict[str, str]:
    """{lower-case column name: DATA_TYPE}."""
    return {r[0].lower(): r[1].lower() for r in query(
        conn, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
        (database, table))}


def remote_read(column: str, source_type: str, target_type: str) -> str:
    """How a source column is read for a new table on another server, so that the value written there is the one
    the server's own conversion (the ALTER's) would store: as it is when the type stays; a FLOAT widened to DOUBLE
    (whose text names the stored value exactly); into a number column, a BIT, ENUM, SET or temporal value as the
    server's number (`+ 0`: an ENUM's index, a DATE's YYYYMMDD; into an integer, a time's fraction cut off), into a
    text column a temporal or floating value as the server's text (a FLOAT's six digits, a TIME's own fraction) and
    a BIT as its number's digits."""
    ident = quote_ident(column)
    if target_type in STRING_TYPES and source_type in _RENDERED:
        return f"CAST({ident} AS CHAR)"
    if target_type in STRING_TYPES and source_type == "bit":
        return f"CAST({ident} + 0 AS CHAR)"
    if target_type in INTEGER_TYPES and source_type in _TEMPORAL:   # a fraction of a second is cut off
        return f"TRUNCATE({ident} + 0, 0)"
    if target_type in _NUMBERS and source_type in _IN_NUMBER_CONTEXT:
        return f"({ident} + 0)"
    if source_type == "float":
        return f"CAST({ident} AS DOUBLE)"
    return ident
