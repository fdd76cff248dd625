"""The RENAME's own session, and the order its metadata locks are taken in (docs/cutover.md, "The swap")."""
from __future__ import annotations

import threading
import time

import pymysql

from core.context import RunContext
from core.db import query, scalar
from cutover.queued_ddl import TABLE_MDL_WAIT


class Renamer(threading.Thread):
    """Second session: issues the RENAME, which waits on the lock session's metadata locks."""

    def __init__(self, ctx: RunContext, timeout_s: int, sql: str) -> None:
        super().__init__(daemon=True)
        self.conn = ctx.db()
        query(self.conn, "SET SESSION lock_wait_timeout = %s", (timeout_s,))
        self.thread_id = self.conn.thread_id()
        self.sql = sql
        self.error: Exception | None = None
        self.finished_at = 0.0

    @property
    def started(self) -> bool:
        return self.ident is not None

    def close_unless_started(self) -> None:
        """Close the connection of a RENAME that was never issued (run() closes it otherwise)."""
        if not self.started:
            self.conn.close()

    def run(self) -> None:
        try:
            query(self.conn, self.sql)
        except pymysql.err.MySQLError as exc:
            self.error = exc
        finally:
            self.finished_at = time.monotonic()
            self.conn.close()

    def waiting_on_table_lock(self, probe: pymysql.connections.Connection) -> bool:
        """True once the RENAME waits for a table's metadata lock (not a schema or backup lock: those
        would not put it in the original table's queue)."""
        state = scalar(probe, "SELECT STATE FROM information_schema.PROCESSLIST WHERE ID=%s", (self.thread_id,))
        return state == TABLE_MDL_WAIT


def rename_queues_on_original(table: str, helpers: list[str]) -> bool:
    """True when the original table comes first in the RENAME's metadata-lock order.

    The server sorts a statement's lock requests by key (schema, then name, bytewise in utf8; folded
    to lower case when lower_case_table_names is set) and takes them one at a time, so the RENAME
    waits in the queue of the first one the lock session holds. Only if that is the original table is
    the RENAME ahead of the application's writes waiting there.
    """
    def key(name: str) -> bytes:
        return name.encode() + b"\0"
    return all(key(table) < key(h) and key(table.lower()) < key(h.lower()) for h in helpers)
