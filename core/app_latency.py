"""The application's write latency, sampled the way the application feels it: a tiny autocommit write
(an UPDATE of the one row of the metadata schema's `latency_probe`) every PROBE_EVERY_S, timed from
send to commit. It writes nothing while the migration is paused: a pause stops every write of the
migration (docs/resilience.md).

Such a write waits for what the application's writes wait for while a copy runs: CPU, the redo log and
the binlog group commit that a large copy batch fills. Each sample goes to a Yielding (core/yielding.py),
which decides how much work may run.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pymysql

from core.db import qualified, query
from core.logs import log_event
from core.state import Status
from core.yielding import Yielding

log = logging.getLogger("stream_osc.app_latency")

PROBE_EVERY_S = 0.1
PROBE_TABLE = "latency_probe"   # in the metadata schema; one row, shared by every migration


class LatencyProbe:
    """A daemon thread feeding `yielding` with samples until stopped; `on_baseline` gets the baseline once."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], schema: str, migration_id: int,
                 yielding: Yielding, on_baseline: Callable[[float], None] | None = None) -> None:
        self.connect = connect
        self.table = qualified(schema, PROBE_TABLE)
        self.migrations = qualified(schema, "migrations")
        self.migration_id = migration_id
        self._paused_read_at = 0.0
        self._paused = False
        self.yielding = yielding
        self.on_baseline = on_baseline
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="app-latency-probe", daemon=True)

    def start(self) -> "LatencyProbe":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def _open(self) -> pymysql.connections.Connection:
        conn = self.connect()
        query(conn, f"CREATE TABLE IF NOT EXISTS {self.table} (id TINYINT NOT NULL PRIMARY KEY, "
                    "n BIGINT NOT NULL) ENGINE=InnoDB")
        query(conn, f"INSERT IGNORE INTO {self.table} VALUES (1, 0)")
        return conn

    def _is_paused(self, conn: pymysql.connections.Connection) -> bool:
        """The migration's pause, re-read at most once a second."""
        if time.monotonic() - self._paused_read_at >= 1.0:
            rows = query(conn, f"SELECT status FROM {self.migrations} WHERE id = %s", (self.migration_id,))
            self._paused = bool(rows) and rows[0][0] == Status.PAUSED
            self._paused_read_at = time.monotonic()
        return self._paused

    def _run(self) -> None:
        """Sample until stopped. A failed write gives no sample (an outage stops the work by itself) and is
        logged once per streak."""
        conn: pymysql.connections.Connection | None = None
        failing = False
        while not self.stopped.is_set():
            began = time.monotonic()
            try:
                if conn is None:
                    conn = self._open()
                if self._is_paused(conn):
                    self.stopped.wait(PROBE_EVERY_S)
                    continue
                began = time.monotonic()
                query(conn, f"UPDATE {self.table} SET n = n + 1 WHERE id = 1")
                latency_ms, failing = (time.monotonic() - began) * 1000, False
            except pymysql.err.MySQLError as exc:
                if not failing:
                    log_event(log, "application latency probe failed; copy and validation do not yield until it "
                                   "works again", logging.WARNING, reason=str(exc))
                failing = True
                if conn is not None:
                    conn.close()
                conn = None
                self.stopped.wait(1.0)
                continue
            baseline = self.yielding.sample(latency_ms)
            if baseline is not None:
                log_event(log, "application write latency before the work", baseline_ms=round(baseline, 2),
                          target_ms=round(self.yielding.target_ms or 0, 2))
                if self.on_baseline is not None:
                    self.on_baseline(baseline)
            self.stopped.wait(max(0.0, PROBE_EVERY_S - (time.monotonic() - began)))
        if conn is not None:
            conn.close()
