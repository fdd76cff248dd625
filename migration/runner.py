"""The stage machine, in order: init → copy → (indexes) → apply → validate → cutover → cleanup, each resumable
from durable state (core/stages.py: TRANSITIONS). Supervision, the lag waits, the cutover loop and resuming are
parts of their own (migration/supervision.py, lag_waits.py, cutover_loop.py, resuming.py) sharing one
Coordination."""
from __future__ import annotations

import logging
from typing import Callable

import pymysql

from applier.chunks import ChunkQueue
from applier.conflicts import ConstraintViolated
from applier.copy import copy_worker
from core.context import RunContext, spec_pair, target_connection
from core.db import connect
from core.endpoints import Endpoints
from core.logs import bind_fields, log_event
from core.source_check import SourceChanged, check_source_unchanged
from core.spec import MigrationSpec, with_overrides
from core.state_records import Migration
from core.stages import WORKING_STAGES, Stage, Status
from cutover.blocker_wait import BlockerClock
from cutover.foreign_keys import drop_old_foreign_keys, rebuild_child_keys, remove_foreign_keys
from cutover.move import MoveCutover
from cutover.swap import Cutover
from migration.background import BackgroundWorkers
from migration.checks import PreflightError
from migration.coordination import Coordination, MigrationStopped
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
from migration.workers import WorkerGroup
from monitor.capture_lag import LagWatch
from monitor.metrics import MigrationMetrics
from monitor.progress import Progress, copy_fraction
from streams.topics import TopicNames
from throttle.app_latency import LatencyProbe
from throttle.sources import throttle_for

log = logging.getLogger("stream_osc.runner")

BASELINE_WAIT_S = 5.0   # longest wait for the application latency baseline before capture starts
COPY_TICK_S = 0.5       # the copy's loop looks at its workers, the throttle and the health this often


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
        self.probe: LatencyProbe | None = None
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
            self._stop_probe()
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
                             on_created=self._created, before_capture=lambda: self._wait_for_baseline(lambda: False),
                             instant=self.instant.decide)
        if migration is None:
            shared.say(self.instant.expected())
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
        self._start_probe(migration.id)

    def _start_probe(self, migration_id: int) -> None:
        """Sample the application's write latency from now on: init waits for the baseline before it starts the
        capture, and the copy's workers (here and in joined `worker` processes) then yield against it."""
        if self.probe is not None:
            return
        shared = self.shared
        known = shared.store.get(migration_id).app_latency_baseline_ms   # resumed: the one taken before the copy
        if known is not None:
            shared.yielding.set_baseline(known)
        self.probe = LatencyProbe(lambda: connect(shared.endpoints.mysql), shared.spec.metadata_schema, migration_id,
                                  shared.yielding, records_baseline=known is None).start()

    def _stop_probe(self) -> None:
        if self.probe is not None:
            self.probe.stop()
            self.probe = None
        self.shared.metrics.forget_app_latency()

    def _wait_for_baseline(self, stopped: Callable[[], bool]) -> None:
        """Add no load before the application's latency is measured without it (throttle/yielding.py); a probe
        that cannot write for BASELINE_WAIT_S does not hold the work back (copy and validation then run at
        their settings until it can, as after any probe failure). Init waits before the capture starts; the
        copy waits again only if that gave up (or on a resume without a recorded baseline)."""
        yielding = self.shared.yielding
        if yielding.needs_baseline() and not yielding.wait_for_baseline(BASELINE_WAIT_S, stopped):
            log_event(log, "no application latency baseline yet; going on without it (it is taken once the probe "
                           "writes)", logging.WARNING, waited_s=BASELINE_WAIT_S)

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
            self._wait_for_baseline(ctx.stop.is_set)   # resumed: taken at init unless that wait gave up
            if not deferred(migration):   # apply during the copy; deferred indexes are built before any apply
                workers.start_appliers(ctx)
                workers.start_checker(ctx)
            self._copy(ctx)
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
            self._stop_probe()   # only copy and validation yield to the application's latency
            self._tell_in_sync(migration.id)
            if shared.spec.cutover == "manual":
                self.cutover_loop.wait_for_cutover_request(ctx)
            self.cutover_loop.cut_over(ctx, cutover)
        finally:
            cutover.close()

    def _copy(self, ctx: RunContext) -> None:
        """Copy every chunk not done, the workers restarted when settings change; then indexes or apply."""
        shared = self.shared
        queue = ChunkQueue(ctx.redis(), ctx.migration.id)
        while True:
            pending = [c.number for c in shared.store.chunks(ctx.migration.id) if not c.done]
            if not pending:
                break
            if not queue.is_seeded() or queue.pending_count() == 0:
                queue.seed(pending)   # Redis is a cache: rebuilt from the metadata schema
            shared.restart_copy = False
            group = WorkerGroup(ctx, copy_worker, shared.spec.copy_workers, "copy").start()
            shared.yielding.forget_stretch()   # the copy's own seconds at its slowest, not those before it
            try:
                while group.alive() and not shared.restart_copy:
                    group.wait(COPY_TICK_S)
                    self.workers.raise_if_failed(ctx)
                    self._show_copy(ctx)
                    self.supervisor.show_throttle(ctx)
                    self._tell_if_held_at_slowest()
                    self.supervisor.check_health(ctx)
            finally:
                group.stop()
                shared.yielding.forget_stretch()
            group.raise_if_failed()
        self.supervisor.show_throttle(ctx)   # a release followed by the last chunks within one tick is said too
        self._show_copy(ctx, force=True)
        shared.enter_stage(ctx.migration.id, Stage.INDEXES if deferred(ctx.migration) else Stage.APPLY)
        shared.notify("copy-done", ctx.migration.id)

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

    def _show_copy(self, ctx: RunContext, force: bool = False) -> None:
        shared = self.shared
        chunks = shared.store.chunks(ctx.migration.id)
        rows = sum(c.rows_copied for c in chunks)
        fraction, done = copy_fraction(chunks, shared.spec.chunk_size), sum(c.done for c in chunks)
        shared.metrics.copy(fraction, rows, done, len(chunks))   # samples the copy rate, once for both displays
        shared.progress.copy(fraction, rows, done, len(chunks), *shared.metrics.copy_estimate, force=force)

    def _tell_if_held_at_slowest(self) -> None:
        """Once the copy has yielded as far as it goes for long without the application's latency coming under its
        target: say so, and name the setting that lets the copy finish sooner (throttle/yielding.py)."""
        held = self.shared.yielding.held_at_slowest()
        if held is None:
            return
        self.shared.say(f"{held.text()}: `stream-osc set --table {self.shared.spec.qualified_name} "
                        "max-app-latency=off` lets it finish sooner")
        log_event(log, "copy held at its slowest with the application's latency over its target", logging.WARNING,
                  held_s=round(held.seconds), seconds_judged=held.judged, seconds_over=held.over,
                  latency_ms=round(held.latency_ms, 1), target_ms=round(held.target_ms, 1))

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
