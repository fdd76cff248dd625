"""From validation to the swap: the validation snapshot, the cutover windows and `stream-osc cutover` requests
(the new table kept in sync while waiting for them), then attempts until one swaps within its window."""
from __future__ import annotations

import logging
from datetime import datetime, timezone

from core.context import RunContext
from core.logs import log_event
from core.stages import Stage, Status
from core.swap_preconditions import UnsafeServerSetting
from cutover.blocker_wait import BlockerClock, BlockerWait
from cutover.swap import CoordinatorReplaced, Cutover, CutoverAborted, CutoverResult
from cutover.validate import Sessions, validate
from cutover.validate_ahead import reusable_checks
from migration.background import BackgroundWorkers
from migration.coordination import Coordination, MigrationStopped
from migration.lag_waits import LagWaits
from migration.supervision import Supervisor

log = logging.getLogger("stream_osc.runner")   # the coordinator's events keep one logger: log readers match it

SNAPSHOT_TRIES = 3   # validation snapshot tries in all (2, 4 s apart) before live tables are compared
HOOK_RETRY_MAX_S = 30   # a swap postponed by the before-cutover hook asks it again after 2, 4, 8 … up to this many s


def close_sessions(sessions: list[Sessions]) -> None:
    """Close validation's snapshot sessions (both servers' of a move)."""
    for pair in sessions:
        for session in pair:
            if session is not None:
                session.close()


