"""The stage machine, in order: init → copy → (indexes) → apply → validate → cutover → cleanup, each resumable
from durable state (core/stages.py: TRANSITIONS). Supervision, the lag waits, the cutover loop and resuming are
parts of their own (migration/supervision.py, lag_waits.py, cutover_loop.py, resuming.py) sharing one
Coordination."""
from __future__ import annotations

import logging
import pymysql

from applier.conflicts import ConstraintViolated
from core.context import RunContext, spec_pair, target_connection
from core.endpoints import Endpoints
from core.logs import bind_fields, log_event
from core.source_check import SourceChanged, check_source_unchanged
from core.triggers import read_triggers, recorded_triggers, settle_triggers
from core.spec import MigrationSpec, with_overrides
from core.state_records import Migration
from core.stages import WORKING_STAGES, Stage, Status
from cutover.blocker_wait import BlockerClock
from cutover.foreign_keys import drop_old_foreign_keys, rebuild_child_keys, remove_foreign_keys
from cutover.move import MoveCutover
from cutover.swap import Cutover
from migration.app_probe import AppLatencySampling
from migration.background import BackgroundWorkers
from migration.checks import PreflightError
from migration.coordination import Coordination, MigrationStopped
from migration.copy_stage import CopyStage
from migration.cutover_loop import CutoverLoop
from migration.index_stage import build_deferred_indexes, deferred
from migration.init_stage import run_init
from migration.instant_stage import InstantStage
from migration.lag_waits import LagWaits
from migration.lease import live_coordinator
from migration.notify import stop_figures
from migration.resuming import Resuming, resumed_values
from migration.settings import settings_of, with_settings
from migration.supervision import Supervisor
from migration.teardown import Metadata, tear_down
from migration.transient import MAX_TRANSIENT_FAILURES, is_transient, retrying_transient
from monitor.capture_lag import LagWatch
from monitor.metrics import MigrationMetrics
from monitor.progress import Progress
from streams.topics import TopicNames
from throttle.sources import throttle_for

log = logging.getLogger("stream_osc.runner")

