"""Which failures are passing (a service restarting, a connection cut) and worth resuming from durable state."""
from __future__ import annotations

import pymysql
import redis
from confluent_kafka import KafkaException

from connectors.rest import ConnectUnreachable
from migration.db import DatabaseUnreachable
from streams.topics import KafkaUnreachable

# can't connect, server gone away, lost connection, connection killed, server shutdown, lock wait, deadlock
MYSQL_TRANSIENT_CODES = {2003, 2006, 2013, 1927, 1053, 1205, 1213}


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry after a pause can cure; every stage resumes from durable state."""
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, KafkaException,
                        ConnectUnreachable, DatabaseUnreachable, KafkaUnreachable, pymysql.err.InterfaceError)):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in MYSQL_TRANSIENT_CODES