class CutoverLoop:
    """Validation and the cutover of one migration, as the coordinator runs them."""

    def __init__(self, shared: Coordination, supervisor: Supervisor, workers: BackgroundWorkers, lag: LagWaits,
                 blocker_clock: BlockerClock) -> None:
        self.shared = shared
        self.supervisor = supervisor
        self.workers = workers
        self.lag = lag
        self.blocker_clock = blocker_clock   # --force-kill-blockers-after counts across waits and attempts
        self.analyzed = False                # the new table's statistics were refreshed in this cut_over
        self.hook_refusals = 0               # before-cutover hook refusals in a row

    # validation ------------------------------------------------------------------------------------
    def validate(self, ctx: RunContext, cutover: Cutover) -> None:
        """Compare the tables (in one consistent snapshot when one can be had), re-copying what differs; then
        the cutover stage. Keys changed since validation ahead's checks are read after the snapshot is taken."""
        shared = self.shared
        snapshots = self.consistent_snapshots(ctx, cutover)
        try:
            where = "in one consistent snapshot" if snapshots else "against the live tables"
            reusable = reusable_checks(ctx) if self.workers.validates_ahead(ctx) else None
            if reusable is None:
                shared.say(f"validate: comparing checksums of every PK range {where}")
                repaired = validate(ctx, snapshots)
            else:
                shared.say(f"validate: {len(reusable.ranges)} PK ranges were checked during the copy; comparing "
                           f"the {len(reusable.changed)} keys changed since and the other ranges {where}")
                repaired = validate(ctx, snapshots, reusable.ranges, reusable.changed)
        finally:
            close_sessions(snapshots or [])
        shared.enter_stage(ctx.migration.id, Stage.CUTOVER, validation_diffs=repaired)
        shared.metrics.validation(repaired)
        shared.say(f"validate: clean ({repaired} differing rows re-copied and re-checked)")

    def consistent_snapshots(self, ctx: RunContext, cutover: Cutover) -> list[Sessions] | None:
        """Sessions sharing one snapshot in which the new table equals the source, or None if that moment could
        not be had within the cutover window in SNAPSHOT_TRIES tries (validation then compares live tables). One
        lock or drain too slow for the window is no reason to give up the snapshot; a try that misses costs the
        application what a missed cutover attempt costs it. Holders of the table are waited for as the cutover
        waits for them, before and whenever they stop a try.

        The appliers go on applying through it when the new table is on this server (docs/cutover.md, "The
        validation snapshot"): the lock holds them off both tables while the snapshots are opened. A new table
        on another server is outside the lock, so there they are stopped."""
        stop_appliers = ctx.pair.remote
        postponed = tries = 0
        while True:
            self.lag.wait_for_lag(ctx, self.shared.spec.max_lag_events)
            self.wait_for_blockers(ctx, "validate")
            self.supervisor.hold_while_paused(ctx)   # a pause set during the waits above is kept before any lock
            if self.supervisor.hold_while_throttled(ctx, "validate"):
                continue   # the appliers were held back too: caught up again before the lock
            if stop_appliers:
                self.workers.stop_appliers()
            sessions = [(ctx.db(), ctx.target_db() if ctx.pair.remote else None)
                        for _ in range(self.shared.spec.copy_workers)]
            try:
                blocked = cutover.consistent_snapshots(self.shared.spec.cutover_window_s, sessions)
                self.shared.say(f"validate: consistent snapshot taken; writes waited {blocked:.0f} ms")
            except CutoverAborted as exc:
                close_sessions(sessions)
                if stop_appliers:
                    self.workers.start_appliers(ctx)
                counts = self._snapshot_missed(ctx, exc, postponed, tries)
                if counts is None:
                    return None
                postponed, tries = counts
                continue
            except BaseException:
                close_sessions(sessions)
                raise   # the run stops or is retried: no applier to start here
            if stop_appliers:
                self.workers.start_appliers(ctx)
            return sessions

    def _snapshot_missed(self, ctx: RunContext, exc: CutoverAborted, postponed: int,
                         tries: int) -> tuple[int, int] | None:
        """After a snapshot try that took no snapshot: the (postponed, tries) counts to try again with, once
        waited; None when live tables are to be compared instead."""
        shared = self.shared
        if exc.blockers:   # no lock was requested: wait for them, then try again
            self.blocker_clock.saw(exc.blockers, shared.clock.monotonic())
            shared.say(f"validate: {exc}")
            return postponed, tries
        if exc.throttled:   # no lock was requested: held before the next try
            self.supervisor.postpone(ctx, f"validate: {exc}", postponed + 1)
            return postponed + 1, tries
        tries += 1
        if tries < SNAPSHOT_TRIES:   # a drain a moment too slow (a burst of writes, a worker warming up)
            delay = 2 ** tries
            log_event(log, "validation snapshot missed; tried again", logging.WARNING, reason=str(exc),
                      tries=tries, retry_in_s=delay)
            shared.say(f"validate: no consistent snapshot within the window ({exc}); trying again in {delay} s "
                       f"({tries} of {SNAPSHOT_TRIES})")
            shared.clock.sleep(delay)
            return 0, tries
        log_event(log, "no consistent snapshot for validation", logging.WARNING, reason=str(exc), tries=tries)
        shared.say(f"validate: no consistent snapshot within the window in {tries} tries ({exc})")
        return None

    # the cutover -----------------------------------------------------------------------------------
    def cut_over(self, ctx: RunContext, cutover: Cutover) -> None:
        """Attempts until one swaps (holders waited for, not counted; a lock given up to the throttle neither);
        the new table is ANALYZEd once the swap may run (inside its window), so its statistics are fresh when
        the application meets it."""
        shared = self.shared
        if shared.cutover_now:   # `stream-osc cutover` cutting over itself: a request it left for a coordinator
            shared.store.clear_cutover_request(ctx.migration.id)   # that died must not outlive this attempt
        self.analyzed = False
        self.hook_refusals = 0
        attempt = postponed = 0
        while attempt < shared.spec.cutover_attempts:
            if not self._ready_to_lock(ctx, cutover):
                continue
            self.workers.stop_appliers()
            result = self._attempt(cutover)
            if result.throttled:   # no lock was requested: held again before the next, not counted either
                postponed += 1
                self.workers.start_appliers(ctx)   # applying meanwhile
                self.supervisor.postpone(ctx, f"cutover: {result.reason}", postponed)
                continue
            postponed = 0
            shared.metrics.cutover_attempt(result.swapped, result.blocked_ms)
            if result.swapped:
                shared.enter_stage(ctx.migration.id, Stage.CLEANUP, cutover_blocked_ms=int(result.blocked_ms),
                                   cutover_at=result.locked_at)
                shared.say(self._swapped_message(result))
                shared.notify("swapped", ctx.migration.id, blocked_ms=int(result.blocked_ms))   # the lock is gone
                return
            if result.blockers:   # no lock was requested: wait for them again, not counted as an attempt
                self.blocker_clock.saw(result.blockers, shared.clock.monotonic())
                shared.say(f"cutover: {result.reason}")
                continue
            attempt += 1
            backoff = min(2 ** attempt, 30)
            shared.say(f"cutover: attempt {attempt} rolled back ({result.reason}); retrying in {backoff} s")
            shared.notify("cutover-failed", ctx.migration.id, attempt=attempt, attempts=shared.spec.cutover_attempts,
                          error=result.reason, retry_in_s=backoff)   # rolled back: no lock held
            shared.clock.sleep(backoff)
        raise MigrationStopped(f"cutover did not fit the {shared.spec.cutover_window_s:.1f} s window in "
                               f"{shared.spec.cutover_attempts} attempts; the original table is untouched. Retry "
                               "with `stream-osc cutover` at a quieter time or with a larger --cutover-window")

    def _ready_to_lock(self, ctx: RunContext, cutover: Cutover) -> bool:
        """Caught up, inside a window, no session holding the table, not paused, not throttled and let by the
        before-cutover hook: True when the lock may be asked for now; False when a wait ended with a reason to look
        again (the window closed while sessions held the table, the throttle held the work back and the appliers
        fell behind, or the hook postponed the swap)."""
        self.supervisor.hold_while_paused(ctx)
        if self.workers.appliers is None:
            self.workers.start_appliers(ctx)
        self.lag.wait_for_lag(ctx, self.shared.spec.max_lag_events, look_for_blockers=True)
        self.wait_for_window(ctx)
        if not self.analyzed:
            took, self.analyzed = cutover.refresh_statistics(), True
            self.shared.say(f"cutover: ANALYZE TABLE {self.shared.spec.new_table} took {took * 1000:.0f} ms")
        self.wait_for_blockers(ctx, "cutover")
        if not self.window_open(ctx):   # it closed while sessions held the table
            return False
        self.supervisor.hold_while_paused(ctx)   # a pause set during the waits above is kept before any lock
        if self.supervisor.hold_while_throttled(ctx, "cutover"):
            return False
        return self._hook_allows(ctx)

    def _hook_allows(self, ctx: RunContext) -> bool:
        """The before-cutover hooks, run with no lock held and the appliers applying: True when each exited 0 (or
        there is none). Otherwise the swap is postponed as outside its window: the new table kept in sync, the
        hooks asked again after 2, 4, 8 … HOOK_RETRY_MAX_S s (not counted as an attempt), and False."""
        shared = self.shared
        if not shared.spec.hook_dir:
            return True
        refused = shared.before_cutover(ctx.migration.id)
        if refused is None:
            if self.hook_refusals:
                shared.say("cutover: the before-cutover hook lets the swap go ahead")
            self.hook_refusals = 0
            self.supervisor.hold_while_paused(ctx)   # a pause or a closing window while the hook ran
            return self.window_open(ctx)
        self.hook_refusals += 1
        retry_in = min(2 ** self.hook_refusals, HOOK_RETRY_MAX_S)
        shared.say(f"cutover: postponed: {refused.describe()}; the new table is kept in sync, and the hook asked "
                   f"again in {retry_in} s")
        log_event(log, "cutover postponed by the before-cutover hook", logging.WARNING, hook=refused.hook,
                  exit_code=refused.exit_code, timed_out=refused.timed_out, refusals=self.hook_refusals,
                  retry_in_s=retry_in)
        until = shared.clock.monotonic() + retry_in
        self.lag.keep_in_sync_until(ctx, lambda: shared.clock.monotonic() >= until,
                                    "cutover postponed by the before-cutover hook", hook=refused.hook)
        return False

    def _attempt(self, cutover: Cutover) -> CutoverResult:
        """One attempt; a refusal that no retry mends stops the migration (resumable)."""
        try:
            return cutover.attempt(self.shared.spec.cutover_window_s, self.shared.lease.owner)
        except CoordinatorReplaced as exc:
            raise MigrationStopped(f"{exc}; that process continues the migration") from None
        except UnsafeServerSetting as exc:
            raise MigrationStopped(f"cutover refused: {exc}; the original table is untouched and the new one "
                                   f"kept: continue with `stream-osc resume --table {self.shared.spec.qualified_name}` "
                                   "once it is changed") from None

    def _swapped_message(self, result: CutoverResult) -> str:
        """What the swap did, and on a move to another server the moment the application must switch."""
        spec = self.shared.spec
        blocked = (f"application writes were blocked for {result.blocked_ms:.0f} ms ({result.drained_keys} keys "
                   "drained under lock)")
        if not spec.target_server:
            return f"cutover: swapped {spec.qualified_name}; {blocked}"
        at = datetime.fromtimestamp(result.locked_at, timezone.utc).isoformat(timespec="milliseconds")
        target = self.shared.endpoints.target(spec.target_dsn).where()
        return (f"cutover: {spec.qualified_name} moved; from {at} the target {target} "
                f"{spec.target_database}.{spec.new_table} holds every acknowledged write and the source "
                f"table is renamed to {spec.database}.{spec.old_table}, so writes to the old address "
                f"fail; switch the application to the target now; {blocked}")

    # windows and requests --------------------------------------------------------------------------
    def cutover_asked(self, ctx: RunContext) -> bool:
        """True once the swap was asked for: this process is `stream-osc cutover`, or that command asked this
        running coordinator (migration/cutover_request.py; the request is taken up, so it is answered once)."""
        shared = self.shared
        if not shared.cutover_now and shared.store.cutover_requested(ctx.migration.id):
            shared.store.clear_cutover_request(ctx.migration.id)
            shared.cutover_now = True
            shared.say("cutover: asked for by `stream-osc cutover`")
            log_event(log, "cutover request taken up")
        return shared.cutover_now

    def window_open(self, ctx: RunContext) -> bool:
        """True when --cutover-window-schedule allows the swap now (or `stream-osc cutover` asked for it)."""
        schedule = self.shared.spec.schedule()
        return self.cutover_asked(ctx) or schedule is None or schedule.is_open(self.shared.clock.now())

    def wait_for_window(self, ctx: RunContext) -> None:
        """Outside the cutover windows: wait, the appliers keeping the new table in sync, until one opens."""
        if self.window_open(ctx):
            return
        schedule = self.shared.spec.schedule()
        opening = schedule.next_opening(self.shared.clock.now())
        self.shared.say(f"cutover: waiting for the cutover window {schedule.describe()}, next at "
                        f"{opening:%Y-%m-%d %H:%M %Z}; the new table is kept in sync meanwhile (`stream-osc "
                        f"cutover --table {self.shared.spec.qualified_name}` swaps now)")
        self.lag.keep_in_sync_until(ctx, lambda: self.window_open(ctx), "waiting for cutover window",
                                    schedule=schedule.describe(), opens_at=opening.isoformat())
        if not self.shared.cutover_now:
            self.shared.say(f"cutover: window {schedule.describe()} open")

    def wait_for_cutover_request(self, ctx: RunContext) -> None:
        """--cutover manual: stay in sync, this process's appliers applying, until `stream-osc cutover` asks
        (it reaches this process through the migration's row); the status says `waiting` meanwhile."""
        if self.cutover_asked(ctx):
            return
        self.supervisor.hold_while_paused(ctx)
        self.shared.store.set_status(ctx.migration.id, Status.WAITING, only_from=(Status.RUNNING,))
        self.shared.say(f"in sync and waiting for cutover: the appliers keep the new table in sync; run "
                        f"`stream-osc cutover --table {self.shared.spec.qualified_name}` to swap the tables")
        self.lag.keep_in_sync_until(ctx, lambda: self.cutover_asked(ctx), "waiting for cutover", waiting_status=True)
        self.shared.store.set_status(ctx.migration.id, Status.RUNNING, only_from=(Status.WAITING,))

    def wait_for_blockers(self, ctx: RunContext, stage: str) -> None:
        """Wait, with the appliers applying and no lock requested, while sessions hold the table
        (cutover/blocker_wait.py); health, abort, pause and applier failures are checked meanwhile."""
        BlockerWait(ctx, self.shared.info.is_mariadb, self.blocker_clock).wait(
            lambda: self.supervisor.check_while_waiting(ctx), lambda text: self.shared.say(f"{stage}: {text}"))
