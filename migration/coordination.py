"""What the coordinator's parts share (migration/runner.py and the supervision, lag waits, cutover loop and
resume it composes): one object handed to each, with the session, the Connect client and the clock handed in
so that a loop can be tried with fakes."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pymysql

from connectors.rest import ConnectClient, connect_client
from core.db import ServerInfo, connect
from core.endpoints import Endpoints
from core.logs import log_event
from core.process_owner import owner_name
from core.spec import MigrationSpec
from core.state import StateStore
from core.stages import Stage
from migration.lease import CoordinatorLease
from migration.notify import HookRun, Notifier, endpoint_secrets
from migration.teardown import tables_swapped
from monitor.metrics import MigrationMetrics
from monitor.progress import Progress, copy_fraction
from throttle.yielding import Yielding

log = logging.getLogger("stream_osc.notify")


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
    notifier: Notifier = field(default_factory=Notifier)   # --hook and --notify-url (migration/notify.py)

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
                   yielding, cutover_now=cutover_now, notifier=Notifier(endpoint_secrets(endpoints)))

    def say(self, text: str) -> None:
        self.progress.say(text)

    def enter_stage(self, migration_id: int, stage: Stage, **values: object) -> None:
        """Move the migration on (core/stages.py: TRANSITIONS refuses any other move) and show it."""
        self.store.enter_stage(migration_id, stage, **values)
        self.metrics.stage(stage)

    def notify(self, event: str, migration_id: int, **figures: Any) -> None:
        """Run the event's hooks and POST it (--hook, --notify-url); nothing when neither is set. Never raises, and
        is never called while the tool holds a lock on the table."""
        if self.spec.hook_dir or self.spec.notify_url:
            self.notifier.notify(self.spec.hook_dir, self.spec.notify_url, self.figures(event, migration_id, **figures))

    def before_cutover(self, migration_id: int) -> HookRun | None:
        """Run the before-cutover hooks: the run of the one that did not exit 0 (the swap waits), or None."""
        if not self.spec.hook_dir:
            return None
        return self.notifier.before_cutover(self.spec.hook_dir, self.figures("before-cutover", migration_id))

    def figures(self, event: str, migration_id: int, **extra: Any) -> dict[str, Any]:
        """An event's figures: the migration's, read now (one that cannot be read is left out), then `extra`."""
        spec = self.spec
        figures: dict[str, Any] = {"event": event, "table": spec.qualified_name, "migration_id": migration_id,
                                   "alter": spec.alter or None, "coordinator": self.lease.owner}
        try:
            figures["stage"] = str(self.store.get(migration_id).stage)
            chunks = self.store.chunks(migration_id)
            fraction = copy_fraction(chunks, spec.chunk_size) if chunks else 0.0
            figures["rows_copied"] = sum(c.rows_copied for c in chunks)
            figures["copy_percent"] = round(100 * fraction, 1)
            copied = bool(chunks) and all(c.done for c in chunks)
            eta = 0 if copied else self.metrics.copy_estimate[1]
            figures["eta_seconds"] = round(eta) if eta is not None else None
        except Exception as exc:  # noqa: BLE001 - figures are told as far as they can be read
            log_event(log, "figures of the event not read", logging.WARNING, event=event,
                      reason=f"{type(exc).__name__}: {exc}")
        figures.update(extra)
        return figures

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
