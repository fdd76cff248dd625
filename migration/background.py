"""The workers that run beside a stage in the coordinator's process: the appliers (from the copy to the swap)
and validation ahead (during copy and apply). The stage's loop asks them for their failures."""
from __future__ import annotations

import logging
from functools import partial

from applier.apply import apply_worker, new_member_name
from core.context import RunContext
from core.logs import log_event
from cutover.validate_ahead import validate_ahead
from migration.coordination import Coordination
from migration.transient import is_transient
from migration.workers import WorkerGroup

log = logging.getLogger("stream_osc.runner")   # the coordinator's events keep one logger: log readers match it

CHECKER_RETRY_S = 10.0   # validation ahead, stopped by a passing failure, starts again this much later


class BackgroundWorkers:
    """This process's appliers and its validation ahead, each started and stopped by the stages."""

    def __init__(self, shared: Coordination) -> None:
        self.shared = shared
        self.appliers: WorkerGroup | None = None
        self.checker: WorkerGroup | None = None   # validation ahead
        self.checker_retry_at: float | None = None
        self.applier_member = new_member_name()   # names this process's appliers in the group

    def start_appliers(self, ctx: RunContext) -> None:
        self.appliers = WorkerGroup(ctx, partial(apply_worker, member=self.applier_member),
                                    self.shared.spec.apply_workers, "apply").start()

    def stop_appliers(self, raise_error: bool = True) -> None:
        """Stop this process's appliers; the first error one of them met is raised, or with `raise_error` False
        (the run already stops for its own error) logged."""
        if self.appliers is not None:
            self.appliers.stop()
            errors, self.appliers = self.appliers.errors, None
            if errors and raise_error:
                raise errors[0]
            if errors:
                log_event(log, "applier stopped with an error", logging.WARNING, error=str(errors[0]))

    def discard_appliers(self) -> None:
        """Stop the appliers, their errors moot (the migration is being removed)."""
        if self.appliers is not None:
            self.appliers.stop()
            self.appliers = None

    def validates_ahead(self, ctx: RunContext) -> bool:
        """Whether copied chunks are checked during the copy and those checks used: asked for, and the new table
        on this server (on another, the copy re-reads rows without locking them, so a row it writes is not
        proved to be the source's: docs/cutover.md, "Validation ahead")."""
        return self.shared.spec.validate_ahead and not ctx.pair.remote

    def start_checker(self, ctx: RunContext) -> None:
        if self.validates_ahead(ctx):
            self.checker = WorkerGroup(ctx, validate_ahead, 1, "validate-ahead").start()

    def stop_checker(self, raise_error: bool = True) -> None:
        """Stop validation ahead (its checks so far are kept); a failure that is not passing is raised unless the
        run ends anyway."""
        if self.checker is not None:
            self.checker.stop()
            errors, self.checker = self.checker.errors, None
            if errors and raise_error and not is_transient(errors[0]):
                raise errors[0]

    def end_validation_ahead(self) -> None:
        """Stop validation ahead for good: validation is next, and it is not started again."""
        self.stop_checker()
        self.checker_retry_at = None

    def stop_quietly(self) -> None:
        """Stop both as the run stops for its own error, which theirs (often the same one) must not hide."""
        self.stop_checker(raise_error=False)
        self.stop_appliers(raise_error=False)

    def raise_if_appliers_failed(self) -> None:
        if self.appliers is not None:
            self.appliers.raise_if_failed()

    def raise_if_failed(self, ctx: RunContext) -> None:
        """Raise the first failure of the appliers or of validation ahead. Validation ahead only saves work later:
        a passing failure of it (a service restarting) is logged and it starts again CHECKER_RETRY_S later,
        without stopping the run."""
        self.raise_if_appliers_failed()
        now = self.shared.clock.monotonic
        if self.checker is not None and self.checker.errors:
            error = self.checker.errors[0]
            if not is_transient(error):
                raise error
            log_event(log, "validation ahead failed; starting it again", logging.WARNING, error=str(error),
                      retry_in_s=CHECKER_RETRY_S)
            self.stop_checker(raise_error=False)
            self.checker_retry_at = now() + CHECKER_RETRY_S
        if self.checker is None and self.checker_retry_at is not None and now() >= self.checker_retry_at:
            self.checker_retry_at = None
            self.start_checker(ctx)
