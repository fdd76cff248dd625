"""A readers-writer lock between the test workers of one session, on files (fcntl.flock).

A shared holder runs beside other shared holders; an exclusive one alone. A turnstile taken on the way in gives
the exclusive side preference: once it waits, no new shared holder slips in before it, so a test marked
exclusive is never starved by a worker that keeps starting shared ones.
"""
from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def _flocked(path: Path, operation: int) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, operation)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def one_at_a_time(path: Path, exclusive: bool) -> Iterator[None]:
    """Hold `path` shared, or exclusively when `exclusive`, for the duration of the block."""
    turnstile = path.with_name(path.name + ".turnstile")
    with open(path, "a") as handle:
        with _flocked(turnstile, fcntl.LOCK_EX):
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
