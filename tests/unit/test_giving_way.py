"""The tool gives way: a locking read's parts, split on refusal, a held key waited for alone and last."""
from __future__ import annotations

import pymysql
import pytest

from applier.giving_way import BACKOFF_MAX_S, backoff_s, giving_way, parts

REFUSED = pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting transaction")


class Server:
    """Answers a part's locking read: NOWAIT is refused when the part holds a locked key."""

    def __init__(self, locked: set[int]) -> None:
        self.locked = locked
        self.calls: list[tuple[list[int], bool]] = []

    def read(self, part: list[tuple[int]], nowait: bool) -> int:
        keys = [k for (k,) in part]
        self.calls.append((keys, nowait))
        if nowait and self.locked & set(keys):
            raise REFUSED
        return len(keys)


def keys(n: int) -> list[tuple[int]]:
    return [(k,) for k in range(1, n + 1)]


def test_no_locking_read_holds_more_than_the_limit():
    server = Server(set())
    assert giving_way(server.read, keys(1050), sleep=lambda s: None, limit=500) == [500, 500, 50]
    assert [len(part) for part, _ in server.calls] == [500, 500, 50]


def test_a_refused_part_is_split_until_only_the_held_key_waits_and_it_waits_last():
    server = Server({5})
    results = giving_way(server.read, keys(8), sleep=lambda s: None, limit=8)
    assert sum(results) == 8, "every key was read once in the end"
    waiting = [part for part, nowait in server.calls if not nowait]
    assert waiting == [[5]], "only the held key is read waiting"
    assert server.calls[-1] == ([5], False), "the held key waits after every other key is written"
    written = [k for part, nowait in server.calls[:-1] if part and 5 not in part for k in part]
    assert sorted(written) == [1, 2, 3, 4, 6, 7, 8]


def test_every_waiting_read_is_of_one_key():
    server = Server({2, 3, 7})
    giving_way(server.read, keys(8), sleep=lambda s: None)
    assert all(len(part) == 1 for part, nowait in server.calls if not nowait)
    assert sorted(k for part, nowait in server.calls if not nowait for k in part) == [2, 3, 7]


def test_other_errors_are_not_taken_for_a_refusal():
    def fails(part, nowait):
        raise pymysql.err.OperationalError(2013, "Lost connection")

    with pytest.raises(pymysql.err.OperationalError):
        giving_way(fails, keys(3), sleep=lambda s: None)


def test_refusals_back_off_more_each_time_up_to_a_ceiling():
    pauses: list[float] = []
    giving_way(Server({1, 2, 3, 4}).read, keys(4), sleep=pauses.append)
    assert pauses == sorted(pauses) and pauses[0] < pauses[-1]
    assert backoff_s(100) == BACKOFF_MAX_S


def test_parts_keep_the_keys_order():
    assert parts(keys(5), 2) == [[(1,), (2,)], [(3,), (4,)], [(5,)]]


def test_a_held_key_whose_wait_runs_out_is_waited_for_again_unless_asked_to_stop():
    import threading

    from core.context import StopRequested

    waits: list[list[int]] = []

    def held_once(part, nowait):
        if nowait and (2,) in part:
            raise REFUSED
        if not nowait:
            waits.append([k for (k,) in part])
            if len(waits) == 1:
                raise REFUSED   # the first wait ran out
        return len(part)

    assert sum(giving_way(held_once, keys(3), sleep=lambda s: None)) == 3
    assert waits == [[2], [2]]
    stop = threading.Event()
    stop.set()
    waits.clear()
    with pytest.raises(StopRequested):
        giving_way(held_once, keys(3), sleep=lambda s: None, stop=stop)
