"""A worker retrying a step behind a lock stops when asked, at its next retry, and ends stopped, not failed."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pymysql
import pytest

from applier.recopy import with_retry
from core.context import StopRequested
from migration.workers import WorkerGroup


def lock_wait_timeout() -> None:
    raise pymysql.err.OperationalError(1205, "Lock wait timeout exceeded; try restarting transaction")


def test_a_retry_gives_up_at_once_when_its_worker_is_asked_to_stop():
    stop = threading.Event()
    stop.set()
    attempts: list[float] = []

    def action() -> None:
        attempts.append(time.monotonic())
        lock_wait_timeout()
    with pytest.raises(StopRequested):
        with_retry(action, stop=stop)
    assert len(attempts) == 1


def test_a_retry_stops_within_its_backoff_when_asked_meanwhile():
    stop = threading.Event()
    attempts: list[int] = []

    asking = threading.Timer(0.05, stop.set)

    def action() -> None:
        attempts.append(1)
        if len(attempts) == 5:   # asked while the fifth attempt's backoff (0.8 s) is waited out
            asking.start()
        lock_wait_timeout()
    with pytest.raises(StopRequested):
        with_retry(action, stop=stop)
    asking.join()
    assert len(attempts) == 5


def test_without_a_stop_the_retries_run_out_and_the_error_is_raised():
    attempts: list[int] = []

    def action() -> None:
        attempts.append(1)
        lock_wait_timeout()
    with pytest.raises(pymysql.err.OperationalError):
        with_retry(action, attempts=3)
    assert len(attempts) == 3


def test_an_error_that_is_not_a_lock_wait_is_raised_at_once_even_when_stopping():
    stop = threading.Event()
    stop.set()

    def action() -> None:
        raise pymysql.err.OperationalError(1146, "Table doesn't exist")
    with pytest.raises(pymysql.err.OperationalError):
        with_retry(action, stop=stop)


@dataclass
class StopOnly:
    """The one part of a RunContext a retrying worker reads."""

    stop: threading.Event


def test_a_worker_stopped_mid_retry_ends_stopped_not_failed():
    retrying = threading.Event()

    def worker(ctx: StopOnly, worker_no: int) -> None:
        def action() -> None:
            retrying.set()
            lock_wait_timeout()
        with_retry(action, stop=ctx.stop)
    group = WorkerGroup(StopOnly(threading.Event()), worker, 1, "retrying").start()
    assert retrying.wait(5)
    group.stop()
    assert group.errors == [] and not group.alive()
