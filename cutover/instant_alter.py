"""The server's own instant change, tried on the table itself: one try queues in front of the application's
statements at most --lock-wait-timeout, and only when nobody holds the table (docs/cutover.md, "Look before
locking"); and the dry run's try on an empty copy of the table.

Why the try needs the cutover's discipline: an ALTER … ALGORITHM=INSTANT first checks that it can be done (and is
refused at once when it cannot, waiting for nothing), then waits for the table's exclusive metadata lock for its
moment of change. While it waits, every statement that arrives after it waits behind it, as behind the cutover's
LOCK TABLES. So the holders of the table are looked for first, and the wait is bounded by the server itself: the
session's `lock_wait_timeout` (whole seconds, at least 1), and on MariaDB `max_statement_time` for the statement,
which ends the wait at any fraction of a second (as the cutover's lock try, cutover/short_lock.py). A try that
times out changed nothing (the server's DDL is atomic), which the caller checks against the table's definition.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import pymysql

from core.db import qualified, query
from core.instant import TIMED_OUT_ERRORS, instant_statement, not_instant_reason
from core.source_check import table_identity
from core.spec import MigrationSpec
from cutover.blockers import Blocker

LOST_CONNECTION_ERRORS = (2006, 2013)   # gone away, lost during the query: whether the ALTER ran is not known


@dataclass(frozen=True)
class InstantTry:
    """What one try came to: the change made, the server's refusal (the copy runs), a lock wait that timed out,
    a session cut mid-statement, or holders of the table seen before anything was asked (nothing queued)."""

    done: bool = False
    refusal: str | None = None
    timed_out: bool = False
    lost: bool = False
    blockers: tuple[Blocker, ...] = ()
    took_ms: float = 0.0


def lock_wait_setting(wait_s: float) -> int:
    """The session's lock_wait_timeout for a try: whole seconds, at least 1 (what both servers take)."""
    return max(1, math.ceil(wait_s))


def bounded_statement(statement: str, wait_s: float, is_mariadb: bool) -> str:
    """The try's statement, bounded to `wait_s` where the server bounds one statement (MariaDB)."""
    return f"SET STATEMENT max_statement_time={wait_s:.3f} FOR {statement}" if is_mariadb else statement


def prepare_session(conn: pymysql.connections.Connection, wait_s: float) -> None:
    """Bound every lock wait of the try session: lock_wait_timeout for the metadata lock, before any try."""
    query(conn, "SET SESSION lock_wait_timeout = %s", (lock_wait_setting(wait_s),))


def try_instant(conn: pymysql.connections.Connection, statement: str, wait_s: float, is_mariadb: bool,
                blockers_now: Callable[[], list[Blocker]]) -> InstantTry:
    """One try of `statement` (core/instant.py: instant_statement) in `conn` (prepared by prepare_session), unless
    `blockers_now()` finds sessions holding the table: then nothing is asked."""
    blockers = blockers_now()
    if blockers:
        return InstantTry(blockers=tuple(blockers))
    started = time.monotonic()
    try:
        query(conn, bounded_statement(statement, wait_s, is_mariadb))
    except pymysql.err.MySQLError as exc:
        took_ms = (time.monotonic() - started) * 1000
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        if code in TIMED_OUT_ERRORS:
            return InstantTry(timed_out=True, took_ms=took_ms)
        if code in LOST_CONNECTION_ERRORS:
            return InstantTry(lost=True, took_ms=took_ms)
        return InstantTry(refusal=refusal_text(code, message), took_ms=took_ms)
    return InstantTry(done=True, took_ms=(time.monotonic() - started) * 1000)


def refusal_text(code: int, message: str) -> str:
    """Why the copy runs after the server refused the try: its "not instantly", or another error (which the copy's
    own ALTER on the new table meets again, and reports as init always has)."""
    return not_instant_reason(code, message) or f"the instant try failed: {message} (server error {code})"


REBUILT = ("the server rebuilds the table for this ALTER although asked for ALGORITHM=INSTANT (an empty copy of it "
           "got a new InnoDB table id), which on the table itself would be a copy under its lock")


def refusal_on_empty_copy(conn: pymysql.connections.Connection, spec: MigrationSpec) -> str | None:
    """None when the server makes the ALTER with ALGORITHM=INSTANT on an empty copy of the table (CREATE TABLE …
    LIKE under the new table's name, which preflight found free; dropped after) without rebuilding it, else why
    not: asked before the try on the table itself, and by the dry run. A rebuild is told by the InnoDB table id,
    which only a new table gets: MariaDB 10.11 takes `ORDER BY` with ALGORITHM=INSTANT and copies the table. The
    table itself can differ (its row format, the instant changes it has had): the server then refuses at once."""
    scratch = qualified(spec.database, spec.new_table)
    query(conn, f"CREATE TABLE {scratch} LIKE {qualified(spec.database, spec.table)}")
    try:
        before = table_identity(conn, spec.database, spec.new_table)
        query(conn, instant_statement(spec.database, spec.new_table, spec.alter))
        return None if table_identity(conn, spec.database, spec.new_table) == before else REBUILT
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        return refusal_text(code, str(exc.args[1]) if len(exc.args) > 1 else str(exc))
    finally:
        query(conn, f"DROP TABLE IF EXISTS {scratch}")
