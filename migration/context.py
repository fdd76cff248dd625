"""Everything a worker of one migration needs: endpoints, spec, the migration row, the table pair."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pymysql
import redis

from applier.table import TablePair
from migration.db import connect
from migration.endpoints import Endpoints
from migration.spec import MigrationSpec
from migration.state import Migration, StateStore


class WorkStopped(Exception):
    """The migration was aborted (or the run stopped) while a worker waited out a pause."""


@dataclass
class RunContext:
    """Shared by the coordinator and its worker threads; holds no state that is not also durable."""

    endpoints: Endpoints
    spec: MigrationSpec
    migration: Migration
    pair: TablePair
    stop: threading.Event = field(default_factory=threading.Event)
    _status_cache: tuple[float, str] = (0.0, "running")

    def db(self, autocommit: bool = True) -> pymysql.connections.Connection:
        """A new connection to the source server."""
        return connect(self.endpoints.mysql, autocommit=autocommit)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.endpoints.redis_url, socket_timeout=10, socket_connect_timeout=5)

    def store(self, conn: pymysql.connections.Connection) -> StateStore:
        return StateStore(conn, self.spec.metadata_schema)

    def status(self, conn: pymysql.connections.Connection) -> str:
        """The migration's durable status (running/paused/aborted...), re-read at most once a second."""
        checked, status = self._status_cache
        if time.monotonic() - checked > 1.0:
            status = self.store(conn).get(self.migration.id).status
            self._status_cache = (time.monotonic(), status)
        return status

    def wait_while_paused(self, conn: pymysql.connections.Connection) -> bool:
        """Block while paused; False when the worker should stop instead."""
        while not self.stop.is_set():
            status = self.status(conn)
            if status == "running":
                return True
            if status != "paused":
                return False
            self.stop.wait(0.5)
        return False
