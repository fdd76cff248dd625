"""Stage `copy`: the copy workers over every chunk not done (here and in joined `worker` processes), restarted
when `stream-osc set` changes their settings, with progress, throttle and health looked at while they run."""
from __future__ import annotations

import logging

from applier.chunks import ChunkQueue
from applier.copy import copy_worker
from core.context import RunContext
from core.logs import log_event
from core.stages import Stage
from migration.background import BackgroundWorkers
from migration.coordination import Coordination
from migration.index_stage import deferred
from migration.supervision import Supervisor
from migration.workers import WorkerGroup
from monitor.progress import copy_fraction

log = logging.getLogger("stream_osc.copy")

COPY_TICK_S = 0.5   # the copy's loop looks at its workers, the throttle and the health this often


class CopyStage:
    """Copies the chunks left, then enters `indexes` (deferred indexes) or `apply`."""

    def __init__(self, shared: Coordination, supervisor: Supervisor, workers: BackgroundWorkers) -> None:
        self.shared = shared
        self.supervisor = supervisor
        self.workers = workers

    def run(self, ctx: RunContext) -> None:
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
                    self._show(ctx)
                    self.supervisor.show_throttle(ctx)
                    self._tell_if_held_at_slowest()
                    self.supervisor.check_health(ctx)
            finally:
                group.stop()
                shared.yielding.forget_stretch()
            group.raise_if_failed()
        self.supervisor.show_throttle(ctx)   # a release followed by the last chunks within one tick is said too
        self._show(ctx, force=True)
        shared.enter_stage(ctx.migration.id, Stage.INDEXES if deferred(ctx.migration) else Stage.APPLY)
        shared.notify("copy-done", ctx.migration.id)

    def _show(self, ctx: RunContext, force: bool = False) -> None:
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
