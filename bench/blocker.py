"""The "blocked" scenario: an application transaction reads a few rows of the table and stays open while it migrates.

Its shared metadata lock makes every lock request on the table wait; a tool that queues such a
request stalls the application behind it (the load's per-second p99 shows it). Each tool runs with
the same transaction, opened as it starts and committed `hold_s` later.
"""
from __future__ import annotations

import threading
import time
from typing import Any

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
        self.outcome = ""
        self.thread = threading.Thread(target=self._hold, daemon=True, name="open-transaction")

    def start(self) -> "OpenTransaction":
        query(self.conn, "BEGIN")
        query(self.conn, self.sql)
        self.opened = time.monotonic()
        self.thread.start()
        return self

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

    def finish(self) -> dict[str, Any]:
        """Wait for the COMMIT (the tool may have finished first); figures of the run."""
        self.thread.join()
        return {"blocker_held_s": round(self.closed - self.opened, 1), "blocker_outcome": self.outcome}
