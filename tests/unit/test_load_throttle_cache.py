"""The load throttle's cache: the workers read the server's counters at most once a second, a lock reads them now."""
from __future__ import annotations

from throttle import load as load_module
from throttle.load import LoadThrottle


def test_a_fresh_read_right_before_a_lock_does_not_answer_from_the_cache(monkeypatch):
    reads = iter([{"threads_running": 3}, {"threads_running": 40}])
    monkeypatch.setattr(load_module, "read_status", lambda conn, names: next(reads))
    throttle = LoadThrottle({"Threads_running": 25}, {})
    assert throttle.reason(None) is None
    assert throttle.reason(None) is None   # within the second: the answer read before, no second read
    assert throttle.reason(None, fresh=True) == "Threads_running=40 >= 25 (--max-load)"
