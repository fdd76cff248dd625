"""`stream-osc worker`: an extra process of copy workers and appliers that joins a running migration.

It follows the migration's durable stage: copy workers while the stage is `copy` (chunks are pulled
from the Redis queue the coordinator seeds), appliers (members of the migration's consumer group)
from `apply` until the swap (the coordinator's own appliers also run during the copy). It exits when
the migration is done or aborted. Coordination happens only through the database, Redis and Kafka,
so it may run on any machine.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

import pymysql

from applier.apply import apply_worker, new_member_name
from applier.copy import copy_worker
from migration.checks import PreflightError
from throttle.app_latency import LatencyProbe
from core.context import RunContext, spec_pair, target_connection
from core.db import connect, qualified
from core.endpoints import Endpoints
from core.logs import bind_fields, log_event
from migration.settings import settings_of
from core.spec import MigrationSpec
from core.state import PROTOCOL, StateStore
from core.state_records import Migration
from core.stages import FINISHED, SWAPPED_STAGES, WORKING_STAGES, Stage
from migration.transient import retrying_transient
from migration.workers import WorkerGroup
from throttle.sources import throttle_for
from throttle.yielding import Yielding, never_yielding
from monitor.progress import Progress

log = logging.getLogger("stream_osc.worker")

APPLY_STAGES = WORKING_STAGES[WORKING_STAGES.index(Stage.APPLY):]   # appliers run from apply to cutover
ERR_NO_SUCH_TABLE = 1146   # an applier's statement after the swap: _<table>_new has been renamed


def check_protocol(migration: Migration) -> None:
    """Refuse to work on a migration whose coordinator runs another version of how processes work together
    (core/state.py: PROTOCOL): a copy worker and an applier that disagree on it can lose a change."""
    if migration.protocol != PROTOCOL:
        theirs = "a version from before protocol stamps" if migration.protocol is None else \
            f"protocol {migration.protocol}"
        raise PreflightError(
            f"migration {migration.id} of {qualified(migration.database, migration.table)} is coordinated by "
            f"{theirs}; this worker speaks protocol {PROTOCOL}. Run the same stream-osc version in every process "
            "of a migration: to upgrade, `pause` it, stop its processes, upgrade them all, `resume` it, then start "
            "its workers again")


def spec_of(migration: Migration, copy_workers: int | None, apply_workers: int | None) -> MigrationSpec:
    """The migration's recorded spec with its run-time settings (`stream-osc set`), and this process's own
    worker counts."""
    options = {**migration.options, **settings_of(migration)}
    if copy_workers is not None:
        options["copy_workers"] = copy_workers
    if apply_workers is not None:
        options["apply_workers"] = apply_workers
    return MigrationSpec.from_table_arg(qualified(migration.database, migration.table), migration.alter_sql, **options)


class JoinedWorker:
    """Runs the worker kind the migration's current stage needs, until the migration ends."""

    def __init__(self, endpoints: Endpoints, database: str, table: str, schema: str, progress: Progress,
                 copy_workers: int | None = None, apply_workers: int | None = None) -> None:
        self.endpoints = endpoints
        self.conn = connect(endpoints.mysql)
        self.store = StateStore(self.conn, schema)
        migration = self.store.active(database, table)
        if migration is None:
            raise PreflightError(f"no unfinished migration of {database}.{table} to join")
        self.migration_id = migration.id
        bind_fields(migration=migration.id)
        self.database, self.table = database, table
        self.progress = progress
        self.copy_workers = copy_workers
        self.apply_workers = apply_workers
        self.applier_member = new_member_name()   # names this process's appliers in the group

    def _finished(self, migration: Migration) -> bool:
        return migration.status in FINISHED or migration.stage in SWAPPED_STAGES

    def run(self) -> int:
        """Work until the migration is finished; 0 then. Passing failures are waited out, then work resumes."""
        def report(exc: Exception, attempt: int, delay: float) -> None:
            log_event(log, "transient failure; resuming", logging.WARNING, error=str(exc), attempt=attempt,
                      retry_in_s=delay)
        while not retrying_transient(self._step, self._reconnect, report):
            pass
        return 0

    def _reconnect(self) -> None:
        """A fresh database session (the old one may have been cut)."""
        self.conn = connect(self.endpoints.mysql)
        self.store = StateStore(self.conn, self.store.schema)

    def _step(self) -> bool:
        """Run the workers the current stage needs until it changes; True once the migration is finished."""
        migration = self._current()
        if migration is None:
            time.sleep(1.0)   # init was undone to start over: wait for the table's new migration
            return False
        if self._finished(migration):
            self.progress.say(f"worker: migration {migration.id} is {migration.status}; exiting")
            return True
        if migration.stage == Stage.COPY:
            self._run_group(migration, copy_worker, Stage.COPY, lambda m: m.stage == Stage.COPY)
        elif migration.stage in APPLY_STAGES:
            self._run_group(migration, partial(apply_worker, member=self.applier_member), Stage.APPLY,
                            lambda m: m.stage in APPLY_STAGES)
        # init, or no chunk free for now (leased by others, or the coordinator re-seeds the queue)
        time.sleep(1.0)
        return False

    def _current(self) -> Migration | None:
        """The migration to work for; follows the table's new migration when an interrupted init started over."""
        migration = self.store.find(self.migration_id)
        if migration is None:
            migration = self.store.active(self.database, self.table)
            if migration is not None:
                self.migration_id = migration.id
                bind_fields(migration=migration.id)
        if migration is not None and not self._finished(migration):   # a swapped one is left, whoever swapped it
            check_protocol(migration)   # before any worker starts: the first step reads the migration here
        return migration

    def _run_group(self, migration: Migration, target: Callable[[RunContext, int], None], kind: str,
                   still: Callable[[Migration], bool]) -> None:
        """Run one kind of worker while `still(migration)` holds (or until the threads end by themselves)."""
        spec = spec_of(migration, self.copy_workers, self.apply_workers)
        target_conn = target_connection(self.endpoints, spec, migration)   # the server init wrote to, or refused
        try:
            pair = spec_pair(self.conn, spec, target_conn)
        finally:
            if target_conn is not None:
                target_conn.close()
        count = spec.copy_workers if kind == "copy" else spec.apply_workers
        yielding, probe = self._yielding(spec, migration) if kind == "copy" else (never_yielding(count), None)
        try:
            ctx = RunContext(self.endpoints, spec, migration, pair, throttle_for, yielding)
            log_event(log, "workers joined", migration=migration.id, kind=kind, count=count, stage=migration.stage)
            group = WorkerGroup(ctx, target, count, kind).start()
        except BaseException:   # the probe's threads and sessions end with the group they pace
            if probe is not None:
                probe.stop()
            raise
        try:
            while group.alive():
                group.wait(1.0)
                current = self.store.get(migration.id)
                if not still(current) or self._finished(current):
                    break
                check_protocol(current)   # a coordinator of another version claimed it: stop at once
        finally:
            group.stop()
            ctx.close()
            if probe is not None:
                probe.stop()
        if group.errors and not self._ended_by_swap(group.errors[0]):
            raise group.errors[0]

    def _yielding(self, spec: MigrationSpec, migration: Migration) -> tuple[Yielding, LatencyProbe]:
        """This process's copy workers yield to the application's latency, against the baseline the
        coordinator measured before the copy (measured here only when it is not known: a baseline taken
        while the copy runs would be too high)."""
        yielding = Yielding(spec.copy_workers, spec.app_latency_target())
        if migration.app_latency_baseline_ms is not None:
            yielding.set_baseline(migration.app_latency_baseline_ms)
        probe = LatencyProbe(lambda: connect(self.endpoints.mysql), spec.metadata_schema, migration.id,
                             yielding).start()
        return yielding, probe

    def _ended_by_swap(self, error: BaseException) -> bool:
        """An applier error that only means the tables were swapped meanwhile."""
        swapped = self._finished(self.store.get(self.migration_id))
        if swapped or (isinstance(error, pymysql.err.ProgrammingError) and error.args[0] == ERR_NO_SUCH_TABLE):
            log_event(log, "workers stopped by the swap", migration=self.migration_id, reason=str(error))
            return True
        return False
