"""A watchdog that interrupts a session's statement once the cutover window is over, from a session of its own.

Why: a statement on a move's target runs while the source table is locked, so every second it waits (a row lock,
a metadata lock held by an open transaction on the target) the application waits too. MariaDB bounds it by
`max_statement_time` (cutover/session_bounds.py); MySQL has no limit for writes and DDL and counts lock waits in
whole seconds. So, on either server, once the deadline passes the watchdog sends `KILL QUERY` for the watched
session until it is disarmed: the statement fails (error 1317), the attempt rolls back and the source takes
writes again. The session itself is kept (the attempt still has to roll back there). A `KILL QUERY` that reaches
an idle session is dropped by the server when its next statement starts, so the watchdog repeats it every
REPEAT_S until disarmed.

Its session is opened before the lock (a connection costs milliseconds the window should not pay), and it only
runs while the coordinator does: a frozen coordinator is bounded by the server-side settings instead.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import pymysql

from core.db import close_quietly, query
from core.logs import log_event

log = logging.getLogger("stream_osc.cutover")

REPEAT_S = 0.05
INTERRUPTED = 1317   # ER_QUERY_INTERRUPTED: what the watched statement fails with


class StatementWatchdog:
    """Kills the running statement of `thread_id` once armed and past its deadline; `fired` says it did."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], thread_id: int, name: str) -> None:
        self.conn = connect()
        self.thread_id = thread_id
        self.name = name
        self.fired = False
        self._deadline: float | None = None
        self._done = threading.Event()
        self._armed = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watchdog-{name}")
        self._thread.start()

    def arm(self, deadline: float) -> None:
        """Start watching: from `deadline` (time.monotonic()) on, the watched statement is interrupted."""
        self._deadline = deadline
        self._armed.set()

    def close(self) -> None:
        """Disarm, stop the thread and close its session (idempotent)."""
        self._done.set()
        self._armed.set()
        self._thread.join()
        self.conn = close_quietly(self.conn)

    def _run(self) -> None:
        self._armed.wait()
        if self._done.is_set() or self._deadline is None:
            return
        if self._done.wait(max(self._deadline - time.monotonic(), 0.0)):
            return
        while not self._done.is_set():
            try:
                query(self.conn, "KILL QUERY %s", (self.thread_id,))
            except pymysql.err.MySQLError as exc:   # the session ended (no such thread): nothing left to stop
                log_event(log, "watchdog stopped", logging.DEBUG, session=self.name, reason=str(exc))
                return
            if not self.fired:
                self.fired = True
                log_event(log, "statement interrupted at the end of the cutover window", logging.WARNING,
                          session=self.name, connection_id=self.thread_id)
            self._done.wait(REPEAT_S)
