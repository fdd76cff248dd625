"""The stage machine: init → copy → (indexes) → apply → validate → cutover → cleanup, each resumable from durable
state."""
from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial
from typing import Callable

import pymysql
import redis

from applier.apply import ApplyStats, apply_worker, new_member_name
from applier.giving_way import LockWaits
from applier.chunks import ChunkQueue
from applier.conflicts import ConstraintViolated
from applier.copy import copy_worker
from connectors.health import binlog_gone, describe_failure
from connectors.rest import ConnectError, ConnectorState, connect_client
from cutover.blocker_wait import POLL_S as BLOCKER_POLL_S, BlockerClock, BlockerWait
from cutover.blockers import find_blockers
from cutover.move import MoveCutover
from cutover.swap import CoordinatorReplaced, Cutover, CutoverAborted, CutoverResult
from cutover.validate import Sessions, validate
from cutover.validate_ahead import reusable_checks, validate_ahead
from migration.checks import PreflightError, check_blocker_privileges
from migration.cutover_request import ask_coordinator
from throttle.app_latency import LatencyProbe
from core.context import RunContext, read_throttle_note, spec_pair, target_connection
from core.db import ServerInfo, connect
from core.endpoints import Endpoints
from migration.index_stage import build_deferred_indexes, deferred
from migration.init_stage import run_init
from migration.settings import SETTINGS_OPTION, settings_of, with_settings
from migration.teardown import Metadata, tables_swapped, tear_down
from migration.lease import CoordinatorLease, coordinator_gone, live_coordinator
from core.process_owner import owner_name
from throttle.load import CriticalLoad, is_critical_load_error, throttle_change
from core.logs import bind_fields, log_event
from core.spec import TARGET_OPTIONS, MigrationSpec, with_overrides
from core.source_check import SourceChanged, check_source_unchanged
from core.swap_preconditions import UnsafeServerSetting, read_swap_settings, swap_setting_problem
from core.state import SWAPPED_STAGES, WORKING_STAGES, Migration, Stage, StateStore, Status
from migration.transient import MAX_TRANSIENT_FAILURES, is_transient, retrying_transient
from migration.workers import WorkerGroup
from throttle.sources import throttle_for
from throttle.yielding import Yielding
from monitor.capture_lag import LagWatch
from monitor.metrics import MigrationMetrics
from monitor.progress import Progress, copy_fraction
from streams.closing import close_within
from streams.topics import TopicNames, consumer_lag, group_reader

log = logging.getLogger("stream_osc.runner")

RESUMABLE_OPTIONS = ("partitions", "chunk_size", "metadata_schema", "keep_old", "cutover", "cutover_window_schedule",
                     "cutover_timezone", "defer_indexes", *TARGET_OPTIONS)
# kept with the migration too, but a value given to `resume`/`cutover` replaces the stored one (and is kept):
# how the cutover may lock, and what holds the work back or stops it (a migration stopped at --critical-load,
# resumed as its message says, must not go on without that limit)
LOCK_OPTIONS = ("lock_wait_s", "lock_tries", "force_kill_blockers_after_s", "force_kill_max_rows")
THROTTLE_OPTIONS = ("max_load", "critical_load", "cloudwatch_max_load", "rds_instance", "throttle_replicas",
                    "max_replica_lag", "max_app_latency")
KEPT_UNLESS_GIVEN = (*LOCK_OPTIONS, *THROTTLE_OPTIONS)
BASELINE_WAIT_S = 5.0              # longest wait for the application latency baseline before capture starts
MAX_CONNECTOR_RESTARTS = 3         # failed connector tasks restarted by one coordinator before it stops
CONNECTOR_RESTART_WAIT_S = 10.0    # how long a restart may take to show (the task leaving FAILED)
CONNECTOR_SETTLE_S = 5.0           # and how long it must then keep running to count as recovered
CONNECTOR_MISSING_GRACE_S = 60.0   # how long a connector may be absent from Connect before the run stops
WAITING_NOTE_S = 30.0              # a coordinator waiting for its cutover logs so (with the lag) this often
LAG_SHOW_S = 5.0                   # and reads the lag for the progress display and metrics this often
CHECKER_RETRY_S = 10.0             # validation ahead, stopped by a passing failure, starts again this much later
SNAPSHOT_TRIES = 3                 # validation snapshot tries in all (2, 4 s apart) before live tables are compared
LAG_POLL_S = 0.1                   # the applier group's lag is read this often while a stage waits for it to fall
#                                    (one reader for the whole wait: two requests a read); the stage moves on this
#                                    much after the lag allows; sessions holding the table are looked for as often
#                                    as the cutover's own wait for them does (BLOCKER_POLL_S)
THROTTLE_POLL_S = 0.5              # a lock postponed while throttled looks at the load again this often


def close_sessions(sessions: list[Sessions]) -> None:
    """Close validation's snapshot sessions (both servers' of a move)."""
    for pair in sessions:
        for session in pair:
            if session is not None:
                session.close()


def resumed_values(options: dict[str, object], given: frozenset[str]) -> dict[str, object]:
    """The values a resumed migration takes back from its stored `options`: every RESUMABLE_OPTIONS one, and
    the KEPT_UNLESS_GIVEN ones not `given` to the resuming command."""
    return {k: options[k] for k in (*RESUMABLE_OPTIONS, *KEPT_UNLESS_GIVEN)
            if k in options and (k in RESUMABLE_OPTIONS or k not in given)}


class MigrationStopped(Exception):
    """The migration stopped before its end (aborted, its connector failed, the cutover did not fit); the
    message says why. `resumable`: `stream-osc resume` can continue it (else only `abort` is left)."""

    user_facing = True

    def __init__(self, message: str, resumable: bool = True) -> None:
        super().__init__(message)
        self.resumable = resumable


def stopped_coordinator_error(error: str) -> Exception:
    """The error a coordinator asked to cut over stopped with, as its stored message tells it: the
    --critical-load stop (4), else a resumable stop (3). Runner._asked_coordinator_stop reads the facts first."""
    if is_critical_load_error(error):
        return CriticalLoad(error)
    return MigrationStopped(f"the coordinator stopped before the swap: {error}")


def throttle_note(client: redis.Redis, migration_id: int) -> str | None:
    """read_throttle_note for a display: None when Redis fails."""
    try:
        return read_throttle_note(client, migration_id)
    except redis.RedisError:
        return None


