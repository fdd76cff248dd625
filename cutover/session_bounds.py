"""Server-side bounds of the cutover's sessions: the server itself ends a lock that the coordinator can no longer end.

The window is the coordinator's own clock. A coordinator that stops answering (SIGSTOP, a paused VM, a cut
network) while its session holds `LOCK TABLES` would otherwise hold the application until the server's
`wait_timeout` (8 h by default) ends the idle session (STACK.md, "Freezing the coordinator in its lock"). So each
lock session (and a move's target session) is given, before it locks:

- `wait_timeout`: no wait under the lock leaves the session idle longer than the window (the fence's round trip
  and the RENAME's queueing are both bounded by what remains of it), so ceil(window) + MARGIN_S never ends a live
  attempt, and a frozen one loses its session, and so its locks, that long after its last statement;
- `net_read_timeout` / `net_write_timeout`: the same bound for a coordinator that stops mid-packet or stops
  reading a result;
- MariaDB `max_statement_time`: no statement under the lock may run longer than the window. It is set only on
  sessions that are closed after the attempt, and only once the catch-up (which may legitimately take longer)
  is over; `LOCK TABLES` carries its own, shorter limit (cutover/short_lock.py).

Sessions bounded so are never reused: every attempt closes them.
"""
from __future__ import annotations

import math
import time

import pymysql

from core.db import query, scalar

MARGIN_S = 2   # above the window: a live coordinator's scheduling delays on a busy machine never reach it


def idle_limit_s(window_s: float) -> int:
    """Seconds a lock session may stay idle (whole seconds: that is what the server takes)."""
    return math.ceil(window_s) + MARGIN_S


def lock_session_settings(window_s: float, is_mariadb: bool) -> dict[str, float]:
    """The session variables that make the server end a lock session whose coordinator stopped answering."""
    idle = idle_limit_s(window_s)
    settings: dict[str, float] = {"wait_timeout": idle, "net_read_timeout": idle, "net_write_timeout": idle}
    if is_mariadb:
        settings["max_statement_time"] = round(window_s + MARGIN_S, 3)
    return settings


def remaining_statement_settings(remaining_s: float, is_mariadb: bool) -> dict[str, float]:
    """Limits on each statement of a session (a move's target) that must end within what remains of the window:
    MariaDB stops any statement at max_statement_time (a fraction of a second is honoured, lock waits included);
    MySQL has no such limit for writes and DDL (max_execution_time is for SELECT) and its lock waits take whole
    seconds, so there the whole seconds are a backstop and a watchdog (cutover/watchdog.py) does the rest."""
    whole = max(1, math.ceil(remaining_s))
    settings: dict[str, float] = {"lock_wait_timeout": whole, "innodb_lock_wait_timeout": whole}
    if is_mariadb:
        settings["max_statement_time"] = round(max(remaining_s, 0.001), 3)
    return settings


def apply_settings(conn: pymysql.connections.Connection, settings: dict[str, float]) -> None:
    """One SET SESSION for all of them (a round trip, not one per variable)."""
    names = list(settings)
    query(conn, "SET SESSION " + ", ".join(f"{name} = %s" for name in names), tuple(settings[n] for n in names))


def bound_lock_session(conn: pymysql.connections.Connection, window_s: float, is_mariadb: bool) -> None:
    """Before a session locks (or writes under another session's lock): the server ends it if it goes quiet."""
    apply_settings(conn, lock_session_settings(window_s, is_mariadb))


def tighten_idle_limit(conn: pymysql.connections.Connection, deadline: float) -> None:
    """Under the lock, before its last wait: the idle bounds lowered to what remains of the window, so that a
    coordinator frozen late in the window is not given a whole window more."""
    idle = math.ceil(max(deadline - time.monotonic(), 0.0)) + MARGIN_S
    apply_settings(conn, {"wait_timeout": idle, "net_read_timeout": idle, "net_write_timeout": idle})


def server_is_mariadb(conn: pymysql.connections.Connection) -> bool:
    """Whether the session's server is MariaDB (a move's target may differ from the source)."""
    return "mariadb" in str(scalar(conn, "SELECT VERSION()")).lower()
