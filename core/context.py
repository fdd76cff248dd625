"""Everything a worker of one migration needs: endpoints, spec, the migration row, the table pair."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

import pymysql
import redis

from core.table import TablePair, load_pair
from core.db import connect
from core.endpoints import Endpoints
from core.spec import MigrationSpec
from core.state import StateStore
from core.state_records import Migration
from core.stages import Status
from core import redis_keys
from core.target_identity import check_target

STATUS_REREAD_S = 1.0   # a worker sees a pause, resume or abort within this long (and its batch in flight)
NOTE_TTL_S = 5   # the Redis note `status` shows lives this long after the last throttled check


class Throttle(Protocol):
    """Why the work must hold back now (throttle/load.py: LoadThrottle); handed in, since core sits below
    throttle/."""

    def reason(self, conn: pymysql.connections.Connection, fresh: bool = False) -> str | None: ...

    def before_lock(self, conn: pymysql.connections.Connection) -> str | None: ...

    def close(self) -> None: ...


class YieldGate(Protocol):
    """How much copy and validation may run while the application feels the work (throttle/yielding.py)."""

    time_scale: float

    def reason(self) -> str | None: ...

    def turn(self, stopped: Callable[[], bool],
             waiting: Callable[[], None] | None = None) -> AbstractContextManager[bool]: ...


class StopRequested(Exception):
    """A worker was asked to stop while it waited to try a step again (a row lock an application holds): the step
    is left undone, as at any stop (an applier's batch whose positions were not stored is read again, a copy
    batch not committed is written again), and the worker ends stopped, not failed."""


def read_throttle_note(client: redis.Redis, migration_id: int) -> str | None:
    """Why the migration's work holds back now, as its workers and coordinator noted it (None: it does not)."""
    note = client.get(redis_keys.throttle_note(migration_id))
    return note.decode() if note else None


def target_connection(endpoints: Endpoints, spec: MigrationSpec,
                      migration: Migration | None = None) -> pymysql.connections.Connection | None:
    """A connection to the target server of a migration to another server; None on the same server. With
    `migration`, refused (TargetMismatch) unless it reaches the server init wrote to (core/target_identity.py)."""
    if not spec.target_server:
        return None
    target = connect(endpoints.target(spec.target_dsn))
    if migration is not None:
        try:
            check_target(target, spec.metadata_schema, migration.options, endpoints.target(spec.target_dsn).where())
        except BaseException:
            target.close()
            raise
    return target


def spec_pair(conn: pymysql.connections.Connection, spec: MigrationSpec,
              target_conn: pymysql.connections.Connection | None) -> TablePair:
    """The spec's table pair; `target_conn` is the target server's session (None on the same server)."""
    return load_pair(conn, spec.database, spec.table, spec.new_table, spec.alter, target_conn,
                     spec.target_database, spec.where)


class WorkStopped(Exception):
    """The migration was aborted (or the run stopped) while a worker waited out a pause."""


