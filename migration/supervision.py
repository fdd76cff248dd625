"""What every wait of the coordinator checks, and the holds it keeps: the migration's health (its lease, an
abort, the source table, the connector, restarted when its task failed), `stream-osc set` values, an
operator's pause, and a lock held back while the throttle says so."""
from __future__ import annotations

import logging

import redis

from connectors.health import binlog_gone, describe_failure
from connectors.rest import ConnectorState
from core.context import RunContext, read_throttle_note
from core.logs import log_event
from core.source_check import check_source_unchanged
from core.spec import with_overrides
from core.state_records import Migration
from core.stages import Status
from migration.background import BackgroundWorkers
from migration.coordination import Coordination, MigrationStopped
from migration.settings import settings_of
from throttle.load import throttle_change

log = logging.getLogger("stream_osc.runner")   # the coordinator's events keep one logger: log readers match it

HEALTH_EVERY_S = 2.0               # the migration's health is checked at most this often
MAX_CONNECTOR_RESTARTS = 3         # failed connector tasks restarted by one coordinator before it stops
CONNECTOR_RESTART_WAIT_S = 10.0    # how long a restart may take to show (the task leaving FAILED)
CONNECTOR_SETTLE_S = 5.0           # and how long it must then keep running to count as recovered
CONNECTOR_MISSING_GRACE_S = 60.0   # how long a connector may be absent from Connect before the run stops
THROTTLE_POLL_S = 0.5              # a lock postponed while throttled looks at the load again this often
PAUSE_POLL_S = 0.5                 # a pause is looked at again this often


