"""A worker asked to stop gives up at its next retry (recopy.with_retry): its stop is held at most for one attempt,
which was one locking read's wait (APPLIER_LOCK_WAIT_S). giving_way() sleeps between refusals without looking at
the stop, and its back-off grows per call, not per part: after seven refusals every further one costs
BACKOFF_MAX_S. A batch of apply_batch_size keys in which the application holds a few dozen scattered rows then
sleeps tens of seconds per attempt (and a with_retry attempt ends only when the first held key's waiting read
times out), far above one lock wait: the stop, the apply lag and the consumer's max.poll.interval all pay."""
from __future__ import annotations

import random

import pymysql

from applier.apply import APPLIER_LOCK_WAIT_S
from applier.giving_way import giving_way
from core.spec import MigrationSpec

REFUSED = pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting transaction")


def test_one_attempt_does_not_sleep_longer_than_one_lock_wait():
    batch = MigrationSpec.__dataclass_fields__["apply_batch_size"].default
    held = set(random.Random(7).sample(range(batch), 50))   # an application transaction holding 50 rows

    def read(part, nowait):
        if nowait and held & {k for (k,) in part}:
            raise REFUSED
        return len(part)

    slept: list[float] = []
    giving_way(read, [(k,) for k in range(batch)], sleep=slept.append)
    assert sum(slept) <= APPLIER_LOCK_WAIT_S, (
        f"{len(slept)} refusals slept {sum(slept):.1f} s in one attempt, before any held key's waiting read "
        f"(one lock wait is {APPLIER_LOCK_WAIT_S} s)")
