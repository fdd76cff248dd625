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