class Supervisor:
    """Checks and holds for one coordinator; what it raises stops the run (MigrationStopped, CriticalLoad)."""

    def __init__(self, shared: Coordination, workers: BackgroundWorkers) -> None:
        self.shared = shared
        self.workers = workers
        self.settings: dict[str, object] = {}   # applied `stream-osc set` values
        self.throttle_shown: str | None = None   # the throttle reason last said
        self.last_health_check = float("-inf")
        self.connector_missing_since: float | None = None
        self.connector_restarts = 0

    def check_while_waiting(self, ctx: RunContext) -> None:
        """What every wait checks about once a second: an applier's failure, the health of the migration (abort,
        connector, source table), and the operator's pause (waited out here)."""
        self.workers.raise_if_appliers_failed()
        self.check_health(ctx)
        self.hold_while_paused(ctx)

    def check_health(self, ctx: RunContext) -> None:
        """Stop when the lease was lost, the migration was aborted, the source table was altered or the connector
        failed for good (checked every HEALTH_EVERY_S); take up new settings meanwhile."""
        clock = self.shared.clock
        if clock.monotonic() - self.last_health_check < HEALTH_EVERY_S:
            return
        self.last_health_check = clock.monotonic()
        if self.shared.lease.lost.is_set():
            raise MigrationStopped(f"migration {ctx.migration.id}: another process took over as coordinator")
        current = self.shared.store.get(ctx.migration.id)
        if current.status == Status.ABORTED:
            raise MigrationStopped(f"migration {ctx.migration.id} was aborted", resumable=False)
        self.follow_settings(ctx, current)
        check_source_unchanged(self.shared.conn, ctx.migration)
        self._check_connector(ctx.migration.connector)

    def _check_connector(self, name: str) -> None:
        """Stop when the connector is missing for long or failed for good; restart a failed task (e.g. its binlog
        connection was cut mid-event: a restart resumes from the committed offset) up to MAX_CONNECTOR_RESTARTS."""
        clock = self.shared.clock
        state = self.shared.connect.state(name)
        if state is None:
            # A Connect worker that just restarted lists its connectors only once it has read its config topic.
            self.connector_missing_since = self.connector_missing_since or clock.monotonic()
            if clock.monotonic() - self.connector_missing_since < CONNECTOR_MISSING_GRACE_S:
                return
            raise MigrationStopped(f"connector {name} is missing from Kafka Connect")
        self.connector_missing_since = None
        while state is not None and state.failed:
            if binlog_gone(state) or self.connector_restarts >= MAX_CONNECTOR_RESTARTS:
                raise MigrationStopped(describe_failure(name, state, self.shared.spec.qualified_name),
                                       resumable=not binlog_gone(state))
            self.connector_restarts += 1
            self.shared.say(f"connector {name} failed ({state.error_line()}); restarting it from its committed "
                            f"position ({self.connector_restarts}/{MAX_CONNECTOR_RESTARTS})")
            log_event(log, "connector restarted", logging.WARNING, connector=name, error=state.error_line(),
                      restarts=self.connector_restarts)
            self.shared.connect.restart_failed(name)
            state = self.state_after_restart(name)

    def state_after_restart(self, name: str) -> ConnectorState | None:
        """The state of a restarted connector: once it has left FAILED, RUNNING for CONNECTOR_SETTLE_S
        (a task that fails at start-up reports RUNNING first), or FAILED again."""
        clock, connect = self.shared.clock, self.shared.connect
        restarted_by = clock.monotonic() + CONNECTOR_RESTART_WAIT_S
        state = connect.state(name)
        while state is not None and state.failed and clock.monotonic() < restarted_by:
            clock.sleep(0.2)
            state = connect.state(name)
        settled_by = clock.monotonic() + CONNECTOR_SETTLE_S
        while state is not None and not state.failed and clock.monotonic() < settled_by:
            clock.sleep(0.2)
            state = connect.state(name)
        return state

    def follow_settings(self, ctx: RunContext, migration: Migration) -> None:
        """Take up `stream-osc set` values: the spec changes, and the workers restart with it (they resume
        from durable state, as after any stop)."""
        settings = settings_of(migration)
        if settings == self.settings:
            return
        shared = self.shared
        before, self.settings = shared.spec, settings
        shared.spec = with_overrides(shared.spec, **settings)
        changed = {name: value for name, value in settings.items() if getattr(before, name) != value}
        if not changed:
            return
        shared.configure_yielding()
        ctx.retune(shared.spec)
        log_event(log, "settings changed", **changed)
        shared.say("settings changed: " + ", ".join(f"{name}={value}" for name, value in changed.items()))
        shared.restart_copy = True
        if self.workers.appliers is not None:
            self.workers.stop_appliers()
            self.workers.start_appliers(ctx)

    def hold_while_paused(self, ctx: RunContext) -> None:
        """Wait (writing nothing) while an operator has the migration paused."""
        announced = False
        while True:
            status = self.shared.store.status(ctx.migration.id)
            if status == Status.ABORTED:
                raise MigrationStopped(f"migration {ctx.migration.id} was aborted", resumable=False)
            if status != Status.PAUSED:
                break
            if not announced:
                self.shared.say(f"paused: no writes until `stream-osc resume --table "
                                f"{self.shared.spec.qualified_name}`")
                announced = True
            self.check_health(ctx)
            self.shared.clock.sleep(PAUSE_POLL_S)
        if announced:
            self.shared.say("resumed")

    def postpone(self, ctx: RunContext, why: str, times: int) -> None:
        """After the `times`-th lock in a row given up to a throttle read right before it, wait longer each time
        (up to 30 s): a load hovering at its limit, or one the attempt's own sessions and catch-up raise, must not
        start an attempt (applier stop and start, catch-up, on MariaDB a sentry table) every few seconds. An
        abort, a failed applier or a lost lease ends the wait."""
        clock = self.shared.clock
        backoff = min(2 ** times, 30)
        self.shared.say(f"{why}; next try in {backoff} s at the earliest")
        until = clock.monotonic() + backoff
        while clock.monotonic() < until:
            self.workers.raise_if_failed(ctx)
            self.check_health(ctx)
            clock.sleep(min(THROTTLE_POLL_S, max(until - clock.monotonic(), 0)))

    def hold_while_throttled(self, ctx: RunContext, stage: str) -> bool:
        """Wait, locking nothing, while --max-load (or CloudWatch, a replica's lag, a move's target) holds the
        work back; True if it did. A lock requested then queues the application's writes behind a busy server,
        and the appliers, held back by the same limits, fall behind meanwhile; gh-ost's throttle postpones its
        cut-over likewise. A --critical-load threshold raises CriticalLoad here as anywhere."""
        clock = self.shared.clock
        reason = ctx.throttle_reason(self.shared.conn)
        if reason is None:
            return False
        held = clock.monotonic()
        self.shared.say(f"{stage}: held while throttled ({reason}); no lock is requested until the load drops")
        log_event(log, "lock postponed while throttled", stage=stage, reason=reason)
        while reason is not None:
            self.workers.raise_if_failed(ctx)   # an applier may be the one that met the critical load
            self.check_health(ctx)
            self.show_throttle(ctx)
            clock.sleep(THROTTLE_POLL_S)
            reason = ctx.throttle_reason(self.shared.conn)
        self.shared.say(f"{stage}: throttle released after {clock.monotonic() - held:.0f} s")
        return True

    def show_throttle(self, ctx: RunContext) -> None:
        """Say when the workers start or stop holding back (--max-load, --max-app-latency)."""
        try:
            reason = read_throttle_note(ctx.shared_redis(), ctx.migration.id)
        except redis.RedisError:
            return   # a display only: Redis failures are handled where the work needs Redis
        self.shared.metrics.throttle(reason)
        for line in throttle_change(self.throttle_shown, reason):
            self.shared.say(line)
        self.throttle_shown = reason
