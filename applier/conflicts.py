"""Rules the ALTER adds, enforced by the server as its own ALTER would, when rows reach the new table.

The new table refuses what the server's ALTER refuses: a value its type cannot hold (strict mode), a
NULL in a NOT NULL column, a failed CHECK, a second row under a UNIQUE key (prefix keys and collation
changes included). When the copy or an applier meets a refusal it is one of two things:

- real: the source's current rows break the rule. The migration stops with the server's verdict and
  a sample of the rows; no row of any table is deleted (ConstraintViolated).
- a stale row of the new table: a row copied earlier whose later change is still in the topic collides
  with the row being written (row 5 copied with u='x', then the application moved 'x' to row 900). It
  is removed so the row at hand can be written; its change is applied later.

The server decides which, never a Python comparison: a ConstraintCheck puts the source's current rows into
its probe table, a TEMPORARY table created LIKE the new table without its UNIQUE keys, where the server converts
and checks them as the new table would. UNIQUE keys are then checked on those converted rows by grouping
on the key parts (LEFT(col, SUB_PART) for prefix parts; rows with a NULL part never collide, as in
the index). Every statement names the probe table once (MySQL cannot reopen a TEMPORARY table).
Each statement reads its own moment (READ COMMITTED), and the copy does not lock the rows it checks: a
verdict drawn from rows read at two moments is judged again on rows read in one statement, and when the
rows changed in between, the round proves nothing either way; it is rolled back and tried again (RowsMoved).
A round that removed the stale collisions writes the rows it checked (ConstraintCheck.write_checked).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import pymysql

from core.keys import Key, show_key
from core.logs import log_event
from core.table import TablePair
from core.db import qualified, query, query_count, quote_ident

log = logging.getLogger("stream_osc.conflicts")

T = TypeVar("T")

SAMPLE = 5   # rows shown in an error
ROUNDS = 10   # writes that meet a refusal: each round re-reads the source and decides again
# A value the new column refuses in strict mode: NULL into NOT NULL (1048, 1263), out of range (1264,
# 1690), truncated or wrong (1265, 1292, 1366), too long (1406), CHECK failed (MariaDB 4025, MySQL 3819).
VALUE_REFUSED = frozenset({1048, 1263, 1264, 1265, 1292, 1366, 1406, 1690, 3819, 4025})
DUPLICATE = frozenset({1062, 1586})
ROW_NUMBER = re.compile(r" at row \d+")
COLUMN_NAMED = re.compile(r"[Cc]olumn '([^']+)'")


class ConstraintViolated(Exception):
    """The table's rows, or a write made to it during the migration, break a rule the ALTER adds."""

    user_facing = True


class RowsMoved(Exception):
    """The source's rows changed between the check's reads: the round proves nothing and is tried again."""


def refused_by_new_table(exc: BaseException) -> bool:
    """True for an error by which the new table refuses a row (a value or a UNIQUE key)."""
    return (isinstance(exc, pymysql.err.MySQLError) and len(exc.args) > 1
            and exc.args[0] in VALUE_REFUSED | DUPLICATE and not primary_key_race(exc))


PRIMARY_DUPLICATE = re.compile(r"for key '(?:[^']*\.)?PRIMARY'")   # MariaDB 'PRIMARY', MySQL 8 'db.t.PRIMARY'


def primary_key_race(exc: BaseException) -> bool:
    """True for a duplicate on the PRIMARY key: another session re-copied the same key between this
    one's DELETE (which found no row, so locked nothing) and its INSERT. Not a refusal: retry."""
    return (isinstance(exc, pymysql.err.MySQLError) and len(exc.args) > 1 and exc.args[0] in DUPLICATE
            and PRIMARY_DUPLICATE.search(str(exc.args[1])) is not None)


