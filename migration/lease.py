"""The coordinator lease: one process at a time runs a migration's stages; its heartbeat is in the database."""
from __future__ import annotations

import logging
import threading
import time

import pymysql

from core.db import connect
from core.endpoints import MySQLAddress
from core.logs import log_event
from core.process_owner import is_dead_here
from core.state import HEARTBEAT_S, STALE_S, StateStore

log = logging.getLogger("stream_osc.lease")
EXIT_WAIT_S = 2 * STALE_S   # how long a coordinator that saw an abort is given to stop (it checks every few seconds)
EXIT_POLL_S = 0.5


def live_coordinator(store: StateStore, migration_id: int) -> tuple[str, float] | None:
    """The migration's running coordinator as (owner, seconds since heartbeat), or None."""
    live = store.live_coordinator(migration_id, STALE_S)
    return None if live is None or is_dead_here(live[0]) else live


def coordinator_gone(store: StateStore, migration_id: int) -> bool:
    """Wait up to EXIT_WAIT_S for the migration's coordinator to stop; False if it still runs then."""
    deadline = time.monotonic() + EXIT_WAIT_S
    while live_coordinator(store, migration_id) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(EXIT_POLL_S)
    return True


class CoordinatorLease:
    """Renews the coordinator heartbeat from a thread with its own connection; `lost` when taken over."""

    def __init__(self, mysql: MySQLAddress, schema: str, owner: str) -> None:
        self.mysql = mysql
        self.schema = schema
        self.owner = owner
        self.migration_id: int | None = None
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self, store: StateStore, migration_id: int) -> bool:
        """Take the migration over unless a live coordinator holds it (a dead one's lease is taken at once)."""
        current = store.live_coordinator(migration_id, STALE_S)
        dead = current[0] if current is not None and is_dead_here(current[0]) else None
        return store.claim_coordinator(migration_id, self.owner, STALE_S, dead)

    def start(self, migration_id: int) -> None:
        """Begin heartbeats for a migration this process has claimed."""
        self.migration_id = migration_id
        self._thread = threading.Thread(target=self._run, name="coordinator-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: pymysql.connections.Connection | None = None
        while not self._stop.wait(HEARTBEAT_S):
            try:
                conn = conn or connect(self.mysql)
                store = StateStore(conn, self.schema)
                if not store.heartbeat(self.migration_id, self.owner):
                    if store.exists(self.migration_id):   # (a discarded migration has no row left)
                        log_event(log, "coordinator lease lost", logging.ERROR, migration=self.migration_id)
                        self.lost.set()
                    break
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; STALE_S allows several
                log_event(log, "heartbeat failed", logging.WARNING, reason=str(exc))
                conn = None
        if conn is not None:
            conn.close()

    def stop(self, conn: pymysql.connections.Connection) -> None:
        """Stop heartbeats and give the migration up, so a successor need not wait for STALE_S."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.migration_id is not None and not self.lost.is_set():
            try:
                StateStore(conn, self.schema).release_coordinator(self.migration_id, self.owner)
            except pymysql.err.MySQLError as exc:   # the heartbeat then ages out (or the pid is seen gone)
                log_event(log, "could not release the coordinator lease", logging.WARNING, reason=str(exc))
