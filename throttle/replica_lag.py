"""Throttling on the replication lag of named replicas (`--throttle-replicas`, `--max-replica-lag`), as
gh-ost and pt-online-schema-change do: copy, apply and validation hold back while any replica is that
many seconds behind, or its replication is not running, or it cannot be reached (its lag is then
unknown, and running on would be a guess).

Replicas are reached with the source's credentials at their own host:port, like gh-ost's control
replicas: no second secret to hand over, and none in a log line (addresses only). The lag is the
replica's own `Seconds_Behind_Master` (MariaDB, MySQL before 8.0.22 names) or `Seconds_Behind_Source`,
read at most once a second.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pymysql

from core.db import DatabaseUnreachable, connect
from core.endpoints import ConfigError, MySQLAddress
from core.logs import log_event

log = logging.getLogger("stream_osc.replica_lag")

OPTION = "--max-replica-lag"
READ_EVERY_S = 1.0
LAG_COLUMNS = ("Seconds_Behind_Master", "Seconds_Behind_Source")


def replica_lag(conn: pymysql.connections.Connection) -> tuple[bool, int | None]:
    """(is a replica, seconds behind or None when replication is not running) from SHOW REPLICA STATUS."""
    with conn.cursor() as cur:
        cur.execute("SHOW REPLICA STATUS")
        row = cur.fetchone()
        if row is None:
            return False, None
        columns = [d[0] for d in cur.description]
    for name in LAG_COLUMNS:
        if name in columns:
            value = row[columns.index(name)]
            return True, None if value is None else int(value)
    return True, None


class ReplicaLag:
    """Why the replicas say to hold back (None: go ahead); shared by a process's workers."""

    def __init__(self, source: MySQLAddress, replicas: list[tuple[str, int]], max_lag_s: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.addresses = [replace(source, host=host, port=port) for host, port in replicas]
        self.max_lag_s = max_lag_s
        self.clock = clock
        self._conns: dict[str, pymysql.connections.Connection] = {}
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._reason: str | None = None

    def check(self) -> None:
        """Before the migration starts: every replica answers and replicates (one clear error if not)."""
        for addr in self.addresses:
            try:
                conn = connect(addr)
            except DatabaseUnreachable as exc:
                raise ConfigError(f"--throttle-replicas: {exc}") from exc
            try:
                is_replica, _ = replica_lag(conn)
            except pymysql.err.MySQLError as exc:
                raise ConfigError(f"--throttle-replicas: cannot read the replication status of {addr.where()} "
                                  f"(error {exc.args[0] if exc.args else '?'}); the user needs REPLICA MONITOR "
                                  "(MariaDB) or REPLICATION CLIENT") from exc
            finally:
                conn.close()
            if not is_replica:
                raise ConfigError(f"--throttle-replicas: {addr.where()} is not a replica (SHOW REPLICA STATUS is "
                                  "empty)")

    def close(self) -> None:
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()

    def reason(self) -> str | None:
        with self._lock:
            if self._read_at is None or self.clock() - self._read_at >= READ_EVERY_S:
                self._read_at = self.clock()
                self._reason = next((r for r in map(self._behind, self.addresses) if r is not None), None)
            return self._reason

    def _behind(self, addr: MySQLAddress) -> str | None:
        where = addr.where()
        try:
            conn = self._conns.get(where) or connect(addr, read_timeout=5)
            self._conns[where] = conn
            _, lag = replica_lag(conn)
        except (DatabaseUnreachable, pymysql.err.MySQLError) as exc:
            stale = self._conns.pop(where, None)
            if stale is not None:
                stale.close()
            log_event(log, "replica lag unknown; holding back", logging.WARNING, replica=where, error=str(exc))
            return f"replica {where} unreachable ({OPTION})"
        if lag is None:
            return f"replica {where}: replication is not running ({OPTION})"
        if lag >= self.max_lag_s:
            return f"replica {where} is {lag} s behind >= {self.max_lag_s} s ({OPTION})"
        return None