@dataclass(frozen=True)
class UniqueKey:
    """A UNIQUE key of the new table: name and (column, prefix length or None) parts."""

    name: str
    parts: tuple[tuple[str, int | None], ...]

    def exprs(self, alias: str | None = None) -> list[str]:
        """The key's parts as SQL expressions: what the index compares."""
        found = []
        for column, sub_part in self.parts:
            col = quote_ident(column) if alias is None else f"{alias}.{quote_ident(column)}"
            found.append(col if sub_part is None else f"LEFT({col}, {int(sub_part)})")
        return found

    def values(self, alias: str | None = None) -> str:
        return ", ".join(self.exprs(alias))

    def equal(self, a: str, b: str) -> str:
        """SQL: rows a and b collide under the key (`=`: a NULL part never collides, as in the index)."""
        return " AND ".join(f"{x} = {y}" for x, y in zip(self.exprs(a), self.exprs(b)))

    def __str__(self) -> str:
        parts = ", ".join(c if n is None else f"{c}({n})" for c, n in self.parts)
        return f"{self.name!r} ({parts})"


def unique_keys(conn: pymysql.connections.Connection, database: str, table: str) -> tuple[list[str], list[UniqueKey]]:
    """(names of every secondary UNIQUE index, the keys among them made of columns).

    A key part that is an expression (MySQL functional index) has no column: such a key is dropped from
    the probe but not checked; a conflict under it stays the server's error (see unresolved()).
    """
    parts: dict[str, list[tuple[str, int | None]]] = {}
    on_expression: set[str] = set()
    for name, column, sub_part in query(conn, """SELECT INDEX_NAME, COLUMN_NAME, SUB_PART
            FROM information_schema.STATISTICS
            WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s AND NON_UNIQUE=0 AND INDEX_NAME<>'PRIMARY'
            ORDER BY INDEX_NAME, SEQ_IN_INDEX""", (database, table)):
        parts.setdefault(name, [])
        if column is None:
            on_expression.add(name)
        else:
            parts[name].append((column, None if sub_part is None else int(sub_part)))
    return list(parts), [UniqueKey(n, tuple(p)) for n, p in parts.items() if n not in on_expression]


def drop_unique_keys(conn: pymysql.connections.Connection, probe: str, database: str, table: str,
                     names: list[str]) -> None:
    """Drop the UNIQUE keys `names` from `probe`, a TEMPORARY copy of `database`.`table`.

    An AUTO_INCREMENT column must lead an index, or the server refuses the definition (a UUID-keyed table
    with a counter indexed only by a UNIQUE key): one that leads no index the probe keeps (the primary key,
    a plain index) gets a plain index of its own, an integer's, which never refuses a row."""
    if not names:
        return
    clauses = [f"DROP INDEX {quote_ident(n)}" for n in names]
    auto = query(conn, """SELECT c.COLUMN_NAME FROM information_schema.COLUMNS c
        WHERE c.TABLE_SCHEMA=%s AND c.TABLE_NAME=%s AND c.EXTRA LIKE %s AND NOT EXISTS (
            SELECT 1 FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA=c.TABLE_SCHEMA
            AND s.TABLE_NAME=c.TABLE_NAME AND s.COLUMN_NAME=c.COLUMN_NAME AND s.SEQ_IN_INDEX=1
            AND (s.INDEX_NAME='PRIMARY' OR s.NON_UNIQUE=1))""", (database, table, "%auto_increment%"))
    if auto:
        clauses.append(f"ADD INDEX stream_osc_auto_increment ({quote_ident(auto[0][0])})")
    query(conn, f"ALTER TABLE {probe} " + ", ".join(clauses))


@dataclass(frozen=True)
class Refusal:
    """A source row the new definition refuses, with the server's error."""

    pk: Key
    code: int
    message: str