class Runner:
    """Coordinates one migration in this process (workers in other processes may join)."""

    def __init__(self, endpoints: Endpoints, spec: MigrationSpec, progress: Progress,
                 cutover_now: bool = False, resume_live: bool = False, metrics: MigrationMetrics | None = None,
                 given: frozenset[str] = frozenset()) -> None:
        self.endpoints = endpoints
        self.spec = spec
        self.given = given   # spec fields the operator set for this run (command line or config file)
        self.progress = progress
        self.metrics = metrics or MigrationMetrics(spec.qualified_name)
        self.cutover_now = cutover_now
        self.resume_live = resume_live   # a live coordinator elsewhere: un-pause it instead of refusing
        self.lease = CoordinatorLease(endpoints.mysql, spec.metadata_schema, owner_name())
        self.conn = connect(endpoints.mysql)
        self.info = ServerInfo.read(self.conn)
        self.store = StateStore(self.conn, spec.metadata_schema)
        self.connect = connect_client(endpoints)
        self.appliers: WorkerGroup | None = None
        self.checker: WorkerGroup | None = None   # validation ahead, during copy and apply
        self.checker_retry_at: float | None = None
        self.applier_member = new_member_name()   # names this process's appliers in the group
        self.last_health_check = 0.0
        self.throttle_shown: str | None = None   # the throttle reason last said
        self.connector_missing_since: float | None = None
        self.connector_restarts = 0
        self.settings: dict[str, object] = {}   # applied `stream-osc set` values
        self.restart_copy = False               # the copy workers restart to take new settings
        self.yielding = Yielding(spec.copy_workers, spec.app_latency_target())
        self.metrics.follow(self.yielding)
        self.probe: LatencyProbe | None = None
        self.blocker_clock = BlockerClock()     # --force-kill-blockers-after counts across waits and attempts

    # entry ---------------------------------------------------------------------------------------
    def run(self) -> int:
        """Run (or continue) the migration of spec's table to its end; 0 on success."""
        try:
            return self._run()
        finally:
            self._stop_probe()
            self.lease.stop(self.conn)
            bind_fields(migration=None)   # a later run in this process names its own

    def _run(self) -> int:
        migration = self.store.active(self.spec.database, self.spec.table)
        if migration is not None:
            if " ".join(migration.alter_sql.split()) != " ".join(self.spec.alter.split()):
                raise PreflightError(f"another migration of {self.spec.qualified_name} is in progress "
                                     f"(ALTER {migration.alter_sql!r}); resume or abort it first")
            live = live_coordinator(self.store, migration.id)
            if live is not None and not self.cutover_now:
                return self._join_live(migration, *live)
            if live is not None:
                if self._ask_live_coordinator(migration, live[0]):
                    return 0
                migration = self.store.get(migration.id)   # it went away before the swap: cut over here
            if not self.lease.claim(self.store, migration.id):
                raise PreflightError(f"another process took over migration {migration.id} just now")
            if migration.stage == Stage.INIT:
                # Killed during init: nothing was copied yet, so start init over from a clean slate.
                tear_down(self.conn, self.endpoints, self.spec, migration, drop_new_table=True,
                          metadata=Metadata.ALL, best_effort=True)
                # with the options the killed init was given (`resume` has no --defer-indexes, --drop-old, ...)
                self.spec = with_overrides(self.spec, **resumed_values(migration.options, self.given))
                self.yielding.configure(self.spec.copy_workers, self.spec.app_latency_target())
                migration = None
        if migration is None:
            self.metrics.stage(Stage.INIT)
            self.progress.say(f"init: checking {self.spec.qualified_name} and starting change capture")
            migration = run_init(self.conn, self.endpoints, self.spec, self.info, self.lease.owner,
                                 on_created=self._created,
                                 before_capture=lambda: self._wait_for_baseline(lambda: False))
            if migration is None:
                self.progress.say("dry run: every check passed and the ALTER is valid; nothing was changed")
                return 0
            self.progress.say(f"init: migration {migration.id} captures {self.spec.qualified_name} via connector "
                              f"{migration.connector}; copying by key ({', '.join(migration.pk_columns)})")
        else:
            self._created(migration)
            self.spec = self._resumed_spec(migration)
            migration = self.store.get(migration.id)   # with the options and settings stored just now
            self.settings = settings_of(migration)
            self.spec = with_settings(self.spec, migration)
            self.yielding.configure(self.spec.copy_workers, self.spec.app_latency_target())
            self.progress.say(f"resuming migration {migration.id} of {self.spec.qualified_name} "
                              f"at stage {migration.stage}")
            if migration.stage in WORKING_STAGES:
                self._warn_if_cutover_would_refuse()
            if migration.status != Status.RUNNING or migration.error:   # (an error of the work it continues: moot)
                self.store.update(migration.id, status=Status.RUNNING, error=None)
        return self._run_stages_retrying(migration.id)

    def _warn_if_cutover_would_refuse(self) -> None:
        """Say as a migration resumes, not hours later at its cutover, that the server's settings would stop it (a
        new migration has just passed preflight, which refuses them). Advisory only: a failed read says nothing;
        the cutover checks again (core/swap_preconditions.py)."""
        try:
            variables = read_swap_settings(self.conn)
        except pymysql.err.Error:
            return
        problem = swap_setting_problem(variables, self.info.is_mariadb)
        if problem is not None:
            log_event(log, "the cutover will refuse on this server's settings", logging.WARNING, reason=problem)
            self.progress.say(f"warning: the cutover will refuse unless this changes first: {problem}")

    def _resumed_spec(self, migration: Migration) -> MigrationSpec:
        """The spec a resumed migration runs with: its stored RESUMABLE_OPTIONS always; its stored KEPT_UNLESS_GIVEN
        unless given to this command, in which case the given value wins, over a `stream-osc set` one too, and is
        stored for later resumes. Refused (nothing changed) when the user may not do what the lock options ask
        (e.g. kill blockers)."""
        spec = with_overrides(self.spec, **resumed_values(migration.options, self.given))
        check_blocker_privileges(self.conn, spec)
        given = [k for k in KEPT_UNLESS_GIVEN if k in self.given]
        settings = settings_of(migration)
        replaced = {k: getattr(spec, k) for k in given if migration.options.get(k) != getattr(spec, k) or k in settings}
        if replaced:
            self.store.change_options(migration.id, lambda current: {
                **current.options, **replaced,
                SETTINGS_OPTION: {k: v for k, v in settings_of(current).items() if k not in replaced}})
            log_event(log, "stored options replaced", **replaced)
            self.progress.say("resume: " + ", ".join(f"{k}={v!r}" for k, v in replaced.items()) + " as given "
                              "(on the command line or in the config file), replacing the migration's own values")
        return spec

    def _created(self, migration: Migration) -> None:
        """From the moment the migration has an id: hold its lease and name it on every log line."""
        bind_fields(migration=migration.id)
        self.lease.start(migration.id)
        self._start_probe(migration.id)

    def _stop_probe(self) -> None:
        if self.probe is not None:
            self.probe.stop()
            self.probe = None
        self.metrics.forget_app_latency()

    def _start_probe(self, migration_id: int) -> None:
        """Sample the application's write latency from now on: init waits for the baseline before it starts the
        capture, and the copy's workers (here and in joined `worker` processes) then yield against it."""
        if self.probe is not None:
            return
        known = self.store.get(migration_id).app_latency_baseline_ms   # resumed: the one taken before the copy
        if known is not None:
            self.yielding.set_baseline(known)
        self.probe = LatencyProbe(lambda: connect(self.endpoints.mysql), self.spec.metadata_schema, migration_id,
                                  self.yielding, records_baseline=known is None).start()

    def _run_stages_retrying(self, migration_id: int) -> int:
        """Run the stages; after a passing failure (a service restarting, a cut connection) wait and resume
        from the durable state, a bounded number of times."""
        def report(exc: Exception, attempt: int, delay: float) -> None:
            self.progress.say(f"transient failure ({type(exc).__name__}: {exc}); resuming from the durable "
                              f"state in {delay:.0f} s ({attempt}/{MAX_TRANSIENT_FAILURES})")
            log_event(log, "transient failure", logging.WARNING, migration=migration_id, error=str(exc),
                      retry_in_s=delay)
        def resume() -> None:
            """A fresh session, and the passing failure's recorded error cleared, since the work it stopped goes
            on: left, it would read as this coordinator's answer to `stream-osc cutover` should it go away later,
            and the asking command would stop with it instead of cutting over itself. A failure of the resumed
            work records its own."""
            self._reconnect()
            self.store.update(migration_id, error=None)
        try:
            return retrying_transient(lambda: self._run_stages_explained(self.store.get(migration_id)), resume, report)
        except Exception as exc:
            if is_transient(exc):
                raise MigrationStopped(f"migration {migration_id} stopped: {type(exc).__name__}: {exc} outlasted "
                                       f"{MAX_TRANSIENT_FAILURES} retries; its state is kept: continue with "
                                       f"`stream-osc resume --table {self.spec.qualified_name}`") from exc
            raise

    def _run_stages_explained(self, migration: Migration) -> int:
        """Run the stages; a failure met while the source's definition differs from init's is reported as
        that change (a copy naming a dropped column fails before the periodic check sees the DDL)."""
        try:
            return self._run_stages(migration)
        except Exception as exc:
            if isinstance(exc, SourceChanged):
                raise
            try:
                stage = self.store.get(migration.id).stage
                if stage in WORKING_STAGES and not self._swap_already_done():
                    check_source_unchanged(self.conn, migration)   # (after the swap the name holds the new table)
            except SourceChanged as changed:
                self.store.update(migration.id, error=str(changed)[:2000])
                raise changed from exc
            except (pymysql.err.Error, LookupError):
                pass   # the check itself failed (e.g. the session was cut): the original error stands
            raise

    def _reconnect(self) -> None:
        """A fresh database session for the coordinator (the old one may have been cut)."""
        try:
            self.conn.close()
        except pymysql.err.Error:
            pass
        self.conn = connect(self.endpoints.mysql)
        self.store = StateStore(self.conn, self.spec.metadata_schema)

    def _join_live(self, migration: Migration, owner: str, age_s: float) -> int:
        """Another process coordinates this migration: `resume` un-pauses it, `migrate` refuses."""
        if not self.resume_live:
            raise PreflightError(f"migration {migration.id} of {self.spec.qualified_name} is being run by {owner} "
                                 f"(heartbeat {age_s:.0f} s ago); add workers with `stream-osc worker --table "
                                 f"{self.spec.qualified_name}` or pause/abort it")
        if migration.status == Status.PAUSED:
            self.store.update(migration.id, status=Status.RUNNING, error=None)
            self.progress.say(f"migration {migration.id} of {self.spec.qualified_name} resumed; {owner} continues it")
        else:
            self.progress.say(f"migration {migration.id} of {self.spec.qualified_name} is already {migration.status} "
                              f"under {owner}")
        return 0

    def _ask_live_coordinator(self, migration: Migration, owner: str) -> bool:
        """`stream-osc cutover` while a coordinator runs the migration: it swaps (True, also when it swaps after
        an abort's answer), it stops with an error (raised: Runner._asked_coordinator_stop), or it went away
        without a word (False: this process takes over)."""
        self.progress.say(f"asking {owner}, which runs migration {migration.id}, to cut over "
                          f"{self.spec.qualified_name} now (its own options apply)")
        log_event(log, "cutover requested", migration=migration.id, coordinator=owner)
        notes = redis.Redis.from_url(self.endpoints.redis_url, socket_timeout=5)
        try:
            answer = ask_coordinator(self.store, migration.id, self.progress.say,
                                     partial(throttle_note, notes, migration.id))
        finally:
            notes.close()
        if answer.swapped:
            self.progress.say(f"cutover: {owner} swapped {self.spec.qualified_name}")
            return True
        if answer.error:
            stop = self._asked_coordinator_stop(migration.id, answer.error)
            if stop is None:   # it swapped all the same: an abort came too late
                self.progress.say(f"cutover: {owner} swapped {self.spec.qualified_name}")
                return True
            raise stop
        self.progress.say(f"{owner} stopped before the swap; cutting over in this process")
        return False

    def _asked_coordinator_stop(self, migration_id: int, error: str) -> Exception | None:
        """The error of an asked coordinator's stop, with its exit code, read again from the facts once it is gone
        (an abort is answered before its coordinator stops, and it may swap meanwhile), where its message alone
        would misreport it. None: the tables were swapped and the coordinator finished, or is finishing, the
        migration. Its row removed (the ALTER refused by the rows, or a failed init): exit 2, as the
        coordinator's; swapped, its cleanup left unfinished: 3 (resume finishes); an abort, the source changed
        since init, or the connector's binlog position purged: 5; otherwise, or when the facts cannot be read
        now, as its message tells (stopped_coordinator_error)."""
        try:
            alive = not coordinator_gone(self.store, migration_id)
            current = self.store.find(migration_id)
            if current is None:
                return PreflightError(f"{error}: nothing of it is left, and {self.spec.qualified_name} is unchanged "
                                      "(the coordinator's output says why)")
            if current.stage == Stage.DONE or (current.stage in SWAPPED_STAGES and alive):
                return None
            if current.stage in SWAPPED_STAGES or self._swap_already_done():
                return MigrationStopped(f"{error}; the tables were swapped all the same: `stream-osc resume --table "
                                        f"{self.spec.qualified_name}` finishes the migration")
            if current.status == Status.ABORTED:
                return MigrationStopped(f"migration {migration_id} was aborted", resumable=False)
            if current.stage in WORKING_STAGES:
                check_source_unchanged(self.conn, current)
                state = self.connect.state(current.connector)
                if state is not None and state.failed and binlog_gone(state):
                    return MigrationStopped(describe_failure(current.connector, state, self.spec.qualified_name),
                                            resumable=False)
        except SourceChanged as changed:
            return changed
        except (pymysql.err.Error, ConnectError, LookupError):   # unknown here: the resume that follows finds out
            pass
        return stopped_coordinator_error(error)

    def _context(self, migration: Migration) -> RunContext:
        target = target_connection(self.endpoints, self.spec, migration)   # the server init wrote to, or refused
        try:
            pair = spec_pair(self.conn, self.spec, target)
        finally:
            if target is not None:
                target.close()
        if not pair.target_columns:
            raise PreflightError(f"table {self.spec.target_database}.{self.spec.new_table} of migration {migration.id} "
                                 f"is missing; run `stream-osc abort --table {self.spec.qualified_name}` and start "
                                 "again")
        return RunContext(self.endpoints, self.spec, migration, pair, throttle_for, self.yielding)

    def _observe(self, migration: Migration) -> None:
        """Name the migration and its stage in the metrics."""
        names = TopicNames(migration.prefix, self.spec.database, self.spec.table)
        self.metrics.migration(migration.id, migration.connector, names.changes, migration.group_id)
        self.metrics.stage(migration.stage)

    def _enter_stage(self, migration_id: int, stage: Stage, **values: object) -> None:
        self.store.enter_stage(migration_id, stage, **values)
        self.metrics.stage(stage)

    def _run_stages(self, migration: Migration) -> int:
        self._observe(migration)
        try:
            if migration.stage == Stage.CUTOVER and self._swap_already_done():
                self._enter_stage(migration.id, Stage.CLEANUP)
                migration = self.store.get(migration.id)
            if migration.stage in WORKING_STAGES:
                check_source_unchanged(self.conn, migration)   # resumed: still the table init captured?
                watch = LagWatch(self.endpoints, self.spec.metadata_schema, migration, self.spec.partitions,
                                 self.metrics).start()
                ctx = self._context(migration)
                try:
                    self._work(ctx)
                finally:
                    watch.stop()
                    ctx.close()
            self._cleanup(self.store.get(migration.id))
            return 0
        except ConstraintViolated:
            # The ALTER cannot succeed on this data (found by the copy, or written by the application
            # meanwhile): fail like the ALTER would, and leave nothing behind. The appliers' own errors
            # are this one again, or moot now.
            self._stop_checker(raise_error=False)
            if self.appliers is not None:
                self.appliers.stop()
                self.appliers = None
            self._discard(migration)
            raise
        except BaseException as exc:
            self._stop_checker(raise_error=False)
            self._stop_appliers(raise_error=False)   # their error (often this one again) must not hide this one
            if getattr(exc, "user_facing", False):
                self.store.update(migration.id, error=str(exc)[:2000])
            raise

    def _work(self, ctx: RunContext) -> None:
        """Copy, apply, validate and cut over from the stage reached (with --cutover manual, kept in sync until
        `stream-osc cutover` asks)."""
        migration = ctx.migration
        if migration.stage == Stage.COPY:
            self._wait_for_baseline(ctx.stop.is_set)   # resumed: taken at init unless that wait gave up
            if not deferred(migration):   # apply during the copy; deferred indexes are built before any apply
                self._start_appliers(ctx)
                self._start_checker(ctx)
            self._copy(ctx)
        if self.store.get(migration.id).stage == Stage.INDEXES:   # before any applier writes to the new table
            self._hold_while_paused(ctx)
            table_conn = ctx.target_db()
            try:
                build_deferred_indexes(table_conn, migration, self.spec, self.progress.say)
            finally:
                table_conn.close()
            self._enter_stage(migration.id, Stage.APPLY)
        if self.appliers is None:
            self._start_appliers(ctx)
        stage = self.store.get(migration.id).stage
        if stage == Stage.APPLY:
            if self.checker is None:
                self._start_checker(ctx)
            self._wait_for_lag(ctx, self.spec.max_lag_events)
            self._enter_stage(ctx.migration.id, Stage.VALIDATE)
            stage = Stage.VALIDATE
        self._stop_checker()
        self.checker_retry_at = None
        # one for the validation snapshot and every attempt: its fence consumer is made once, not after every wait
        cutover = (MoveCutover if ctx.pair.remote else Cutover)(ctx, self.info.is_mariadb)
        try:
            if stage == Stage.VALIDATE:
                self._hold_while_paused(ctx)
                self._validate(ctx, cutover)
            self._stop_probe()   # only copy and validation yield to the application's latency
            if self.spec.cutover == "manual":
                self._wait_for_cutover_request(ctx)
            self._cutover(ctx, cutover)
        finally:
            cutover.close()

    def _wait_for_baseline(self, stopped: Callable[[], bool]) -> None:
        """Add no load before the application's latency is measured without it (throttle/yielding.py); a probe
        that cannot write for BASELINE_WAIT_S does not hold the work back (copy and validation then run at
        their settings until it can, as after any probe failure). Init waits before the capture starts; the
        copy waits again only if that gave up (or on a resume without a recorded baseline)."""
        if self.yielding.needs_baseline() and not self.yielding.wait_for_baseline(BASELINE_WAIT_S, stopped):
            log_event(log, "no application latency baseline yet; going on without it (it is taken once the probe "
                           "writes)", logging.WARNING, waited_s=BASELINE_WAIT_S)

    # stages --------------------------------------------------------------------------------------
    def _copy(self, ctx: RunContext) -> None:
        queue = ChunkQueue(ctx.redis(), ctx.migration.id)
        while True:
            pending = [c.number for c in self.store.chunks(ctx.migration.id) if not c.done]
            if not pending:
                break
            if not queue.is_seeded() or queue.pending_count() == 0:
                queue.seed(pending)   # Redis is a cache: rebuilt from the metadata schema
            self.restart_copy = False
            group = WorkerGroup(ctx, copy_worker, self.spec.copy_workers, "copy").start()
            self.yielding.forget_stretch()   # the copy's own seconds at its slowest, not those before it
            try:
                while group.alive() and not self.restart_copy:
                    group.wait(0.5)
                    self._raise_if_helpers_failed(ctx)
                    self._show_copy(ctx)
                    self._show_throttle(ctx)
                    self._tell_if_held_at_slowest()
                    self._check_health(ctx)
            finally:
                group.stop()
                self.yielding.forget_stretch()
            group.raise_if_failed()
        self._show_throttle(ctx)   # a release followed by the last chunks within one tick is said too
        self._show_copy(ctx, force=True)
        self._enter_stage(ctx.migration.id, Stage.INDEXES if deferred(ctx.migration) else Stage.APPLY)

    def _show_copy(self, ctx: RunContext, force: bool = False) -> None:
        chunks = self.store.chunks(ctx.migration.id)
        rows = sum(c.rows_copied for c in chunks)
        fraction, done = copy_fraction(chunks, self.spec.chunk_size), sum(c.done for c in chunks)
        self.metrics.copy(fraction, rows, done, len(chunks))   # samples the copy rate, once for both displays
        self.progress.copy(fraction, rows, done, len(chunks), *self.metrics.copy_estimate, force=force)

    def _show_throttle(self, ctx: RunContext) -> None:
        """Say when the workers start or stop holding back (--max-load, --max-app-latency)."""
        try:
            reason = read_throttle_note(ctx.shared_redis(), ctx.migration.id)
        except redis.RedisError:
            return   # a display only: Redis failures are handled where the work needs Redis
        self.metrics.throttle(reason)
        for line in throttle_change(self.throttle_shown, reason):
            self.progress.say(line)
        self.throttle_shown = reason

    def _tell_if_held_at_slowest(self) -> None:
        """Once the copy has yielded as far as it goes for long without the application's latency coming under its
        target: say so, and name the setting that lets the copy finish sooner (throttle/yielding.py)."""
        held = self.yielding.held_at_slowest()
        if held is None:
            return
        self.progress.say(f"{held.text()}: `stream-osc set --table {self.spec.qualified_name} max-app-latency=off` "
                          "lets it finish sooner")
        log_event(log, "copy held at its slowest with the application's latency over its target", logging.WARNING,
                  held_s=round(held.seconds), seconds_judged=held.judged, seconds_over=held.over,
                  latency_ms=round(held.latency_ms, 1), target_ms=round(held.target_ms, 1))

    def _start_appliers(self, ctx: RunContext) -> None:
        self.appliers = WorkerGroup(ctx, partial(apply_worker, member=self.applier_member),
                                    self.spec.apply_workers, "apply").start()

    def _validates_ahead(self, ctx: RunContext) -> bool:
        """Whether copied chunks are checked during the copy and those checks used: asked for, and the new table
        on this server (on another, the copy re-reads rows without locking them, so a row it writes is not
        proved to be the source's: cutover/README.md, "Validation ahead")."""
        return self.spec.validate_ahead and not ctx.pair.remote

    def _start_checker(self, ctx: RunContext) -> None:
        if self._validates_ahead(ctx):
            self.checker = WorkerGroup(ctx, validate_ahead, 1, "validate-ahead").start()

    def _stop_checker(self, raise_error: bool = True) -> None:
        """Stop validation ahead (its checks so far are kept); a failure that is not passing is raised unless the
        run ends anyway."""
        if self.checker is not None:
            self.checker.stop()
            errors, self.checker = self.checker.errors, None
            if errors and raise_error and not is_transient(errors[0]):
                raise errors[0]

    def _raise_if_helpers_failed(self, ctx: RunContext) -> None:
        """Raise the first failure of the appliers or of validation ahead, which run beside the stage. Validation
        ahead only saves work later: a passing failure of it (a service restarting) is logged and it starts again
        CHECKER_RETRY_S later, without stopping the run."""
        if self.appliers is not None:
            self.appliers.raise_if_failed()
        if self.checker is not None and self.checker.errors:
            error = self.checker.errors[0]
            if not is_transient(error):
                raise error
            log_event(log, "validation ahead failed; starting it again", logging.WARNING, error=str(error),
                      retry_in_s=CHECKER_RETRY_S)
            self._stop_checker(raise_error=False)
            self.checker_retry_at = time.monotonic() + CHECKER_RETRY_S
        if self.checker is None and self.checker_retry_at is not None and time.monotonic() >= self.checker_retry_at:
            self.checker_retry_at = None
            self._start_checker(ctx)

    def _stop_appliers(self, raise_error: bool = True) -> None:
        """Stop this process's appliers; the first error one of them met is raised, or with `raise_error` False
        (the run already stops for its own error) logged."""
        if self.appliers is not None:
            self.appliers.stop()
            errors, self.appliers = self.appliers.errors, None
            if errors and raise_error:
                raise errors[0]
            if errors:
                log_event(log, "applier stopped with an error", logging.WARNING, error=str(errors[0]))

    @contextmanager
    def _lag_reader(self, ctx: RunContext) -> Iterator[Callable[[], int]]:
        """Reads of the applier group's lag for one wait, through one reader (not a consumer per read)."""
        topic = TopicNames(ctx.migration.prefix, self.spec.database, self.spec.table).changes
        reader = group_reader(self.endpoints.kafka, ctx.migration.group_id)
        try:
            yield lambda: consumer_lag(reader, topic, self.spec.partitions)
        finally:
            close_within(reader, "lag")

    def _wait_for_lag(self, ctx: RunContext, limit: int, look_for_blockers: bool = False) -> int:
        """Apply until the group's lag is at most `limit` events. With `look_for_blockers` (right before a lock
        is wanted), sessions holding the table are looked for meanwhile, so that the --force-kill-blockers-after
        clock starts when one appears, not when the lag allows the next look."""
        stats = ApplyStats(ctx.redis(), ctx.migration.id)
        first: tuple[float, int] | None = None
        looked_for_blockers = float("-inf")
        with self._lag_reader(ctx) as read_lag:
            while True:   # a pause does not hold this wait (the appliers hold themselves): the stage may move on
                self._raise_if_helpers_failed(ctx)
                self._check_health(ctx)
                self._show_throttle(ctx)
                lag = read_lag()
                applied = stats.read().get("events", 0)
                now = time.monotonic()
                first = first or (now, applied)
                rate = (applied - first[1]) / (now - first[0]) if now > first[0] else 0
                lag_s = lag / rate if rate > 0 else None
                self.progress.apply(lag, applied, lag_s)
                self.metrics.apply(lag, applied, lag_s)
                self.metrics.apply_waits(LockWaits.read(ctx.shared_redis(), ctx.migration.id))
                if look_for_blockers and now - looked_for_blockers >= BLOCKER_POLL_S:
                    looked_for_blockers = now
                    self.blocker_clock.saw(find_blockers(self.conn, self.spec.database, self.spec.table,
                                                         self.info.is_mariadb), time.monotonic())
                if lag <= limit:
                    return lag
                time.sleep(LAG_POLL_S)

    def _validate(self, ctx: RunContext, cutover: Cutover) -> None:
        snapshots = self._consistent_snapshots(ctx, cutover)
        try:
            where = "in one consistent snapshot" if snapshots else "against the live tables"
            reusable = reusable_checks(ctx) if self._validates_ahead(ctx) else None
            if reusable is None:
                self.progress.say(f"validate: comparing checksums of every PK range {where}")
                repaired = validate(ctx, snapshots)
            else:
                self.progress.say(f"validate: {len(reusable.ranges)} PK ranges were checked during the copy; "
                                  f"comparing the {len(reusable.changed)} keys changed since and the other ranges "
                                  f"{where}")
                repaired = validate(ctx, snapshots, reusable.ranges, reusable.changed)
        finally:
            close_sessions(snapshots or [])
        self._enter_stage(ctx.migration.id, Stage.CUTOVER, validation_diffs=repaired)
        self.metrics.validation(repaired)
        self.progress.say(f"validate: clean ({repaired} differing rows re-copied and re-checked)")

    def _consistent_snapshots(self, ctx: RunContext, cutover: Cutover) -> list[Sessions] | None:
        """Sessions sharing one snapshot in which the new table equals the source, or None if that
        moment could not be had within the cutover window in SNAPSHOT_TRIES tries (validation then compares
        live tables, which under steady writes to the same rows may not settle). One lock or drain too slow
        for the window (a freshly started Connect worker, a burst) is no reason to give up the snapshot; each
        try that misses costs the application what a cutover attempt that misses costs it.

        Taking it blocks writes as briefly as a cutover does; it spares validation under traffic from
        re-reading every range that a write touched meanwhile. Sessions holding the table are waited for as
        the cutover waits for them (no lock requested meanwhile), before and whenever they stop a try: a
        holder is not a reason to fall back to the live tables.

        The appliers go on applying through it when the new table is on this server (cutover/README.md,
        "The validation snapshot"): the lock holds them off both tables while the snapshots are opened.
        Stopping them cost every change of the following seconds its commit→applied time (measured: 2 s
        without an applied event under 1,000 tx/s). A new table on another server is outside the lock, so
        there they are stopped.
        """
        stop_appliers = ctx.pair.remote
        postponed = tries = 0
        while True:
            self._wait_for_lag(ctx, self.spec.max_lag_events)
            self._wait_for_blockers(ctx, "validate")
            self._hold_while_paused(ctx)   # a pause set during the waits above is kept before any lock
            if self._hold_while_throttled(ctx, "validate"):
                continue   # the appliers were held back too: caught up again before the lock
            if stop_appliers:
                self._stop_appliers()
            sessions = [(ctx.db(), ctx.target_db() if ctx.pair.remote else None)
                        for _ in range(self.spec.copy_workers)]
            try:
                blocked = cutover.consistent_snapshots(self.spec.cutover_window_s, sessions)
                self.progress.say(f"validate: consistent snapshot taken; writes waited {blocked:.0f} ms")
            except BaseException as exc:
                close_sessions(sessions)
                if not isinstance(exc, CutoverAborted):
                    raise   # the run stops or is retried: no applier to start here
                if stop_appliers:
                    self._start_appliers(ctx)
                if exc.blockers:   # no lock was requested: wait for them, then try again
                    self.blocker_clock.saw(exc.blockers, time.monotonic())
                    self.progress.say(f"validate: {exc}")
                    continue
                if exc.throttled:   # no lock was requested: held before the next try
                    postponed += 1
                    self._postpone(ctx, f"validate: {exc}", postponed)
                    continue
                postponed, tries = 0, tries + 1
                if tries < SNAPSHOT_TRIES:   # a drain a moment too slow (a burst of writes, a worker warming up)
                    delay = 2 ** tries
                    log_event(log, "validation snapshot missed; tried again", logging.WARNING, reason=str(exc),
                              tries=tries, retry_in_s=delay)
                    self.progress.say(f"validate: no consistent snapshot within the window ({exc}); trying again "
                                      f"in {delay} s ({tries} of {SNAPSHOT_TRIES})")
                    time.sleep(delay)
                    continue
                log_event(log, "no consistent snapshot for validation", logging.WARNING, reason=str(exc),
                          tries=tries)
                self.progress.say(f"validate: no consistent snapshot within the window in {tries} tries ({exc})")
                return None
            if stop_appliers:
                self._start_appliers(ctx)
            return sessions

    def _cutover(self, ctx: RunContext, cutover: Cutover) -> None:
        """Attempts until one swaps (holders waited for, not counted); the new table is ANALYZEd once the swap
        may run (inside its window), so its statistics are fresh when the application meets it."""
        if self.cutover_now:   # `stream-osc cutover` cutting over itself: a request it left for a coordinator
            self.store.clear_cutover_request(ctx.migration.id)   # that died must not outlive this attempt
        analyzed = False
        attempt = postponed = 0
        while attempt < self.spec.cutover_attempts:
            self._hold_while_paused(ctx)
            if self.appliers is None:
                self._start_appliers(ctx)
            self._wait_for_lag(ctx, self.spec.max_lag_events, look_for_blockers=True)
            self._wait_for_window(ctx)
            if not analyzed:
                took, analyzed = cutover.refresh_statistics(), True
                self.progress.say(f"cutover: ANALYZE TABLE {self.spec.new_table} took {took * 1000:.0f} ms")
            self._wait_for_blockers(ctx, "cutover")
            if not self._window_open(ctx):   # it closed while sessions held the table
                continue
            self._hold_while_paused(ctx)   # a pause set during the waits above is kept before any lock
            if self._hold_while_throttled(ctx, "cutover"):
                continue   # the appliers were held back too: caught up again before the lock
            self._stop_appliers()
            try:
                result = cutover.attempt(self.spec.cutover_window_s, self.lease.owner)
            except CoordinatorReplaced as exc:
                raise MigrationStopped(f"{exc}; that process continues the migration") from None
            except UnsafeServerSetting as exc:
                raise MigrationStopped(f"cutover refused: {exc}; the original table is untouched and the new one "
                                       f"kept: continue with `stream-osc resume --table {self.spec.qualified_name}` "
                                       "once it is changed") from None
            if result.throttled:   # no lock was requested: held again before the next, not counted either
                postponed += 1
                self._start_appliers(ctx)   # applying meanwhile
                self._postpone(ctx, f"cutover: {result.reason}", postponed)
                continue
            postponed = 0
            self.metrics.cutover_attempt(result.swapped, result.blocked_ms)
            if result.swapped:
                self._enter_stage(ctx.migration.id, Stage.CLEANUP, cutover_blocked_ms=int(result.blocked_ms),
                                  cutover_at=result.locked_at)
                self.progress.say(self._swapped_message(result))
                return
            if result.blockers:   # no lock was requested: wait for them again, not counted as an attempt
                self.blocker_clock.saw(result.blockers, time.monotonic())
                self.progress.say(f"cutover: {result.reason}")
                continue
            attempt += 1
            backoff = min(2 ** attempt, 30)
            self.progress.say(f"cutover: attempt {attempt} rolled back ({result.reason}); retrying in {backoff} s")
            time.sleep(backoff)
        raise MigrationStopped(f"cutover did not fit the {self.spec.cutover_window_s:.1f} s window in "
                               f"{self.spec.cutover_attempts} attempts; the original table is untouched. Retry with "
                               "`stream-osc cutover` at a quieter time or with a larger --cutover-window")

    def _swapped_message(self, result: CutoverResult) -> str:
        """What the swap did, and on a move to another server the moment the application must switch."""
        blocked = (f"application writes were blocked for {result.blocked_ms:.0f} ms ({result.drained_keys} keys "
                   "drained under lock)")
        if not self.spec.target_server:
            return f"cutover: swapped {self.spec.qualified_name}; {blocked}"
        at = datetime.fromtimestamp(result.locked_at, timezone.utc).isoformat(timespec="milliseconds")
        target = self.endpoints.target(self.spec.target_dsn).where()
        return (f"cutover: {self.spec.qualified_name} moved; from {at} the target {target} "
                f"{self.spec.target_database}.{self.spec.new_table} holds every acknowledged write and the source "
                f"table is renamed to {self.spec.database}.{self.spec.old_table}, so writes to the old address "
                f"fail; switch the application to the target now; {blocked}")

    def _cutover_asked(self, ctx: RunContext) -> bool:
        """True once the swap was asked for: this process is `stream-osc cutover`, or that command asked this
        running coordinator (migration/cutover_request.py; the request is taken up, so it is answered once)."""
        if not self.cutover_now and self.store.cutover_requested(ctx.migration.id):
            self.store.clear_cutover_request(ctx.migration.id)
            self.cutover_now = True
            self.progress.say("cutover: asked for by `stream-osc cutover`")
            log_event(log, "cutover request taken up")
        return self.cutover_now

    def _window_open(self, ctx: RunContext) -> bool:
        """True when --cutover-window-schedule allows the swap now (or `stream-osc cutover` asked for it)."""
        schedule = self.spec.schedule()
        return self._cutover_asked(ctx) or schedule is None or schedule.is_open(datetime.now(timezone.utc))

    def _wait_for_window(self, ctx: RunContext) -> None:
        """Outside the cutover windows: wait, the appliers keeping the new table in sync, until one opens."""
        if self._window_open(ctx):
            return
        schedule = self.spec.schedule()
        opening = schedule.next_opening(datetime.now(timezone.utc))
        self.progress.say(f"cutover: waiting for the cutover window {schedule.describe()}, next at "
                          f"{opening:%Y-%m-%d %H:%M %Z}; the new table is kept in sync meanwhile (`stream-osc "
                          f"cutover --table {self.spec.qualified_name}` swaps now)")
        self._keep_in_sync_until(ctx, lambda: self._window_open(ctx), "waiting for cutover window",
                                 schedule=schedule.describe(), opens_at=opening.isoformat())
        if not self.cutover_now:
            self.progress.say(f"cutover: window {schedule.describe()} open")

    def _wait_for_cutover_request(self, ctx: RunContext) -> None:
        """--cutover manual: stay in sync, this process's appliers applying, until `stream-osc cutover` asks
        (it reaches this process through the migration's row); the status says `waiting` meanwhile."""
        if self._cutover_asked(ctx):
            return
        self._hold_while_paused(ctx)
        self.store.set_status(ctx.migration.id, Status.WAITING, only_from=(Status.RUNNING,))
        self.progress.say(f"in sync and waiting for cutover: the appliers keep the new table in sync; run "
                          f"`stream-osc cutover --table {self.spec.qualified_name}` to swap the tables")
        self._keep_in_sync_until(ctx, lambda: self._cutover_asked(ctx), "waiting for cutover", waiting_status=True)
        self.store.set_status(ctx.migration.id, Status.RUNNING, only_from=(Status.WAITING,))

    def _keep_in_sync_until(self, ctx: RunContext, ready: Callable[[], bool], event: str,
                            waiting_status: bool = False, **fields: object) -> None:
        """Apply until `ready()`, checked about once a second; the lag is shown meanwhile and logged (`event`)
        every WAITING_NOTE_S. With `waiting_status`, the status is put back to `waiting` after a pause."""
        stats = ApplyStats(ctx.redis(), ctx.migration.id)
        noted = lag_read = 0.0
        with self._lag_reader(ctx) as read_lag:
            while not ready():
                self._tick(ctx)
                if waiting_status:   # back to waiting after a pause (never over a pause or abort written meanwhile)
                    self.store.set_status(ctx.migration.id, Status.WAITING, only_from=(Status.RUNNING,))
                now = time.monotonic()
                if now - lag_read >= LAG_SHOW_S:
                    lag, lag_read = read_lag(), now
                    applied = stats.read().get("events", 0)
                    self.progress.apply(lag, applied, None)
                    self.metrics.apply(lag, applied, None)
                    self.metrics.apply_waits(LockWaits.read(ctx.shared_redis(), ctx.migration.id))
                    if now - noted >= WAITING_NOTE_S:
                        log_event(log, event, table=self.spec.qualified_name, apply_lag_events=lag, **fields)
                        noted = now
                time.sleep(1.0)

    def _wait_for_blockers(self, ctx: RunContext, stage: str) -> None:
        """Wait, with the appliers applying and no lock requested, while sessions hold the table
        (cutover/blocker_wait.py); health, abort, pause and applier failures are checked meanwhile."""
        BlockerWait(ctx, self.info.is_mariadb, self.blocker_clock).wait(
            lambda: self._tick(ctx), lambda text: self.progress.say(f"{stage}: {text}"))

    def _tick(self, ctx: RunContext) -> None:
        """What every wait checks about once a second: an applier's failure, the health of the migration (abort,
        connector, source table), and the operator's pause (waited out here)."""
        if self.appliers is not None:
            self.appliers.raise_if_failed()
        self._check_health(ctx)
        self._hold_while_paused(ctx)

    def _swap_already_done(self) -> bool:
        """After a crash inside cutover: did the RENAME run?"""
        return tables_swapped(self.conn, self.spec)

    def _cleanup(self, migration: Migration) -> None:
        tear_down(self.conn, self.endpoints, self.spec, migration, drop_new_table=False,
                  drop_old_table=not self.spec.keep_old, metadata=Metadata.KEEP)
        self._enter_stage(migration.id, Stage.DONE, status=Status.DONE, error=None)
        kept = f"; original kept as {self.spec.database}.{self.spec.old_table}" if self.spec.keep_old else ""
        if self.spec.target_server:
            self.progress.say(f"done: {self.spec.qualified_name} lives on the target server as "
                              f"{self.spec.target_database}.{self.spec.new_table}{kept}")
        else:
            self.progress.say(f"done: {self.spec.qualified_name} has the new schema{kept}")

    def _discard(self, migration: Migration) -> None:
        """Remove everything the migration made, including its metadata rows."""
        tear_down(self.conn, self.endpoints, self.spec, migration, drop_new_table=True, metadata=Metadata.ALL)

    def _hold_while_paused(self, ctx: RunContext) -> None:
        """Wait (writing nothing) while an operator has the migration paused."""
        announced = False
        while True:
            status = self.store.status(ctx.migration.id)
            if status == Status.ABORTED:
                raise MigrationStopped(f"migration {ctx.migration.id} was aborted", resumable=False)
            if status != Status.PAUSED:
                break
            if not announced:
                self.progress.say(f"paused: no writes until `stream-osc resume --table {self.spec.qualified_name}`")
                announced = True
            self._check_health(ctx)
            time.sleep(0.5)
        if announced:
            self.progress.say("resumed")

    def _postpone(self, ctx: RunContext, why: str, times: int) -> None:
        """After the `times`-th lock in a row given up to a throttle read right before it, wait longer each time
        (up to 30 s): a load hovering at its limit, or one the attempt's own sessions and catch-up raise, must not
        start an attempt (applier stop and start, catch-up, on MariaDB a sentry table) every few seconds. An
        abort, a failed applier or a lost lease ends the wait."""
        backoff = min(2 ** times, 30)
        self.progress.say(f"{why}; next try in {backoff} s at the earliest")
        until = time.monotonic() + backoff
        while time.monotonic() < until:
            self._raise_if_helpers_failed(ctx)
            self._check_health(ctx)
            time.sleep(min(THROTTLE_POLL_S, max(until - time.monotonic(), 0)))

    def _hold_while_throttled(self, ctx: RunContext, stage: str) -> bool:
        """Wait, locking nothing, while --max-load (or CloudWatch, a replica's lag, a move's target) holds the
        work back; True if it did. A lock requested then queues the application's writes behind a busy server,
        and the appliers, held back by the same limits, fall behind meanwhile; gh-ost's throttle postpones its
        cut-over likewise. A --critical-load threshold raises CriticalLoad here as anywhere."""
        reason = ctx.throttle_reason(self.conn)
        if reason is None:
            return False
        held = time.monotonic()
        self.progress.say(f"{stage}: held while throttled ({reason}); no lock is requested until the load drops")
        log_event(log, "lock postponed while throttled", stage=stage, reason=reason)
        while reason is not None:
            self._raise_if_helpers_failed(ctx)   # an applier may be the one that met the critical load
            self._check_health(ctx)
            self._show_throttle(ctx)
            time.sleep(THROTTLE_POLL_S)
            reason = ctx.throttle_reason(self.conn)
        self.progress.say(f"{stage}: throttle released after {time.monotonic() - held:.0f} s")
        return True

    def _check_health(self, ctx: RunContext) -> None:
        """Stop when the connector failed, the migration was aborted or the source table was altered
        (checked every 2 s)."""
        if time.monotonic() - self.last_health_check < 2.0:
            return
        self.last_health_check = time.monotonic()
        if self.lease.lost.is_set():
            raise MigrationStopped(f"migration {ctx.migration.id}: another process took over as coordinator")
        current = self.store.get(ctx.migration.id)
        if current.status == Status.ABORTED:
            raise MigrationStopped(f"migration {ctx.migration.id} was aborted", resumable=False)
        self._follow_settings(ctx, current)
        check_source_unchanged(self.conn, ctx.migration)
        state = self.connect.state(ctx.migration.connector)
        if state is None:
            # A Connect worker that just restarted lists its connectors only once it has read its config topic.
            self.connector_missing_since = self.connector_missing_since or time.monotonic()
            if time.monotonic() - self.connector_missing_since < CONNECTOR_MISSING_GRACE_S:
                return
            raise MigrationStopped(f"connector {ctx.migration.connector} is missing from Kafka Connect")
        self.connector_missing_since = None
        name = ctx.migration.connector
        while state is not None and state.failed:
            if binlog_gone(state) or self.connector_restarts >= MAX_CONNECTOR_RESTARTS:
                raise MigrationStopped(describe_failure(name, state, self.spec.qualified_name),
                                       resumable=not binlog_gone(state))
            # e.g. its binlog connection was cut mid-event: a restart resumes from the committed offset
            self.connector_restarts += 1
            self.progress.say(f"connector {name} failed ({state.error_line()}); restarting it from its committed "
                              f"position ({self.connector_restarts}/{MAX_CONNECTOR_RESTARTS})")
            log_event(log, "connector restarted", logging.WARNING, connector=name, error=state.error_line(),
                      restarts=self.connector_restarts)
            self.connect.restart_failed(name)
            state = self._state_after_restart(name)

    def _follow_settings(self, ctx: RunContext, migration: Migration) -> None:
        """Take up `stream-osc set` values: the spec changes, and the workers restart with it (they resume
        from durable state, as after any stop)."""
        settings = settings_of(migration)
        if settings == self.settings:
            return
        before, self.settings = self.spec, settings
        self.spec = with_overrides(self.spec, **settings)
        changed = {name: value for name, value in settings.items() if getattr(before, name) != value}
        if not changed:
            return
        self.yielding.configure(self.spec.copy_workers, self.spec.app_latency_target())
        ctx.retune(self.spec)
        log_event(log, "settings changed", **changed)
        self.progress.say("settings changed: " + ", ".join(f"{name}={value}" for name, value in changed.items()))
        self.restart_copy = True
        if self.appliers is not None:
            self._stop_appliers()
            self._start_appliers(ctx)

    def _state_after_restart(self, name: str) -> ConnectorState | None:
        """The state of a restarted connector: once it has left FAILED, RUNNING for CONNECTOR_SETTLE_S
        (a task that fails at start-up reports RUNNING first), or FAILED again."""
        restarted_by = time.monotonic() + CONNECTOR_RESTART_WAIT_S
        state = self.connect.state(name)
        while state is not None and state.failed and time.monotonic() < restarted_by:
            time.sleep(0.2)
            state = self.connect.state(name)
        settled_by = time.monotonic() + CONNECTOR_SETTLE_S
        while state is not None and not state.failed and time.monotonic() < settled_by:
            time.sleep(0.2)
            state = self.connect.state(name)
        return state
