"""The application's statements are told from the migration's own (core/app_activity.py): a statement of a
session this process did not open counts, one of this process's sessions does not, and a sleeping session
does not."""
from __future__ import annotations

import threading

import pymysql
import pytest

from core.app_activity import sessions_of_others_running
from core.db import query
from tests.integration.helpers import db_conn, wait_for

pytestmark = pytest.mark.integration

SLEEP_S = 600   # ended by KILL QUERY once looked at


def application_session(endpoints) -> pymysql.connections.Connection:
    """A session opened as another program opens one: not through core.db."""
    addr = endpoints.mysql
    return pymysql.connect(host=addr.host, port=addr.port, user=addr.user, password=addr.password, autocommit=True)


def sleep_until_killed(conn: pymysql.connections.Connection) -> None:
    try:
        query(conn, f"SELECT SLEEP({SLEEP_S})")
    except pymysql.err.OperationalError:   # the kill, as some servers report it
        pass


def test_a_statement_of_another_program_counts_and_one_of_this_process_does_not(endpoints):
    own, reader = db_conn(endpoints), db_conn(endpoints)
    other, sleeping_other = application_session(endpoints), application_session(endpoints)
    sleepers = [threading.Thread(target=sleep_until_killed, args=(conn,), daemon=True) for conn in (own, other)]
    try:
        for thread in sleepers:
            thread.start()
        wait_for(lambda: len(query(reader, "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE %s",
                                   (f"SELECT SLEEP({SLEEP_S})",))) == 2, 10, "both statements running")
        running = sessions_of_others_running(reader)
        assert other.thread_id() in running
        assert own.thread_id() not in running, "this process's own statement was taken for the application's"
        assert sleeping_other.thread_id() not in running and reader.thread_id() not in running
    finally:
        for conn in (own, other):
            query(reader, f"KILL QUERY {conn.thread_id()}")
        for thread in sleepers:
            thread.join(30)
        for conn in (own, reader, other, sleeping_other):
            conn.close()
