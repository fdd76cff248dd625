"""Load-based throttling: workers hold back while the server's status counters are over --max-load,
and the migration stops when they reach --critical-load (like gh-ost's flags of the same names)."""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence

import pymysql

from core.db import query
from throttle.redo_fill import STATUS_NAMES, redo_capacity, redo_fill_percent, redo_reason

READ_EVERY_S = 1.0
FIGURES = re.compile(r"\d+(?:\.\d+)?")
OPTION_NAMED = re.compile(r"\((--[a-z][a-z-]*)")


def throttle_cause(reason: str | None) -> str | None:
    """The option a throttle reason names (its text without figures when it names none): a reason whose
    figures, variable or host change under one option is one cause, told once; another option's is another."""
    if reason is None:
        return None
    return throttle_option(reason) or FIGURES.sub("#", reason)


def throttle_option(reason: str) -> str | None:
    """The option a throttle reason names (`--max-load`), if it names one."""
    found = OPTION_NAMED.search(reason)
    return found.group(1) if found else None


def throttle_change(before: str | None, now: str | None) -> list[str]:
    """The lines that tell a change of what holds the work back (a release, then the new cause, when one
    cause follows another without a gap): none when only the figures moved."""
    if throttle_cause(before) == throttle_cause(now):
        return []
    lines = []
    if before is not None:
        option = throttle_option(before)
        lines.append(f"throttle released ({option})" if option else "throttle released")
    if now is not None:
        lines.append(f"throttled: {now}")
    return lines


class CriticalLoad(Exception):
    """A --critical-load threshold was reached: the migration stops (and can be resumed later)."""

    user_facing = True


CRITICAL_LOAD_REACHED = "critical load reached ("
TARGET_SERVER_PREFIX = "on the target server "   # how throttle/target_load.py names the server a critical load is on


def critical_load_reached(critical: str) -> CriticalLoad:
    """The error that stops the migration at `critical` (e.g. `Threads_running=31 >= 25`)."""
    return CriticalLoad(f"{CRITICAL_LOAD_REACHED}{critical}, --critical-load): the migration stopped; the original "
                        "table is untouched. Continue later with `stream-osc resume`")


def is_critical_load_error(stored: str) -> bool:
    """Whether a migration's stored error is critical_load_reached's, also as a move's target server names it
    (`on the target server HOST:PORT: critical load reached (…`; only the message is stored)."""
    return stored.startswith(CRITICAL_LOAD_REACHED) or (
        stored.startswith(TARGET_SERVER_PREFIX) and f": {CRITICAL_LOAD_REACHED}" in stored)


def read_status(conn: pymysql.connections.Connection, names: list[str]) -> dict[str, int]:
    """The server's global status values of `names` (lower-cased keys; non-numeric values are skipped)."""
    marks = ", ".join(["%s"] * len(names))
    values = {}
    for name, value in query(conn, f"SHOW GLOBAL STATUS WHERE Variable_name IN ({marks})", names):
        try:
            values[name.lower()] = int(value)
        except (TypeError, ValueError):
            continue
    return values


def over(values: dict[str, int], thresholds: dict[str, int]) -> str | None:
    """`Threads_running=31 >= 25` for the first threshold reached, else None."""
    for name, limit in thresholds.items():
        value = values.get(name.lower())
        if value is not None and value >= limit:
            return f"{name}={value} >= {limit}"
    return None


class LoadThrottle:
    """Shared by the workers of one process; reads the counters at most once a second.

    `more` are other sources of reasons to hold back (CloudWatch, replicas), asked in turn when the
    counters allow work; `more_critical` are other servers' critical checks (a move's target), asked by
    stop_if_critical. `max_redo_fill` (percent, 0: off) is judged from the same read (throttle/redo_fill.py).
    """

    def __init__(self, max_load: dict[str, int], critical_load: dict[str, int],
                 more: Sequence[Callable[[], str | None]] = (), closers: Sequence[Callable[[], None]] = (),
                 more_critical: Sequence[Callable[[], None]] = (), max_redo_fill: int = 0) -> None:
        self.max_load, self.critical_load = max_load, critical_load
        self.max_redo_fill = max_redo_fill
        self.names = sorted({*max_load, *critical_load, *(STATUS_NAMES if max_redo_fill else ())})
        self._capacity: int | None = None   # MySQL's innodb_redo_log_capacity, read once
        self.more = more
        self.closers = closers
        self.more_critical = more_critical
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._reason: str | None = None

    def close(self) -> None:
        """Close the sessions the sources keep (replicas)."""
        for close in self.closers:
            close()

    def reason(self, conn: pymysql.connections.Connection, fresh: bool = False) -> str | None:
        """Why work must hold back now, naming the option (None: go ahead); raises CriticalLoad at a critical
        threshold. The counters are read at most once a second, or now if `fresh` (right before a lock)."""
        return self._server_reason(conn, fresh) or next((r for r in (source() for source in self.more) if r), None)

    def stop_if_critical(self, conn: pymysql.connections.Connection) -> None:
        """Raise CriticalLoad if a --critical-load threshold is reached now, read afresh (here and through
        `more_critical`). Asked right before a lock that holds the application's writes back: the workers read
        the load only between their batches, and none may have run lately (the appliers are stopped for a
        swap), so a load that rose since their last read would otherwise meet the lock unseen."""
        if self.critical_load:
            critical = over(read_status(conn, sorted(self.critical_load)), self.critical_load)
            if critical is not None:
                raise critical_load_reached(critical)
        for check in self.more_critical:
            check()

    def before_lock(self, conn: pymysql.connections.Connection) -> str | None:
        """Right before a lock that holds the application's writes back: CriticalLoad at a --critical-load
        threshold, on this server (its counters read afresh, in one read with the --max-load ones) or on the
        others (`more_critical`); else why the lock must wait (None: go ahead)."""
        for check in self.more_critical:
            check()
        return self.reason(conn, fresh=True)

    def _server_reason(self, conn: pymysql.connections.Connection, fresh: bool = False) -> str | None:
        if not self.names:
            return None
        with self._lock:
            if fresh or time.monotonic() - self._read_at >= READ_EVERY_S:
                values = read_status(conn, self.names)
                self._read_at = time.monotonic()
                critical = over(values, self.critical_load)
                if critical is not None:
                    raise critical_load_reached(critical)
                reached = over(values, self.max_load)
                self._reason = f"{reached} (--max-load)" if reached else self._redo_reason(conn, values)
            return self._reason

    def _redo_reason(self, conn: pymysql.connections.Connection, values: dict[str, int]) -> str | None:
        if not self.max_redo_fill:
            return None
        if self._capacity is None and "innodb_redo_log_current_lsn" in values:
            self._capacity = redo_capacity(conn)
        return redo_reason(redo_fill_percent(values, self._capacity), self.max_redo_fill)
