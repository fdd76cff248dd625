"""The "blocked" scenario: an application transaction reads a few rows of the table and stays open while it migrates.

Its shared metadata lock makes every lock request on the table wait; a tool that queues such a
request stalls the application behind it (the load's per-second p99 shows it). Each tool runs with
the same transaction, opened as it starts and committed `hold_s` later.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pymysql

from core.db import connect, qualified, query
from core.endpoints import MySQLAddress


class OpenTransaction:
    """BEGIN; SELECT a few rows; … COMMIT after `hold_s` (or earlier on `stop()`), in its own session."""

    def __init__(self, addr: MySQLAddress, database: str, table: str, hold_s: float) -> None:
        self.conn = connect(addr, database=database)
        self.connection_id = self.conn.thread_id()
        self.sql = f"SELECT * FROM {qualified(database, table)} LIMIT 3"
        self.hold_s = hold_s
        self.ended = threading.Event()
        self.opened = self.closed = 0.0   # monotonic
        self.opened_wall = 0.0            # epoch seconds, to compare with the migration's recorded swap time
        self.outcome = ""
        self.thread = threading.Thread(target=self._hold, daemon=True, name="open-transaction")

    def start(self) -> "OpenTransaction":
        self._open()
        self.thread.start()
        return self

    def start_when(self, ready: Callable[[], bool], poll_s: float = 0.2) -> "OpenTransaction":
        """Open the transaction, in the background, once `ready()` holds (e.g. the tool reached its cutover);
        never, if `stop()` comes first."""
        def opener() -> None:
            while not self.ended.is_set():
                if ready():
                    self._open()
                    self._hold()
                    return
                self.ended.wait(poll_s)
            self.conn.close()
        self.thread = threading.Thread(target=opener, daemon=True, name="open-transaction")
        self.thread.start()
        return self

    def stop(self) -> None:
        """End the transaction now (or never open it)."""
        self.ended.set()

    def _open(self) -> None:
        query(self.conn, "BEGIN")
        query(self.conn, self.sql)
        self.opened, self.opened_wall = time.monotonic(), time.time()

    def _hold(self) -> None:
        self.ended.wait(self.hold_s)
        try:
            query(self.conn, "COMMIT")
            self.outcome = "committed"
        except pymysql.err.MySQLError as exc:   # killed by the tool
            self.outcome = f"ended by the server: {exc.args[-1]}"
        finally:
            self.closed = time.monotonic()
            self.conn.close()

    def finish(self, swapped_at: float | None = None) -> dict[str, Any]:
        """Wait for the COMMIT (the tool may have finished first); figures of the run. `swapped_at` (epoch s):
        when the tool's swap ended, for the seconds from the transaction's start to it."""
        self.thread.join()
        if not self.opened:
            return {"blocker_outcome": "never opened (the tool did not reach the moment)"}
        figures: dict[str, Any] = {"blocker_held_s": round(self.closed - self.opened, 1),
                                   "blocker_outcome": self.outcome}
        if swapped_at is not None:
            figures["blocker_to_swap_s"] = round(swapped_at - self.opened_wall, 1)
        return figures