def show(value: Any) -> str:
    """A value for an error message, cut short."""
    if value is None:
        return "NULL"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ConstraintCheck:
    """Checks the source's rows against the new table's rules and removes the new table's stale rows that collide
    with them, through a TEMPORARY table LIKE the new table without its UNIQUE keys (the probe table), in one session.

    Create it outside any transaction (its ALTER commits implicitly); use it inside one. Under LOCK
    TABLES it needs no lock of its own.
    """

    def __init__(self, conn: pymysql.connections.Connection, pair: TablePair, during_apply: bool) -> None:
        self.conn = conn
        self.pair = pair
        self.during_apply = during_apply
        self.table = f"{pair.target[:58]}_probe"   # per session: the name only has to fit
        self.name = qualified(pair.database, self.table)
        self.keys: list[UniqueKey] = []

    def __enter__(self) -> "ConstraintCheck":
        names, self.keys = unique_keys(self.conn, self.pair.database, self.pair.target)
        query(self.conn, f"DROP TEMPORARY TABLE IF EXISTS {self.name}")
        query(self.conn, f"CREATE TEMPORARY TABLE {self.name} LIKE {self.pair.target_name}")
        drop_unique_keys(self.conn, self.name, self.pair.database, self.pair.target, names)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            query(self.conn, f"DROP TEMPORARY TABLE IF EXISTS {self.name}")
        except pymysql.err.Error:
            if kind is None:
                raise   # else the session is likely gone, and its temporary table with it

    # the decision ----------------------------------------------------------------------------------
    def remove_stale_collisions(self, keys: Sequence[Key]) -> int:
        """Check the source's current rows `keys` against the new definition and remove the new table's
        stale rows that collide with them; returns how many were removed. The probe table then holds those rows,
        as read and converted in one statement: write_checked() writes them.

        Runs in the caller's transaction (an applier's holds the locks of `keys`), after the new table's
        own rows of `keys` were deleted. Raises ConstraintViolated when the rules are really broken.
        A colliding row q of the new table is stale when q's current source row no longer collides.
        That current row is read after q was removed (its row lock held until commit): if q differs
        then, a change of q committed after the stale copy was made, and its applier writes q after this
        transaction (its write waits for that lock), so removing q loses nothing, whatever the timing.
        Raises RowsMoved when that cannot be told because rows changed between the reads (the copy's rows of
        `keys` are not locked); the caller rolls back, so nothing is removed, and tries again.
        """
        pk = self.pair.pk
        query(self.conn, f"DELETE FROM {self.name}")
        self._refuse(self._insert_source_rows(keys))
        self._check_duplicates()
        colliding: dict[Key, None] = {}
        # No alias: under LOCK TABLES a table is known by its locked name. A key whose first part is a
        # prefix cannot use the new table's index here (LEFT() on its column): a scan, on this rare path.
        # Rows of another key (under the key's collation) than the probe row they collide with.
        target = self.pair.target_name
        other_key = " OR ".join(f"NOT {target}.{c.ident} <=> p.{c.ident}" for c in pk.columns)
        for key in self.keys:
            colliding.update((tuple(r), None) for r in query(
                self.conn, f"SELECT DISTINCT {pk.column_list(target)} FROM {target} JOIN {self.name} p "
                           f"ON {key.equal(target, 'p')} WHERE {other_key}"))
        # Leaving out `keys` themselves is only a saving: a caller rewrites their rows anyway.
        own = set(keys)
        stale = [k for k in colliding if k not in own]
        if not stale:
            return 0
        removed = 0
        for key in self.keys:   # only while still colliding: a row rewritten meanwhile is left alone
            removed += query_count(self.conn, f"DELETE FROM {self.pair.target_name} WHERE {pk.in_list(len(stale))} "
                                              f"AND ({key.values()}) IN (SELECT {key.values('p')} FROM {self.name} p)",
                                   pk.flat(stale))
        self._refuse(self._insert_source_rows(stale))
        if self._duplicate() is None:
            query(self.conn, f"DELETE FROM {self.name} WHERE {pk.in_list(len(stale))}", pk.flat(stale))
            return removed
        # A stale row still collides, but `keys` were read before it: under READ COMMITTED each statement
        # reads its own moment. Read together in one statement, a duplicate is the source's own; none means
        # rows changed between the reads (two rows exchanged a value, or the row of `keys` moved away from
        # it), and q's removal is not proven: the caller rolls the round back and tries again.
        query(self.conn, f"DELETE FROM {self.name}")
        self._refuse(self._insert_source_rows([*keys, *stale]))
        self._check_duplicates()
        raise RowsMoved(f"rows of {self._table} changed while their UNIQUE values were checked")

    def write_checked(self) -> int:
        """Insert into the new table the rows remove_stale_collisions checked, as it read them; returns how many.

        Not the source's rows read again: a row that took a UNIQUE value from a copied row after the check
        would collide with that row's stale copy, and a copy batch, which locks no source row, met that in
        round after round under a steady stream of such moves. A change after the check is the appliers' to
        write, as any change after a batch's read is (applier/uncopied.py)."""
        with self.conn.cursor() as cur:
            return cur.execute(f"INSERT INTO {self.pair.target_name} ({self.pair.target_column_list}) "
                               f"SELECT {self.pair.target_column_list} FROM {self.name}")

    def _insert_source_rows(self, keys: Sequence[Key]) -> list[Refusal]:
        """Put the source's current rows `keys` into the probe table; returns the ones the server refuses
        (at most SAMPLE), found by halving the failing statement down to single rows."""
        if not keys:
            return []
        pk = self.pair.pk
        try:
            query(self.conn, f"INSERT INTO {self.name} ({self.pair.target_column_list}) SELECT "
                             f"{self.pair.source_column_list} FROM {self.pair.source_name} "
                             f"WHERE {pk.in_list(len(keys))}", pk.flat(keys))
            return []
        except pymysql.err.MySQLError as exc:
            if not exc.args or exc.args[0] not in VALUE_REFUSED:
                raise
            if len(keys) == 1:
                return [Refusal(keys[0], exc.args[0], exc.args[1])]
        half = len(keys) // 2
        found = self._insert_source_rows(keys[:half])
        if len(found) < SAMPLE:
            found += self._insert_source_rows(keys[half:])
        return found[:SAMPLE]

    def _duplicate(self) -> tuple[UniqueKey, list[tuple]] | None:
        """The first UNIQUE key of the new table under which rows in the probe collide, with up to two of
        its shared values (as COUNT(*), *value); None when no rows collide."""
        for key in self.keys:
            not_null = " AND ".join(f"{quote_ident(c)} IS NOT NULL" for c, _ in key.parts)
            groups = query(self.conn, f"SELECT COUNT(*), {key.values()} FROM {self.name} WHERE {not_null} "
                                      f"GROUP BY {key.values()} HAVING COUNT(*) > 1 LIMIT 2")
            if groups:
                return key, groups
        return None

    def _check_duplicates(self) -> None:
        """Raise when rows in the probe collide under a UNIQUE key of the new table."""
        found = self._duplicate()
        if found is not None:
            raise ConstraintViolated(self._describe_duplicates(*found))

    # messages --------------------------------------------------------------------------------------
    @property
    def _table(self) -> str:
        return f"{self.pair.database}.{self.pair.source}"

    def _describe_duplicates(self, key: UniqueKey, groups: list[tuple]) -> str:
        count, *value = groups[0]
        pk, columns = self.pair.pk, [c for c, _ in key.parts]
        width = len(pk.columns)
        rows = query(self.conn, f"SELECT {pk.column_list()}, {', '.join(quote_ident(c) for c in columns)} "
                                f"FROM {self.name} WHERE ({key.values()}) = ({', '.join(['%s'] * len(value))}) "
                                f"ORDER BY {pk.column_list()} LIMIT {SAMPLE}", value)
        sample = ", ".join(f"{show_key(pk, tuple(r[:width]))} ("
                           + ", ".join(f"{c}={show(v)}" for c, v in zip(columns, r[width:])) + ")"
                           for r in rows)
        more = "; other values collide too" if len(groups) > 1 else ""
        shared = ", ".join(show(v) for v in value)
        if self.during_apply:
            return (f"a write to {self._table} during the migration breaks UNIQUE key {key} that the ALTER adds: "
                    f"{count} rows share the value ({shared}): {sample}{more}")
        return (f"the ALTER adds UNIQUE key {key} but {count} rows of {self._table} "
                f"share the value ({shared}): {sample}{more}")

    def _refuse(self, refusals: list[Refusal]) -> None:
        """Raise for rows the new definition refuses, naming each row's values and the server's error."""
        if not refusals:
            return
        pair, pk = self.pair, self.pair.pk
        width = len(pk.columns)
        values = {tuple(r[:width]): r[width:] for r in query(
            self.conn, f"SELECT {pk.column_list()}, {pair.source_column_list} FROM {pair.source_name} "
                       f"WHERE {pk.in_list(len(refusals))}", pk.flat(r.pk for r in refusals))}
        probe_name = f"{quote_ident(pair.database)}.{quote_ident(self.table)}"
        described = []
        for refusal in refusals:
            message = ROW_NUMBER.sub("", refusal.message).replace(probe_name, pair.source_name)
            named = COLUMN_NAMED.search(message)
            row = values.get(refusal.pk, ())
            shown = [(s, v) for t, s, v in zip(pair.target_columns, pair.source_columns, row)
                     if named is None or t == named.group(1)][:6]
            columns = ", ".join(f"{c}={show(v)}" for c, v in shown)
            described.append(f"{show_key(pk, refusal.pk)} ({columns}): {message} (error {refusal.code})")
        written = " written during the migration" if self.during_apply else ""
        raise ConstraintViolated(f"the ALTER's new definition refuses rows of {self._table}{written}, as the "
                                 f"server's ALTER would: " + "; ".join(described))


