"""--max-load, --critical-load and --max-redo-fill read on the target server too: a move to another server writes
there."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import pymysql

from core.db import connect
from core.endpoints import MySQLAddress
from throttle.load import TARGET_SERVER_PREFIX, CriticalLoad, LoadThrottle

T = TypeVar("T")


class TargetLoad:
    """A source of reasons to hold back (throttle/load.py), read through one session of the target server."""

    def __init__(self, address: MySQLAddress, max_load: dict[str, int], critical_load: dict[str, int],
                 max_redo_fill: int = 0) -> None:
        self.address = address
        self.throttle = LoadThrottle(max_load, critical_load, max_redo_fill=max_redo_fill)
        self._conn: pymysql.connections.Connection | None = None
        self._lock = threading.Lock()

    def reason(self) -> str | None:
        """Why work must hold back for the target's sake (None: go ahead); CriticalLoad at a critical threshold."""
        reason = self._read(self.throttle.reason)
        return f"target server {self.address.where()}: {reason}" if reason else None

    def stop_if_critical(self) -> None:
        """Raise CriticalLoad if a critical threshold is reached on the target now (read afresh)."""
        if self.throttle.critical_load:
            self._read(self.throttle.stop_if_critical)

    def _read(self, read: Callable[[pymysql.connections.Connection], T]) -> T:
        """`read` through the target session, naming the target in a CriticalLoad."""
        with self._lock:
            if self._conn is None:
                self._conn = connect(self.address)
            try:
                return read(self._conn)
            except CriticalLoad as exc:
                raise CriticalLoad(f"{TARGET_SERVER_PREFIX}{self.address.where()}: {exc}") from None
            except pymysql.err.Error:
                self._conn.close()   # a session cut by the network: the next read opens another
                self._conn = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
