"""The application's write latency, sampled the way the application feels it: a tiny autocommit write
(an UPDATE of this process's own row of the metadata schema's `latency_probes`) every PROBE_EVERY_S,
timed from send to commit. Each process has its own row, so probes never wait on each other's row lock,
only on what the application waits on. It writes nothing while the migration is paused: a pause stops
the migration's writes (docs/resilience.md).

Such a write waits for what the application's writes wait for while a copy runs: CPU, the redo log and
the binlog group commit that a large copy batch fills. Each sample goes to a Yielding (throttle/yielding.py),
which decides how much work may run; with `auto`, the counts of the statements other sessions run (an
ActivityCounter beside the probe, throttle/app_activity.py) tell it whether there is an application to yield to.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import pymysql

from throttle.app_activity import ActivityCounter
from core.db import DatabaseUnreachable
from core.logs import log_event
from core.state import StateStore
from core.stages import Status
from throttle.yielding import Yielding

log = logging.getLogger("stream_osc.app_latency")

PROBE_EVERY_S = 0.1
BASELINE_EVERY_S = 0.025   # faster while the baseline is taken: init waits for it before it starts the capture
STATUS_EVERY_S = 1.0   # how often the pause is looked at


class LatencyProbe:
    """A daemon thread feeding `yielding` with samples until stopped, beside an ActivityCounter of its own
    (a second thread and session, under `auto`); with `records_baseline` (the coordinator), the baseline it
    establishes is recorded in the migration's options."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], schema: str, migration_id: int,
                 yielding: Yielding, records_baseline: bool = False) -> None:
        self.connect = connect
        self.schema = schema
        self.migration_id = migration_id
        self.probe = uuid.uuid4().hex
        self.yielding = yielding
        self.records_baseline = records_baseline
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="app-latency-probe", daemon=True)
        self._status_read_at = 0.0
        self._paused = False
        self.counter = ActivityCounter(connect, yielding, paused=lambda: self._paused)

    def start(self) -> "LatencyProbe":
        self.thread.start()
        self.counter.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.counter.stop()
        self.thread.join(timeout=5)

    def _open(self) -> tuple[pymysql.connections.Connection, StateStore]:
        conn = self.connect()
        store = StateStore(conn, self.schema)
        store.add_latency_probe(self.migration_id, self.probe)
        return conn, store

    def _is_paused(self, store: StateStore) -> bool:
        """The migration's pause, re-read at most every STATUS_EVERY_S."""
        if time.monotonic() - self._status_read_at >= STATUS_EVERY_S:
            self._paused = store.status(self.migration_id) == Status.PAUSED
            self._status_read_at = time.monotonic()
        return self._paused

    def _run(self) -> None:
        """Sample until stopped. A failed write gives no sample (an outage stops the work by itself) and is
        logged once per streak. A refused reconnect is such a failure too: the thread must outlive the outage,
        or copy and validation would keep a stale pace for the rest of the process."""
        conn: pymysql.connections.Connection | None = None
        store: StateStore | None = None
        failing = False
        while not self.stopped.is_set():
            began = time.monotonic()
            try:
                if conn is None or store is None:
                    conn, store = self._open()
                if self._is_paused(store):
                    self.yielding.restart_window()
                    self.stopped.wait(PROBE_EVERY_S)
                    continue
                began = time.monotonic()
                store.stamp_latency_probe(self.migration_id, self.probe)
                latency_ms = (time.monotonic() - began) * 1000
            except (pymysql.err.MySQLError, DatabaseUnreachable) as exc:
                if not failing:
                    log_event(log, "application latency probe failed; copy and validation keep their current "
                                   "pace until it works again", logging.WARNING, reason=str(exc))
                failing = True
                if conn is not None:
                    conn.close()
                conn = None
                self.stopped.wait(1.0)
                continue
            if failing:   # the first write after a failure: the second it interrupted is judged afresh
                self.yielding.restart_window()
                failing = False
            baseline = self.yielding.sample(latency_ms)
            if baseline is not None:
                log_event(log, "application write latency before the work", baseline_ms=round(baseline, 2),
                          target_ms=round(self.yielding.target_ms or 0, 2))
                if self.records_baseline:
                    store.record_app_latency_baseline(self.migration_id, baseline)
            every = BASELINE_EVERY_S if self.yielding.needs_baseline() else PROBE_EVERY_S
            self.stopped.wait(max(0.0, every - (time.monotonic() - began)))
        if conn is not None:
            conn.close()