class Runner:
    """Coordinates one migration in this process (workers in other processes may join)."""

    def __init__(self, endpoints: Endpoints, spec: MigrationSpec, progress: Progress,
                 cutover_now: bool = False, resume_live: bool = False, metrics: MigrationMetrics | None = None,
                 given: frozenset[str] = frozenset()) -> None:
        self.shared = Coordination.open(endpoints, spec, progress, metrics or MigrationMetrics(spec.qualified_name),
                                        cutover_now)
        self.given = given   # spec fields the operator set for this run (command line or config file)
        self.workers = BackgroundWorkers(self.shared)
        self.supervisor = Supervisor(self.shared, self.workers)
        blocker_clock = BlockerClock()   # --force-kill-blockers-after counts across waits and attempts
        self.lag = LagWaits(self.shared, self.supervisor, self.workers, blocker_clock)
        self.cutover_loop = CutoverLoop(self.shared, self.supervisor, self.workers, self.lag, blocker_clock)
        self.instant = InstantStage(self.shared, blocker_clock)
        self.resuming = Resuming(self.shared, given, resume_live)
        self.sampling = AppLatencySampling(self.shared)
        self.copy = CopyStage(self.shared, self.supervisor, self.workers)
        self.migration_id: int | None = None   # once this process coordinates a migration with an id

    # entry ---------------------------------------------------------------------------------------
    def run(self) -> int:
        """Run (or continue) the migration of spec's table to its end; 0 on success. A stop with an error is told
        (`failed`, or `aborted`) once the lease is given up, so an `abort` waiting for this process goes on."""
        stopped: tuple[str, dict] | None = None
        try:
            return self._run()
        except Exception as exc:
            stopped = self._stop_event(exc)
            raise
        finally:
            self.sampling.stop()
            self.shared.lease.stop(self.shared.conn)
            if stopped is not None:
                self.shared.notify(stopped[0], self.migration_id, **stopped[1])
            bind_fields(migration=None)   # a later run in this process names its own

    def _stop_event(self, exc: Exception) -> tuple[str, dict] | None:
        """The event and figures of a stop on `exc` of the migration this process coordinates (None before it
        coordinates one: a refusal, or another process's migration this one only asked)."""
        if self.migration_id is None:
            return None
        try:
            aborted = self.shared.store.status(self.migration_id) == Status.ABORTED
        except Exception:  # noqa: BLE001 - the session may be what failed: then it did not read as aborted
            aborted = False
        return stop_figures(exc, aborted)

    def _run(self) -> int:
        """Start the migration, or take up the one under way (joining or asking its live coordinator instead)."""
        shared = self.shared
        migration = shared.store.active(shared.spec.database, shared.spec.table)
        if migration is not None:
            if " ".join(migration.alter_sql.split()) != " ".join(shared.spec.alter.split()):
                raise PreflightError(f"another migration of {shared.spec.qualified_name} is in progress "
                                     f"(ALTER {migration.alter_sql!r}); resume or abort it first")
            live = live_coordinator(shared.store, migration.id)
            if live is not None and not shared.cutover_now:
                return self.resuming.join_live(migration, *live)
            if live is not None:
                if self.resuming.ask_live_coordinator(migration, live[0]):
                    return 0
                migration = shared.store.get(migration.id)   # it went away before the swap: cut over here
            if not shared.lease.claim(shared.store, migration.id):
                raise PreflightError(f"another process took over migration {migration.id} just now")
            if migration.stage == Stage.INIT and self.instant.landed(migration):
                shared.say(f"done: {shared.spec.qualified_name} has the new schema: the server made the change "
                           "instantly before the coordinator that asked for it was stopped; nothing was copied")
                return 0
            if migration.stage == Stage.INIT:
                # Killed during init: nothing was copied yet, so start init over from a clean slate.
                tear_down(shared.conn, shared.endpoints, shared.spec, migration, drop_new_table=True,
                          metadata=Metadata.ALL, best_effort=True)
                # with the options the killed init was given (`resume` has no --defer-indexes, --drop-old, ...)
                shared.spec = with_overrides(shared.spec, **resumed_values(migration.options, self.given))
                shared.configure_yielding()
                migration = None
        migration = self._init() if migration is None else self._resume(migration)
        return 0 if migration is None else self._run_stages_retrying(migration.id)

    def _init(self) -> Migration | None:
        """Init: checks, metadata, then the server's instant change if it can make it, else the new table, topics
        and the connector; None after a dry run or an instant change (the migration is done)."""
        shared = self.shared
        shared.metrics.stage(Stage.INIT)
        shared.say(f"init: checking {shared.spec.qualified_name}")
        migration = run_init(shared.conn, shared.endpoints, shared.spec, shared.info, shared.lease.owner,
                             on_created=self._created, instant=self.instant.decide,
                             before_capture=lambda: self.sampling.wait_for_baseline(lambda: False))
        if migration is None:
            shared.say(self.instant.expected())
            triggers = read_triggers(shared.conn, shared.spec.database, shared.spec.table)
            if triggers:   # each was created on the altered empty table, then dropped (migration/trigger_checks.py)
                shared.say(f"dry run: triggers {', '.join(t.name for t in triggers)} fit the altered table; a copy "
                           "moves them to the new table at the swap")
            shared.say("dry run: every check passed and the ALTER is valid; nothing was changed")
            return None
        if migration.stage == Stage.DONE:
            shared.notify("started", migration.id, resumed=False, path="instant")
            shared.say(f"done: {shared.spec.qualified_name} has the new schema: the server made the change "
                       f"instantly (ALGORITHM=INSTANT, {self.instant.took_ms:.0f} ms); nothing was copied")
            shared.notify("swapped", migration.id, blocked_ms=round(self.instant.took_ms), path="instant")
            return None
        shared.say(f"init: migration {migration.id} captures {shared.spec.qualified_name} via connector "
                   f"{migration.connector}; copying by key ({', '.join(migration.pk_columns)})")
        shared.notify("started", migration.id, resumed=False)
        return migration

    def _resume(self, migration: Migration) -> Migration:
        """Take up a migration under way with its stored options and `stream-osc set` values."""
        shared = self.shared
        self._created(migration)
        shared.spec = self.resuming.resumed_spec(migration)
        migration = shared.store.get(migration.id)   # with the options and settings stored just now
        self.supervisor.settings = settings_of(migration)
        shared.spec = with_settings(shared.spec, migration)
        shared.configure_yielding()
        shared.say(f"resuming migration {migration.id} of {shared.spec.qualified_name} at stage {migration.stage}")
        if migration.stage in WORKING_STAGES:
            self.resuming.warn_if_cutover_would_refuse()
        if migration.status != Status.RUNNING or migration.error:   # (an error of the work it continues: moot)
            shared.store.update(migration.id, status=Status.RUNNING, error=None)
        shared.notify("started", migration.id, resumed=True)
        return migration

    def _created(self, migration: Migration) -> None:
        """From the moment the migration has an id: hold its lease and name it on every log line."""
        bind_fields(migration=migration.id)
        self.migration_id = migration.id
        self.shared.lease.start(migration.id)
        self.sampling.start(migration.id)

    # the stages, retried after passing failures ---------------------------------------------------
    def _run_stages_retrying(self, migration_id: int) -> int:
        """Run the stages; after a passing failure (a service restarting, a cut connection) wait and resume
        from the durable state, a bounded number of times."""
        shared = self.shared
        def report(exc: Exception, attempt: int, delay: float) -> None:
            shared.say(f"transient failure ({type(exc).__name__}: {exc}); resuming from the durable "
                       f"state in {delay:.0f} s ({attempt}/{MAX_TRANSIENT_FAILURES})")
            log_event(log, "transient failure", logging.WARNING, migration=migration_id, error=str(exc),
                      retry_in_s=delay)
        def resume() -> None:
            """A fresh session, and the passing failure's recorded error cleared, since the work it stopped goes
            on: left, it would read as this coordinator's answer to `stream-osc cutover` should it go away later,
            and the asking command would stop with it instead of cutting over itself. A failure of the resumed
            work records its own."""
            shared.reconnect()
            shared.store.update(migration_id, error=None)
        try:
            return retrying_transient(lambda: self._run_stages_explained(shared.store.get(migration_id)), resume,
                                      report)
        except Exception as exc:
            if is_transient(exc):
                raise MigrationStopped(f"migration {migration_id} stopped: {type(exc).__name__}: {exc} outlasted "
                                       f"{MAX_TRANSIENT_FAILURES} retries; its state is kept: continue with "
                                       f"`stream-osc resume --table {shared.spec.qualified_name}`") from exc
            raise

    def _run_stages_explained(self, migration: Migration) -> int:
        """Run the stages; a failure met while the source's definition differs from init's is reported as
        that change (a copy naming a dropped column fails before the periodic check sees the DDL)."""
        shared = self.shared
        try:
            return self._run_stages(migration)
        except Exception as exc:
            if isinstance(exc, SourceChanged):
                raise
            try:
                stage = shared.store.get(migration.id).stage
                if stage in WORKING_STAGES and not shared.swap_already_done():
                    check_source_unchanged(shared.conn, migration)   # (after the swap the name holds the new table)
            except SourceChanged as changed:
                shared.store.update(migration.id, error=str(changed)[:2000])
                raise changed from exc
            except (pymysql.err.Error, LookupError):
                pass   # the check itself failed (e.g. the session was cut): the original error stands
            raise

    def _run_stages(self, migration: Migration) -> int:
        """The stages from the one reached; a failure is recorded with the migration when it is the user's to read,
        and a constraint the data breaks removes everything the migration made, as the ALTER would have failed."""
        shared = self.shared
        self._name_in_metrics(migration)
        try:
            if migration.stage == Stage.CUTOVER and shared.swap_already_done():
                shared.enter_stage(migration.id, Stage.CLEANUP)
                migration = shared.store.get(migration.id)
            if migration.stage in WORKING_STAGES:
                self._work_watched(migration)
            self._cleanup(shared.store.get(migration.id))
            return 0
        except ConstraintViolated:
            # The ALTER cannot succeed on this data (found by the copy, or written by the application
            # meanwhile): fail like the ALTER would, and leave nothing behind. The appliers' own errors
            # are this one again, or moot now.
            self.workers.stop_checker(raise_error=False)
            self.workers.discard_appliers()
            tear_down(shared.conn, shared.endpoints, shared.spec, migration, drop_new_table=True,
                      metadata=Metadata.ALL)
            raise
        except BaseException as exc:
            self.workers.stop_quietly()   # their error (often this one again) must not hide this one
            if getattr(exc, "user_facing", False):
                shared.store.update(migration.id, error=str(exc)[:2000])
            raise

    def _name_in_metrics(self, migration: Migration) -> None:
        """Name the migration, its connector, topic and group, and its stage in the metrics."""
        names = TopicNames(migration.prefix, self.shared.spec.database, self.shared.spec.table)
        self.shared.metrics.migration(migration.id, migration.connector, names.changes, migration.group_id)
        self.shared.metrics.stage(migration.stage)

    def _work_watched(self, migration: Migration) -> None:
        """The working stages, with the capture lag watched and a run context open meanwhile."""
        shared = self.shared
        # a cutover killed while moving the triggers left guards: exactly one set back on the table first
        settle_triggers(shared.conn, shared.spec, recorded_triggers(migration.options), migration.id)
        check_source_unchanged(shared.conn, migration)   # resumed: still the table init captured?
        remove_foreign_keys(shared.conn, shared.spec, migration.options)   # left by a cutover stopped in its lock
        watch = LagWatch(shared.endpoints, shared.spec.metadata_schema, migration, shared.spec.partitions,
                         shared.metrics).start()
        ctx = self._context(migration)
        try:
            self._work(ctx)
        finally:
            watch.stop()
            ctx.close()

    def _context(self, migration: Migration) -> RunContext:
        shared = self.shared
        target = target_connection(shared.endpoints, shared.spec, migration)   # the server init wrote to, or refused
        try:
            pair = spec_pair(shared.conn, shared.spec, target)
        finally:
            if target is not None:
                target.close()
        if not pair.target_columns:
            raise PreflightError(f"table {shared.spec.target_database}.{shared.spec.new_table} of migration "
                                 f"{migration.id} is missing; run `stream-osc abort --table "
                                 f"{shared.spec.qualified_name}` and start again")
        return RunContext(shared.endpoints, shared.spec, migration, pair, throttle_for, shared.yielding)

    # the algorithm ---------------------------------------------------------------------------------
    def _work(self, ctx: RunContext) -> None:
        """Copy, apply, validate and cut over from the stage reached (with --cutover manual, kept in sync until
        `stream-osc cutover` asks)."""
        shared, workers, migration = self.shared, self.workers, ctx.migration
        if migration.stage == Stage.COPY:
            self.sampling.wait_for_baseline(ctx.stop.is_set)   # resumed: taken at init unless that wait gave up
            if not deferred(migration):   # apply during the copy; deferred indexes are built before any apply
                workers.start_appliers(ctx)
                workers.start_checker(ctx)
            self.copy.run(ctx)
        if shared.store.get(migration.id).stage == Stage.INDEXES:   # before any applier writes to the new table
            self._build_indexes(ctx)
        if workers.appliers is None:
            workers.start_appliers(ctx)
        stage = shared.store.get(migration.id).stage
        if stage == Stage.APPLY:
            if workers.checker is None:
                workers.start_checker(ctx)
            self.lag.wait_for_lag(ctx, shared.spec.max_lag_events)
            shared.enter_stage(migration.id, Stage.VALIDATE)
            stage = Stage.VALIDATE
        workers.end_validation_ahead()
        # one for the validation snapshot and every attempt: its fence consumer is made once, not after every wait
        cutover = (MoveCutover if ctx.pair.remote else Cutover)(ctx, shared.info.is_mariadb)
        try:
            if stage == Stage.VALIDATE:
                self.supervisor.hold_while_paused(ctx)
                self.cutover_loop.validate(ctx, cutover)
            self.sampling.stop()   # only copy and validation yield to the application's latency
            self._tell_in_sync(migration.id)
            if shared.spec.cutover == "manual":
                self.cutover_loop.wait_for_cutover_request(ctx)
            self.cutover_loop.cut_over(ctx, cutover)
        finally:
            cutover.close()

    def _tell_in_sync(self, migration_id: int) -> None:
        """`in-sync`: validated, the cutover next; what it waits for, if anything (`stream-osc cutover` with
        --cutover manual, or the next window of its schedule)."""
        shared = self.shared
        schedule = shared.spec.schedule()
        now = shared.clock.now()
        if shared.cutover_now:
            waiting: dict[str, object] = {}
        elif shared.spec.cutover == "manual":
            waiting = {"waiting_for": "cutover-request"}
        elif schedule is not None and not schedule.is_open(now):
            waiting = {"waiting_for": "window", "window_opens_at": schedule.next_opening(now).isoformat()}
        else:
            waiting = {}
        shared.notify("in-sync", migration_id, **waiting)

    def _build_indexes(self, ctx: RunContext) -> None:
        """--defer-indexes: add the deferred indexes to the new table, then apply."""
        self.supervisor.hold_while_paused(ctx)
        table_conn = ctx.target_db()
        try:
            build_deferred_indexes(table_conn, ctx.migration, self.shared.spec, self.shared.say)
        finally:
            table_conn.close()
        self.shared.enter_stage(ctx.migration.id, Stage.APPLY)

    def _cleanup(self, migration: Migration) -> None:
        shared, spec = self.shared, self.shared.spec
        drop_old_foreign_keys(shared.conn, spec)   # (done already unless stopped right after the swap)
        rebuild_child_keys(shared.conn, spec, migration.options)
        tear_down(shared.conn, shared.endpoints, spec, migration, drop_new_table=False,
                  drop_old_table=not spec.keep_old, metadata=Metadata.KEEP)
        shared.enter_stage(migration.id, Stage.DONE, status=Status.DONE, error=None)
        kept = f"; original kept as {spec.database}.{spec.old_table}" if spec.keep_old else ""
        if spec.target_server:
            shared.say(f"done: {spec.qualified_name} lives on the target server as "
                       f"{spec.target_database}.{spec.new_table}{kept}")
        else:
            shared.say(f"done: {spec.qualified_name} has the new schema{kept}")
