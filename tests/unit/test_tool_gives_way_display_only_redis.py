"""What waits is shown through Redis for `status` and the metrics only: a display (the project's rule, e.g.
migration/supervision.py show_throttle, core/context.py _note_throttle: "best effort: display only"). A Redis
failure in LockWaits must not fail a held key's re-read, nor hide the database's error that with_retry retries."""
from __future__ import annotations

import pymysql
import pytest
import redis

from applier.giving_way import LockWaits, giving_way

REFUSED = pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting transaction")


class DownPipe:
    def hset(self, *a): pass
    def expire(self, *a): pass
    def execute(self): raise redis.ConnectionError("Redis is down")


class Down:
    def pipeline(self): return DownPipe()
    def hdel(self, *a): raise redis.ConnectionError("Redis is down")


def test_a_redis_outage_does_not_fail_a_held_keys_re_read():
    waits = LockWaits(Down(), 1)

    def read(part, nowait):
        if nowait:
            raise REFUSED
        return len(part)

    assert giving_way(read, [(1,)], sleep=lambda s: None, waits=waits) == [1]


def test_a_redis_outage_does_not_hide_the_waiting_reads_lock_wait_timeout():
    waits = LockWaits(Down(), 1)
    waits.began = lambda shown: None   # Redis answered when the wait began, and failed by its end

    def read(part, nowait):
        raise REFUSED   # NOWAIT refused, then the waiting read timed out: with_retry retries 1205

    with pytest.raises(pymysql.err.OperationalError):
        giving_way(read, [(1,)], sleep=lambda s: None, waits=waits)
