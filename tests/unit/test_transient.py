"""Which failures the coordinator and workers wait out and resume from, and which stop the migration."""
import pymysql
import pytest
import redis
from confluent_kafka import KafkaError, KafkaException

from connectors.rest import ConnectError, ConnectUnreachable
from migration.checks import PreflightError
import migration.transient as transient
from migration.transient import is_transient


def test_passing_failures_are_transient():
    assert is_transient(pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"))
    assert is_transient(pymysql.err.OperationalError(1927, "Connection was killed"))
    assert is_transient(pymysql.err.InterfaceError(0, ""))
    assert is_transient(redis.exceptions.ConnectionError("Connection refused"))
    assert is_transient(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert is_transient(ConnectUnreachable("Kafka Connect at http://127.0.0.1:1 is unreachable"))


def test_real_problems_are_not():
    assert not is_transient(pymysql.err.OperationalError(1142, "ALTER command denied"))
    assert not is_transient(pymysql.err.ProgrammingError(1146, "Table doesn't exist"))
    assert not is_transient(ConnectError("Kafka Connect answered 400"))
    assert not is_transient(PreflightError("table has no primary key"))
    assert not is_transient(ValueError("bug"))


def test_retrying_resumes_after_passing_failures_and_gives_up_on_others(monkeypatch):
    waits: list[float] = []
    monkeypatch.setattr(transient.time, "sleep", waits.append)
    outcomes = [pymysql.err.OperationalError(2013, "Lost connection"), redis.exceptions.ConnectionError("refused"), 7]
    reconnects, reported = [], []

    def action() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    result = transient.retrying_transient(action, lambda: reconnects.append(1),
                                          lambda exc, attempt, delay: reported.append((attempt, delay)))
    assert result == 7 and reported == [(1, 2), (2, 4)] and waits == [2, 4] and len(reconnects) == 2

    def denied() -> None:
        raise pymysql.err.OperationalError(1142, "ALTER command denied")
    with pytest.raises(pymysql.err.OperationalError):
        transient.retrying_transient(denied, lambda: None, lambda *a: reported.append(a))
    assert len(reported) == 2, "a failure that is not passing is not retried"


def test_retrying_gives_up_after_the_last_attempt(monkeypatch):
    monkeypatch.setattr(transient.time, "sleep", lambda s: None)

    def down() -> None:
        raise redis.exceptions.ConnectionError("refused")
    attempts: list[int] = []
    with pytest.raises(redis.exceptions.ConnectionError):
        transient.retrying_transient(down, lambda: None, lambda exc, attempt, delay: attempts.append(attempt))
    assert attempts == list(range(1, transient.MAX_TRANSIENT_FAILURES + 1))


class FakeClock:
    """Monotonic time that moves only when an attempt runs or the retry sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_blips_spread_over_a_long_run_never_use_up_the_budget(monkeypatch):
    """Twelve short outages, one every ten minutes of healthy running: the run finishes."""
    clock = FakeClock()
    monkeypatch.setattr(transient.time, "sleep", clock.sleep)
    blips = transient.MAX_TRANSIENT_FAILURES + 4
    attempts = []

    def long_run() -> str:
        attempts.append(clock.now)
        clock.now += 600                 # ten minutes of copying and applying, then a connection drop
        if len(attempts) <= blips:
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
        return "done"
    reported: list[int] = []
    assert transient.retrying_transient(long_run, lambda: None, lambda exc, n, delay: reported.append(n),
                                        clock=clock) == "done"
    assert len(attempts) == blips + 1 and reported == [1] * blips, "each blip is the first failure of its outage"


def test_one_long_outage_stops_the_run(monkeypatch):
    """A healthy stretch, then a database that stays down: stopped after the budget, with every retry counted."""
    clock = FakeClock()
    monkeypatch.setattr(transient.time, "sleep", clock.sleep)
    attempts = []

    def run() -> None:
        attempts.append(clock.now)
        if len(attempts) == 1:
            clock.now += 600             # ran fine for a while before the outage began
        raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
    reported: list[int] = []
    with pytest.raises(pymysql.err.OperationalError):
        transient.retrying_transient(run, lambda: None, lambda exc, n, delay: reported.append(n), clock=clock)
    assert reported == list(range(1, transient.MAX_TRANSIENT_FAILURES + 1))
    assert clock.now - 600 < 4 * 60, "the outage is given up within minutes"


def test_retries_of_one_outage_never_pass_for_a_recovery():
    """The longest backoff is shorter than the healthy stretch that ends an outage."""
    assert min(2 ** transient.MAX_TRANSIENT_FAILURES, 30) < transient.RECOVERED_AFTER_S
