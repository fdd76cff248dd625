"""Waits during which the appliers keep applying: until the group's lag falls to a limit (a stage moves on),
or until something is ready (a cutover window, a `stream-osc cutover` request), the lag shown meanwhile."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
import logging

from applier.apply import ApplyStats
from applier.giving_way import LockWaits
from core.context import RunContext
from core.logs import log_event
from core.stages import Status
from cutover.blocker_wait import POLL_S as BLOCKER_POLL_S, BlockerClock
from cutover.blockers import find_blockers
from migration.background import BackgroundWorkers
from migration.coordination import Coordination
from migration.supervision import Supervisor
from streams.closing import close_within
from streams.topics import TopicNames, consumer_lag, group_reader

log = logging.getLogger("stream_osc.runner")   # the coordinator's events keep one logger: log readers match it

WAITING_NOTE_S = 30.0              # a coordinator waiting for its cutover logs so (with the lag) this often
LAG_SHOW_S = 5.0                   # and reads the lag for the progress display and metrics this often
LAG_POLL_S = 0.1                   # the applier group's lag is read this often while a stage waits for it to fall
#                                    (one reader for the whole wait: two requests a read); the stage moves on this
#                                    much after the lag allows; sessions holding the table are looked for as often
#                                    as the cutover's own wait for them does (BLOCKER_POLL_S)


class LagWaits:
    """The coordinator's waits on the applier group's lag."""

    def __init__(self, shared: Coordination, supervisor: Supervisor, workers: BackgroundWorkers,
                 blocker_clock: BlockerClock) -> None:
        self.shared = shared
        self.supervisor = supervisor
        self.workers = workers
        self.blocker_clock = blocker_clock   # --force-kill-blockers-after counts across waits and attempts

    @contextmanager
    def lag_reader(self, ctx: RunContext) -> Iterator[Callable[[], int]]:
        """Reads of the applier group's lag for one wait, through one reader (not a consumer per read)."""
        spec = self.shared.spec
        topic = TopicNames(ctx.migration.prefix, spec.database, spec.table).changes
        reader = group_reader(self.shared.endpoints.kafka, ctx.migration.group_id)
        try:
            yield lambda: consumer_lag(reader, topic, self.shared.spec.partitions)
        finally:
            close_within(reader, "lag")

    def wait_for_lag(self, ctx: RunContext, limit: int, look_for_blockers: bool = False) -> int:
        """Apply until the group's lag is at most `limit` events. With `look_for_blockers` (right before a lock
        is wanted), sessions holding the table are looked for meanwhile, so that the --force-kill-blockers-after
        clock starts when one appears, not when the lag allows the next look."""
        shared, clock = self.shared, self.shared.clock
        stats = ApplyStats(ctx.redis(), ctx.migration.id)
        first: tuple[float, int] | None = None
        looked_for_blockers = float("-inf")
        with self.lag_reader(ctx) as read_lag:
            while True:   # a pause does not hold this wait (the appliers hold themselves): the stage may move on
                self.workers.raise_if_failed(ctx)
                self.supervisor.check_health(ctx)
                self.supervisor.show_throttle(ctx)
                lag = read_lag()
                applied = stats.read().get("events", 0)
                now = clock.monotonic()
                first = first or (now, applied)
                rate = (applied - first[1]) / (now - first[0]) if now > first[0] else 0
                lag_s = lag / rate if rate > 0 else None
                shared.progress.apply(lag, applied, lag_s)
                shared.metrics.apply(lag, applied, lag_s)
                shared.metrics.apply_waits(LockWaits.read(ctx.shared_redis(), ctx.migration.id))
                if look_for_blockers and now - looked_for_blockers >= BLOCKER_POLL_S:
                    looked_for_blockers = now
                    self.blocker_clock.saw(find_blockers(shared.conn, shared.spec.database, shared.spec.table,
                                                         shared.info.is_mariadb), clock.monotonic())
                if lag <= limit:
                    return lag
                clock.sleep(LAG_POLL_S)

    def keep_in_sync_until(self, ctx: RunContext, ready: Callable[[], bool], event: str,
                           waiting_status: bool = False, **fields: object) -> None:
        """Apply until `ready()`, checked about once a second; the lag is shown meanwhile and logged (`event`)
        every WAITING_NOTE_S. With `waiting_status`, the status is put back to `waiting` after a pause."""
        shared, clock = self.shared, self.shared.clock
        stats = ApplyStats(ctx.redis(), ctx.migration.id)
        noted = lag_read = 0.0
        with self.lag_reader(ctx) as read_lag:
            while not ready():
                self.supervisor.check_while_waiting(ctx)
                if waiting_status:   # back to waiting after a pause (never over a pause or abort written meanwhile)
                    shared.store.set_status(ctx.migration.id, Status.WAITING, only_from=(Status.RUNNING,))
                now = clock.monotonic()
                if now - lag_read >= LAG_SHOW_S:
                    lag, lag_read = read_lag(), now
                    applied = stats.read().get("events", 0)
                    shared.progress.apply(lag, applied, None)
                    shared.metrics.apply(lag, applied, None)
                    shared.metrics.apply_waits(LockWaits.read(ctx.shared_redis(), ctx.migration.id))
                    if now - noted >= WAITING_NOTE_S:
                        log_event(log, event, table=shared.spec.qualified_name, apply_lag_events=lag, **fields)
                        noted = now
                clock.sleep(1.0)
