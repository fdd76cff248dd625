"""The test workers' readers-writer lock (tests/locks.py): shared holders run side by side, an exclusive one runs
alone, and a waiting exclusive holder is not overtaken by shared ones arriving after it."""
from __future__ import annotations

import threading

from tests.locks import one_at_a_time


def hold(path, exclusive: bool, entered: threading.Event, release: threading.Event) -> threading.Thread:
    def run() -> None:
        with one_at_a_time(path, exclusive):
            entered.set()
            release.wait(10)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_shared_holders_run_side_by_side(tmp_path):
    path = tmp_path / "lock"
    first, second, release = threading.Event(), threading.Event(), threading.Event()
    threads = [hold(path, False, first, release), hold(path, False, second, release)]
    assert first.wait(5) and second.wait(5)
    release.set()
    for thread in threads:
        thread.join(5)


def test_an_exclusive_holder_waits_for_shared_ones_and_then_runs_alone(tmp_path):
    path = tmp_path / "lock"
    shared, exclusive, late_shared = threading.Event(), threading.Event(), threading.Event()
    release_shared, release_exclusive, release_late = threading.Event(), threading.Event(), threading.Event()
    threads = [hold(path, False, shared, release_shared)]
    assert shared.wait(5)
    threads.append(hold(path, True, exclusive, release_exclusive))
    assert not exclusive.wait(0.3), "an exclusive holder ran beside a shared one"
    threads.append(hold(path, False, late_shared, release_late))   # arrives after the exclusive one waits
    assert not late_shared.wait(0.3), "a shared holder overtook a waiting exclusive one"
    release_shared.set()
    assert exclusive.wait(5)
    assert not late_shared.wait(0.3), "a shared holder ran beside an exclusive one"
    release_exclusive.set()
    assert late_shared.wait(5)
    release_late.set()
    for thread in threads:
        thread.join(5)
