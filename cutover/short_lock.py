"""LOCK TABLES that queues in front of the application's statements only briefly, and only when nobody holds the table.

A lock request waiting for a table's metadata lock is ahead of every statement that arrives after it
(the server grants a pending exclusive request before new shared ones), so while it waits the
application waits too. Each try therefore first looks for sessions holding the table
(cutover/blockers.py) and gives up at once, without queueing, if there are any; otherwise it waits
at most `wait_s`, then withdraws, lets the statements that queued behind it run, and tries again.

How a try is bounded: MariaDB's `lock_wait_timeout` takes whole seconds only, but
`SET STATEMENT max_statement_time=<seconds> FOR LOCK TABLES …` interrupts the wait at any fraction
of a second (measured on 10.11: a 0.3 s try held a writer for 301 ms). MySQL has no such limit for
LOCK TABLES (its max_execution_time is for SELECT), so a try there waits `lock_wait_timeout`, whole
seconds, at least 1.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Callable, Sequence

import pymysql

from core.db import query
from core.logs import log_event
from cutover.blockers import Blocker

log = logging.getLogger("stream_osc.cutover")

MAX_BACKOFF_S = 2.0
_TIMED_OUT = (1205, 1969)   # ER_LOCK_WAIT_TIMEOUT; ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)


class LockNotTaken(Exception):
    """No try got the lock; `blockers` is set when sessions held the table (no lock was requested then)."""

    def __init__(self, message: str, blockers: tuple[Blocker, ...] = ()) -> None:
        super().__init__(message)
        self.blockers = blockers


def try_seconds(wait_s: float, is_mariadb: bool) -> float:
    """How long one try can really wait on this server."""
    return wait_s if is_mariadb else float(max(1, math.ceil(wait_s)))


def lock_statement(tables: list[str], wait_s: float, is_mariadb: bool, read_tables: Sequence[str] = ()) -> str:
    """The LOCK TABLES … WRITE (and `read_tables` … READ) of one try, bounded to `wait_s` where the server can
    bound it per statement."""
    lock = "LOCK TABLES " + ", ".join([f"{t} WRITE" for t in tables] + [f"{t} READ" for t in read_tables])
    return f"SET STATEMENT max_statement_time={wait_s:.3f} FOR {lock}" if is_mariadb else lock


def backoff_s(try_no: int, wait_s: float) -> float:
    """Pause after failed try `try_no` (1-based): long enough for the statements that queued behind it."""
    return min(wait_s * 2 ** (try_no - 1), MAX_BACKOFF_S)


def lock_tables_briefly(conn: pymysql.connections.Connection, tables: list[str], is_mariadb: bool, wait_s: float,
                        tries: int, blockers_now: Callable[[], list[Blocker]], read_tables: Sequence[str] = ()) -> int:
    """LOCK TABLES … WRITE in `conn` (with `read_tables` … READ), each try queueing at most `wait_s`; returns the
    tries it took.

    Raises LockNotTaken when sessions hold the table (before any request is queued) or every try timed out.
    """
    if not is_mariadb:
        query(conn, "SET SESSION lock_wait_timeout = %s", (int(try_seconds(wait_s, is_mariadb)),))
    sql = lock_statement(tables, wait_s, is_mariadb, read_tables)
    for try_no in range(1, tries + 1):
        blockers = blockers_now()
        if blockers:
            raise LockNotTaken(f"{len(blockers)} session(s) hold {tables[0]}: "
                               + "; ".join(b.describe() for b in blockers), tuple(blockers))
        started = time.monotonic()
        try:
            query(conn, sql)
            return try_no
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in _TIMED_OUT:
                raise
        log_event(log, "lock try timed out", logging.INFO, table=tables[0], try_no=try_no, tries=tries,
                  waited_ms=round((time.monotonic() - started) * 1000, 1))
        if try_no < tries:
            time.sleep(backoff_s(try_no, wait_s))
    raise LockNotTaken(f"could not lock {tables[0]} in {tries} tries of {try_seconds(wait_s, is_mariadb):.2f} s")
