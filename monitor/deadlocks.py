"""The server's own reports of deadlocks, read from its error log, and who took part in each.

With `innodb_print_all_deadlocks = ON` the server writes every deadlock it resolves to its error log: each
transaction of the cycle with the statement it was running and the locks it held and waited for, then
`WE ROLL BACK TRANSACTION (N)`, the victim. The tool's statements all open with its tag (core/db.py,
STATEMENT_TAG), so a report tells a deadlock the tool took part in from one between application transactions
alone (invariant 10: the tool gives way, the application never does).

Text in, facts out: `ErrorLog` reads the log from a position noted before the work (tests/integration/deadlocks.py
and bench/conflicts.py say which file, and when it cannot be read). Both MariaDB's layout (the report split over
several `[Note] InnoDB:` lines) and MySQL 8's (one `[InnoDB]` prefix per line) are read.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from core.db import STATEMENT_TAG

_TAG = STATEMENT_TAG.strip()
_START = re.compile(r"Transactions deadlock detected")
_TRANSACTION = re.compile(r"\*\*\* \((\d+)\) TRANSACTION:")
_THREAD = re.compile(r"(?:MariaDB|MySQL) thread id (\d+)")
_VICTIM = re.compile(r"WE ROLL BACK TRANSACTION \((\d+)\)")
# a line of the log's own (a timestamped message) or of the report's sections ends a statement's text
_TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")
_SECTION = re.compile(r"^(?:\*\*\* |RECORD LOCKS |TABLE LOCK |Record lock, |\s*\d+: len \d+;)")
# the tool's own tables (core/spec.py, helper_table_name; a conflict probe's table adds `_probe`)
_TOOL_TABLE = re.compile(r"(?:_osc_|~)(?:new|old)(?:_probe)?$")
_TABLE = re.compile(r"(?:of table|TABLE LOCK table) `((?:[^`]|``)+)`\.`((?:[^`]|``)+)`")


@dataclass(frozen=True)
class DeadlockTransaction:
    """One transaction of a deadlock's cycle, as the report shows it."""

    number: int                              # the N of `*** (N) TRANSACTION`
    thread_id: int | None                    # the server's session id
    statement: str                           # the statement it was running ('' if the report shows none)
    tables: tuple[tuple[str, str], ...]      # (schema, table) of every lock the report shows it holding or awaiting

    @property
    def by_tool(self) -> bool:
        """The statement is the tool's (it opens with the tool's tag); or the report shows no statement (one between
        statements, or finishing) and every lock it shows is on the tool's own tables, which no application writes."""
        if self.statement.strip():
            return self.statement.lstrip().startswith(_TAG)
        return bool(self.tables) and all(_TOOL_TABLE.search(table) for _, table in self.tables)

    def short(self, limit: int = 300) -> str:
        """The statement on one line, cut to `limit` characters (a re-copy's key list runs to thousands)."""
        text = " ".join(self.statement.split())
        return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


@dataclass(frozen=True)
class Deadlock:
    """One deadlock the server resolved: its transactions and the one it rolled back."""

    at: str                                  # the timestamp of the report's first line, as the log wrote it
    transactions: tuple[DeadlockTransaction, ...]
    victim: int | None                       # the rolled-back transaction's number; None if the text ends before it

    @property
    def tool_took_part(self) -> bool:
        return any(t.by_tool for t in self.transactions)

    @property
    def application_took_part(self) -> bool:
        """A transaction whose statement is not the tool's took part (the tool's own sessions alone otherwise)."""
        return any(not t.by_tool for t in self.transactions)

    @property
    def rolled_back(self) -> DeadlockTransaction | None:
        return next((t for t in self.transactions if t.number == self.victim), None)

    @property
    def application_rolled_back(self) -> bool:
        """The server rolled back an application's transaction (one whose statement is not the tool's)."""
        victim = self.rolled_back
        return victim is not None and not victim.by_tool

    @property
    def tables(self) -> frozenset[tuple[str, str]]:
        return frozenset(name for t in self.transactions for name in t.tables)

    def touches(self, schemas: set[str] | frozenset[str]) -> bool:
        """Some lock of the cycle is on a table of one of `schemas` (a report showing no table counts as touching
        them: better named than missed)."""
        return not self.tables or any(db in schemas for db, _ in self.tables)

    def describe(self) -> str:
        """Several lines: who took part (tool or application), each statement, and who was rolled back."""
        who = "a stream-osc statement took part" if self.tool_took_part else "application transactions alone"
        lines = [f"deadlock at {self.at} ({who}) on {', '.join(sorted(f'{d}.{t}' for d, t in self.tables)) or '?'}"]
        for t in self.transactions:
            mark = "ROLLED BACK " if t.number == self.victim else ""
            lines.append(f"  ({t.number}) {mark}{'stream-osc' if t.by_tool else 'application'} thread {t.thread_id}: "
                         f"{t.short()}")
        if self.victim is None:
            lines.append("  (the report ends before naming the transaction rolled back)")
        return "\n".join(lines)


