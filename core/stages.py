"""The migration's stages and statuses, and the algorithm's order between stages (StateStore.enter_stage keeps it)."""
from __future__ import annotations

from enum import StrEnum


class Stage(StrEnum):
    """Where a migration is; entered only through StateStore.enter_stage (durable, then logged)."""

    INIT = "init"
    COPY = "copy"
    INDEXES = "indexes"     # --defer-indexes: the deferred indexes are added after the copy, before apply
    APPLY = "apply"
    VALIDATE = "validate"
    CUTOVER = "cutover"
    CLEANUP = "cleanup"
    DONE = "done"


class Status(StrEnum):
    """Whether work on a migration proceeds."""

    RUNNING = "running"
    PAUSED = "paused"       # an operator's pause: no writes until resume
    WAITING = "waiting"     # in sync, waiting for `stream-osc cutover` (--cutover manual)
    DONE = "done"
    ABORTED = "aborted"


# The algorithm's order: the stages a migration may enter from each (StateStore.enter_stage refuses any other move).
TRANSITIONS: dict[Stage, frozenset[Stage]] = {
    Stage.INIT: frozenset({Stage.COPY, Stage.DONE}),          # DONE: the server made the change instantly
    Stage.COPY: frozenset({Stage.INDEXES, Stage.APPLY}),       # INDEXES with --defer-indexes
    Stage.INDEXES: frozenset({Stage.APPLY}),
    Stage.APPLY: frozenset({Stage.VALIDATE}),
    Stage.VALIDATE: frozenset({Stage.CUTOVER}),
    # back to VALIDATE: a failed-over target accepted (`accept-target`) is compared whole again; DONE: an abort
    # finishing a swap the metadata missed (the coordinator died between the RENAME and recording it)
    Stage.CUTOVER: frozenset({Stage.CLEANUP, Stage.VALIDATE, Stage.DONE}),
    Stage.CLEANUP: frozenset({Stage.DONE}),
    Stage.DONE: frozenset(),
}


class IllegalTransition(Exception):
    """A move between stages the algorithm does not make: a bug, or two processes disagreeing on the stage."""


def require_transition(current: Stage | str, stage: Stage) -> None:
    """Raise IllegalTransition unless TRANSITIONS allows entering `stage` from `current`."""
    if stage not in TRANSITIONS.get(Stage(current), frozenset()):
        allowed = ", ".join(sorted(TRANSITIONS.get(Stage(current), ()))) or "none"
        raise IllegalTransition(f"a migration in stage {current} cannot enter stage {stage} (allowed: {allowed})")


FINISHED = (Status.DONE, Status.ABORTED)
# a new table exists, no swap yet
WORKING_STAGES = (Stage.COPY, Stage.INDEXES, Stage.APPLY, Stage.VALIDATE, Stage.CUTOVER)
SWAPPED_STAGES = (Stage.CLEANUP, Stage.DONE)
