"""What a cutover attempt ends in: swapped, or rolled back with the reason (the original table in place)."""
from __future__ import annotations

from dataclasses import dataclass

from cutover.blockers import Blocker


class CutoverAborted(Exception):
    """This attempt ran out of its window or could not take the lock; the original table is in place.

    `blockers` names the sessions that held the table when that was the reason, `throttled` says a throttle
    (--max-load, …) held the work back; in both cases no lock was requested.
    """

    def __init__(self, message: str, blockers: tuple[Blocker, ...] = (), throttled: bool = False) -> None:
        super().__init__(message)
        self.blockers = blockers
        self.throttled = throttled


class CoordinatorReplaced(Exception):
    """Another process took the migration over: this one must not rename (docs/cutover.md, "One coordinator")."""

    user_facing = True


@dataclass(frozen=True)
class CutoverResult:
    """What one attempt did."""

    swapped: bool
    blocked_ms: float
    drained_keys: int
    reason: str = ""
    locked_at: float = 0.0       # wall clock when writes started to wait
    blockers: tuple[Blocker, ...] = ()   # sessions that held the table, when they stopped the attempt
    throttled: bool = False              # a throttle held the work back right before the lock: none was requested