def parse_deadlocks(text: str) -> list[Deadlock]:
    """Every deadlock report that starts in `text` (a part of the error log), in the order written. Text before the
    first report's start (a window that opens inside a report) is skipped; a report the text cuts short keeps what
    it shows, with no victim."""
    found: list[Deadlock] = []
    current: _Report | None = None
    for line in text.splitlines():
        if _START.search(line):
            if current is not None:
                found.append(current.done())
            current = _Report(at=_timestamp(line))
            continue
        if current is None:
            continue
        victim = _VICTIM.search(line)
        if victim:
            current.victim = int(victim.group(1))
            found.append(current.done())
            current = None
            continue
        current.line(line)
    if current is not None:
        found.append(current.done())
    return found


def _timestamp(line: str) -> str:
    match = re.match(r"^(\d{4}-\d\d-\d\d[ T][\d:.]+)", line)
    return match.group(1) if match else "?"


def _unquote(name: str) -> str:
    return name.replace("``", "`")


class _Report:
    """A report being read: its transactions so far."""

    def __init__(self, at: str) -> None:
        self.at = at
        self.victim: int | None = None
        self.transactions: list[dict] = []
        self.in_statement = False

    def line(self, line: str) -> None:
        header = _TRANSACTION.search(line)
        if header:
            self.transactions.append({"number": int(header.group(1)), "thread_id": None, "statement": [],
                                      "tables": []})
            self.in_statement = False
            return
        if not self.transactions:
            return
        current = self.transactions[-1]
        thread = _THREAD.search(line)
        if thread and current["thread_id"] is None:
            current["thread_id"] = int(thread.group(1))
            self.in_statement = True
            return
        if self.in_statement:
            if _TIMESTAMPED.match(line) or _SECTION.match(line) or "*** " in line:
                self.in_statement = False
            else:
                current["statement"].append(line)
                return
        for db, table in _TABLE.findall(line):
            name = (_unquote(db), _unquote(table))
            if name not in current["tables"]:
                current["tables"].append(name)

    def done(self) -> Deadlock:
        return Deadlock(self.at, tuple(DeadlockTransaction(t["number"], t["thread_id"],
                                                           "\n".join(t["statement"]).strip(), tuple(t["tables"]))
                                       for t in self.transactions), self.victim)


class ErrorLog:
    """The server's error log as this machine reads it (`path`), or why it cannot be (`why_not`, path None)."""

    def __init__(self, path: Path | None, why_not: str = "") -> None:
        self.path, self.why_not = path, why_not

    def position(self) -> int:
        """Where the log ends now (0 when it cannot be read): the reports of later work are written after it."""
        try:
            return self.path.stat().st_size if self.path else 0
        except OSError:
            return 0

    def since(self, position: int) -> str:
        """The log's text from `position` to its end (from its start if it was replaced by a shorter one)."""
        if self.path is None:
            return ""
        with open(self.path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(position if size >= position else 0)
            return file.read().decode(errors="replace")