@dataclass
class RunContext:
    """Shared by the coordinator and its worker threads; holds no state that is not also durable."""

    endpoints: Endpoints
    spec: MigrationSpec
    migration: Migration
    pair: TablePair
    throttle_for: Callable[[MigrationSpec, Endpoints], Throttle]   # throttle/sources.py, or a fake
    yielding: YieldGate
    stop: threading.Event = field(default_factory=threading.Event)
    _status_cache: tuple[float, str | None] = (0.0, Status.RUNNING)
    throttle: Throttle | None = None   # shared by the copies a worker group makes (dataclasses.replace)
    _shared_redis: redis.Redis | None = None
    _throttle_note_written: tuple[str | None, float] = (None, 0.0)   # the note last written, and when

    def __post_init__(self) -> None:
        if self.throttle is None:
            self.throttle = self.throttle_for(self.spec, self.endpoints)

    def retune(self, spec: MigrationSpec) -> None:
        """Take up new settings (`stream-osc set`): the spec, and a throttle built from it."""
        replaced, self.spec = self.throttle, spec
        self.throttle = self.throttle_for(spec, self.endpoints)
        if replaced is not None:
            replaced.close()

    def close(self) -> None:
        """Close what the context opened for its workers (replica sessions, the shared Redis client)."""
        if self.throttle is not None:
            self.throttle.close()
        if self._shared_redis is not None:
            self._shared_redis.close()

    def db(self, autocommit: bool = True) -> pymysql.connections.Connection:
        """A new connection to the source server."""
        return connect(self.endpoints.mysql, autocommit=autocommit)

    def target_db(self) -> pymysql.connections.Connection:
        """A new connection to the server of the new table (the source server unless it moves elsewhere); on
        another server, refused (TargetMismatch) unless it is the one init wrote to."""
        target = target_connection(self.endpoints, self.spec)
        if target is None:
            return self.db()
        try:
            self.check_target(target)
        except BaseException:
            target.close()
            raise
        return target

    def check_target(self, target: pymysql.connections.Connection) -> None:
        """Raise TargetMismatch unless `target` is a session on the target server init recorded (the token it
        wrote there, the server's id: core/target_identity.py); called again by a move's cutover under its lock."""
        def options_now() -> dict:
            conn = self.db()
            try:
                return self.store(conn).get(self.migration.id).options
            finally:
                conn.close()
        check_target(target, self.spec.metadata_schema, self.migration.options,
                     self.endpoints.target(self.spec.target_dsn).where(), options_now)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.endpoints.redis_url, socket_timeout=10, socket_connect_timeout=5)

    def shared_redis(self) -> redis.Redis:
        """One client for the small reads and writes of all threads (redis-py clients are thread-safe)."""
        if self._shared_redis is None:
            self._shared_redis = self.redis()
        return self._shared_redis

    def store(self, conn: pymysql.connections.Connection) -> StateStore:
        return StateStore(conn, self.spec.metadata_schema)

    def status(self, conn: pymysql.connections.Connection) -> str | None:
        """The migration's durable status (running/paused/aborted...), re-read at most every STATUS_REREAD_S."""
        checked, status = self._status_cache
        if time.monotonic() - checked > STATUS_REREAD_S:
            status = self.store(conn).status(self.migration.id)
            self._status_cache = (time.monotonic(), status)
        return status

    def _note_throttle(self, reason: str | None) -> None:
        """Tell `status` why the workers hold back, or that they no longer do (best effort: display only).
        Workers ask before every batch: the same reason is written again only when its note nears expiry."""
        noted, noted_at = self._throttle_note_written
        if reason == noted and (reason is None or time.monotonic() - noted_at < NOTE_TTL_S / 2):
            return
        try:
            if reason is None:
                self.shared_redis().delete(redis_keys.throttle_note(self.migration.id))
            else:
                self.shared_redis().set(redis_keys.throttle_note(self.migration.id), reason, ex=NOTE_TTL_S)
            self._throttle_note_written = (reason, time.monotonic())
        except redis.RedisError:
            pass

    def throttle_reason(self, conn: pymysql.connections.Connection) -> str | None:
        """Why work must hold back now (None: go ahead), told to `status` as the workers' reasons are; raises
        CriticalLoad at a critical threshold."""
        reason = self.throttle.reason(conn)
        if reason is not None:
            self._note_throttle(reason)
        return reason

    def wait_while_paused_or_throttled(self, conn: pymysql.connections.Connection,
                                       while_paused: Callable[[], None] | None = None) -> bool:
        """Block while paused or over --max-load; False when the worker should stop instead. `while_paused`
        runs about every half second of a pause (a copy worker renews its chunk's lease there: a pause may
        outlast the lease, and the chunk would be given up and claimed again for nothing). Not while held back:
        a throttle may hold one process only (a replica it cannot reach), and its chunks must then go to others.

        A migration waiting for its manual cutover is still worked on: its appliers keep the new table
        in sync, so that the cutover, whenever asked, has little to drain. Raises CriticalLoad when a
        --critical-load threshold is reached.
        """
        while not self.stop.is_set():
            status = self.status(conn)
            if status not in (Status.RUNNING, Status.WAITING, Status.PAUSED):
                return False
            if status != Status.PAUSED:
                reason = self.throttle.reason(conn)
                self._note_throttle(reason or self.yielding.reason())
                if reason is None:
                    return True
            self.stop.wait(0.5)
            if while_paused is not None and status == Status.PAUSED and not self.stop.is_set():
                while_paused()
        return False
