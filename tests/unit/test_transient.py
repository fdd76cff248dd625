"""Which failures the coordinator and workers wait out and resume from, and which stop the migration."""
import pymysql
import redis
from confluent_kafka import KafkaError, KafkaException

from connectors.rest import ConnectError, ConnectUnreachable
from migration.checks import PreflightError
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
