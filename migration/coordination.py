"""What the coordinator's parts share (migration/runner.py and the supervision, lag waits, cutover loop and
resume it composes): one object handed to each, with the session, the Connect client and the clock handed in
so that a loop can be tried with fakes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pymysql

from connectors.rest import ConnectClient, connect_client
from core.db import ServerInfo, connect
from core.endpoints import Endpoints
from core.process_owner import owner_name
from core.spec import MigrationSpec
from core.state import StateStore
from core.stages import Stage
from migration.lease import CoordinatorLease
from migration.teardown import tables_swapped
from monitor.metrics import MigrationMetrics
from monitor.progress import Progress
from throttle.yielding import Yielding


class MigrationStopped(Exception):
    """The migration stopped before its end (aborted, its connector failed, the cutover did not fit); the
    message says why. `resumable`: `stream-osc resume` can continue it (else only `abort` is left)."""

    user_facing = True

    def __init__(self, message: str, resumable: bool = True) -> None:
        super().__init__(message)
        self.resumable = resumable


class Clock:
    """Time as the coordinator's loops read and spend it; a test hands in one that only pretends."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def now(self) -> datetime:
        """The wall clock in UTC (the cutover windows')."""
        return datetime.now(timezone.utc)


@dataclass
class Coordination:
    """The coordinator's session and services, its displays, and the few values its parts change."""

    endpoints: Endpoints
    spec: MigrationSpec          # changes as a resume's stored options and `stream-osc set` values are taken up
    progress: Progress
    metrics: MigrationMetrics
    conn: pymysql.connections.Connection
    store: StateStore
    info: ServerInfo
    connect: ConnectClient
    lease: CoordinatorLease
    yielding: Yielding
    clock: Clock = field(default_factory=Clock)
    cutover_now: bool = False    # this process is `stream-osc cutover`, or that command asked it
    restart_copy: bool = False   # the copy workers restart to take new settings

    @classmethod
    def open(cls, endpoints: Endpoints, spec: MigrationSpec, progress: Progress, metrics: MigrationMetrics,
             cutover_now: bool) -> Coordination:
        """A coordinator's own lease, session and Connect client, opened now."""
        lease = CoordinatorLease(endpoints.mysql, spec.metadata_schema, owner_name())
        conn = connect(endpoints.mysql)
        info = ServerInfo.read(conn)
        store = StateStore(conn, spec.metadata_schema)
        yielding = Yielding(spec.copy_workers, spec.app_latency_target())
        metrics.follow(yielding)
        return cls(endpoints, spec, progress, metrics, conn, store, info, connect_client(endpoints), lease,
                   yielding, cutover_now=cutover_now)

    def say(self, text: str) -> None:
        self.progress.say(text)

    def enter_stage(self, migration_id: int, stage: Stage, **values: object) -> None:
        """Move the migration on (core/stages.py: TRANSITIONS refuses any other move) and show it."""
        self.store.enter_stage(migration_id, stage, **values)
        self.metrics.stage(stage)

    def configure_yielding(self) -> None:
        """Yield as the spec now says (--copy-workers, --max-app-latency)."""
        self.yielding.configure(self.spec.copy_workers, self.spec.app_latency_target())

    def swap_already_done(self) -> bool:
        """After a crash inside cutover: did the RENAME run?"""
        return tables_swapped(self.conn, self.spec)

    def reconnect(self) -> None:
        """A fresh database session for the coordinator (the old one may have been cut)."""
        try:
            self.conn.close()
        except pymysql.err.Error:
            pass
        self.conn = connect(self.endpoints.mysql)
        self.store = StateStore(self.conn, self.spec.metadata_schema)