def unresolved(pair: TablePair, exc: pymysql.err.MySQLError, during_apply: bool) -> ConstraintViolated:
    """The new table kept refusing a row although no rule-breaking rows could be named (e.g. a UNIQUE key
    on an expression): the server's own error, as a stop."""
    written = " written during the migration" if during_apply else ""
    return ConstraintViolated(f"the ALTER's new definition refuses a row of {pair.database}.{pair.source}{written}: "
                              f"{ROW_NUMBER.sub('', str(exc.args[1]))} (error {exc.args[0]})")


def with_refusals_resolved(conn: pymysql.connections.Connection, pair: TablePair,
                           write: Callable[[ConstraintCheck | None], T], *, during_apply: bool, rounds: int,
                           before_constraint_check: Callable[[], None] = lambda: None) -> T:
    """Run `write` (one transaction); if the new table refuses a row, run it again with a ConstraintCheck
    that removes the stale rows colliding with it or raises ConstraintViolated, up to `rounds` times.

    The one loop of the copy and the appliers: a refusal is never hidden, and never resolved by
    deleting a row the server has not shown to be stale. Other errors propagate.
    """
    try:
        return write(None)
    except pymysql.err.MySQLError as exc:
        if not refused_by_new_table(exc):
            raise
        refusal = exc
    before_constraint_check()
    # made between transactions: its DDL commits
    with ConstraintCheck(conn, pair, during_apply=during_apply) as constraint_check:
        for _ in range(rounds):
            try:
                return write(constraint_check)
            except RowsMoved:
                log_event(log, "rows moved while a refusal was checked; checked again", logging.DEBUG,
                          table=pair.source)
                continue   # `write` rolled its transaction back: nothing was removed
            except pymysql.err.MySQLError as exc:
                if not refused_by_new_table(exc):
                    raise
                refusal = exc
                log_event(log, "the new table refused a row again; checked again", logging.DEBUG,
                          table=pair.source, reason=str(exc.args[1]))
    raise unresolved(pair, refusal, during_apply=during_apply)
