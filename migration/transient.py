"""Which failures are passing (a service restarting, a connection cut) and worth resuming from durable state."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pymysql
import redis
from confluent_kafka import KafkaException

from connectors.rest import ConnectUnreachable
from core.db import DatabaseUnreachable
from streams.topics import KafkaUnreachable

T = TypeVar("T")
MAX_TRANSIENT_FAILURES = 8   # per outage; with backoff 2, 4, 8, 16, then 30 s: about 2.5 minutes of it
# An attempt that ran this long before failing had its services back: its failure starts a new outage.
# Longer than the largest backoff, so that the retries of one outage can never look like recoveries.
RECOVERED_AFTER_S = 60.0

# can't connect, server gone away, lost connection, connection killed, server shutdown, lock wait, deadlock
MYSQL_TRANSIENT_CODES = {2003, 2006, 2013, 1927, 1053, 1205, 1213}


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry after a pause can cure; every stage resumes from durable state."""
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, KafkaException,
                        ConnectUnreachable, DatabaseUnreachable, KafkaUnreachable, pymysql.err.InterfaceError)):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in MYSQL_TRANSIENT_CODES


def retrying_transient(action: Callable[[], T], before_retry: Callable[[], None],
                       on_failure: Callable[[Exception, int, float], None],
                       clock: Callable[[], float] = time.monotonic) -> T:
    """Run `action`; after a passing failure call `on_failure(exc, attempt, delay)`, wait with backoff,
    `before_retry()` (e.g. reconnect) and run it again.

    The budget is per outage, not per run: at most MAX_TRANSIENT_FAILURES failures in a row, where an
    attempt that ran RECOVERED_AFTER_S before failing (the services were back: the resumed run got
    going) ends the outage and the count starts again. So short blips spread over a long migration
    never stop it, while a service that stays down does, after about 2.5 minutes.
    """
    failures = 0
    while True:
        started = clock()
        try:
            if failures:
                before_retry()
            return action()
        except Exception as exc:  # noqa: BLE001 - sorted by is_transient
            if not is_transient(exc):
                raise
            if clock() - started >= RECOVERED_AFTER_S:
                failures = 0
            if failures >= MAX_TRANSIENT_FAILURES:
                raise
            failures += 1
            delay = min(2 ** failures, 30)
            on_failure(exc, failures, delay)
            time.sleep(delay)
