"""--max-load and --critical-load read on the target server too: a move to another server writes there."""
from __future__ import annotations

import threading

import pymysql

from core.db import connect
from core.endpoints import MySQLAddress
from core.load import CriticalLoad, LoadThrottle


class TargetLoad:
    """A source of reasons to hold back (core/load.py), read through one session of the target server."""

    def __init__(self, address: MySQLAddress, max_load: dict[str, int], critical_load: dict[str, int]) -> None:
        self.address = address
        self.throttle = LoadThrottle(max_load, critical_load)
        self._conn: pymysql.connections.Connection | None = None
        self._lock = threading.Lock()

    def reason(self) -> str | None:
        """Why work must hold back for the target's sake (None: go ahead); CriticalLoad at a critical threshold."""
        with self._lock:
            if self._conn is None:
                self._conn = connect(self.address)
            try:
                reason = self.throttle.reason(self._conn)
            except CriticalLoad as exc:
                raise CriticalLoad(f"on the target server {self.address.where()}: {exc}") from None
            except pymysql.err.Error:
                self._conn.close()   # a session cut by the network: the next read opens another
                self._conn = None
                raise
        return f"target server {self.address.where()}: {reason}" if reason else None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
