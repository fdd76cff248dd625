"""The application's statements are told from the tool's own (throttle/app_activity.py): a statement of a session the
tool did not open counts; one of the tool does not, whichever process of it sent it (this one, or another, as a
`stream-osc worker` on another machine is); a sleeping session does not."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pymysql
import pytest

from throttle.app_activity import sessions_of_others_running
from core.db import STATEMENT_TAG, query
from tests.integration.helpers import application_session, db_conn, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]   # alone: it counts every other session's statements

SLEEP_S = 600   # ended by KILL QUERY once looked at
OTHER_PROCESS_SLEEP_S = 601   # told apart in the process list

# another process of the tool: a session through core.db, running one long statement
TOOL_PROCESS = textwrap.dedent("""
    import os
    from core.db import connect, query
    from core.endpoints import MySQLAddress
    address = MySQLAddress(os.environ["HOST"], int(os.environ["PORT"]), os.environ["USER_NAME"],
                           os.environ["USER_PASSWORD"], os.environ["SSL_MODE"])
    try:
        query(connect(address), "SELECT SLEEP(%d)")
    except Exception:
        pass
""" % OTHER_PROCESS_SLEEP_S)


def sleep_until_killed(conn: pymysql.connections.Connection) -> None:
    try:
        query(conn, f"SELECT SLEEP({SLEEP_S})")
    except pymysql.err.OperationalError:   # the kill, as some servers report it
        pass


def running_statements(reader: pymysql.connections.Connection) -> dict[int, str]:
    return {int(session): str(info) for session, info in query(
        reader, "SELECT ID, INFO FROM information_schema.PROCESSLIST WHERE INFO LIKE %s", ("%SELECT SLEEP(60_)",))}


def test_a_statement_of_another_program_counts_and_one_of_the_tool_in_any_of_its_processes_does_not(endpoints):
    addr = endpoints.mysql
    own, reader = db_conn(endpoints), db_conn(endpoints)
    other, sleeping_other = application_session(addr), application_session(addr)
    env = {**os.environ, "HOST": addr.host, "PORT": str(addr.port), "USER_NAME": addr.user,
           "USER_PASSWORD": addr.password, "SSL_MODE": addr.ssl_mode}
    tool_process = subprocess.Popen([sys.executable, "-c", TOOL_PROCESS], env=env, stdin=subprocess.DEVNULL)
    sleepers = [threading.Thread(target=sleep_until_killed, args=(conn,), daemon=True) for conn in (own, other)]
    try:
        for thread in sleepers:
            thread.start()
        wait_for(lambda: len(running_statements(reader)) == 3, 30, "the three statements running")
        statements = running_statements(reader)
        tool_process_session = next(s for s, info in statements.items() if f"SLEEP({OTHER_PROCESS_SLEEP_S})" in info)
        assert statements[own.thread_id()].startswith(STATEMENT_TAG), statements   # as an operator sees it
        assert statements[tool_process_session].startswith(STATEMENT_TAG), statements
        assert not statements[other.thread_id()].startswith(STATEMENT_TAG), statements

        running = sessions_of_others_running(reader)
        assert other.thread_id() in running
        assert own.thread_id() not in running, "this process's own statement was taken for the application's"
        assert tool_process_session not in running, "another process's statement of the tool was taken for the " \
                                                    "application's"
        assert sleeping_other.thread_id() not in running and reader.thread_id() not in running
    finally:
        for session in running_statements(reader):
            query(reader, f"KILL QUERY {session}")
        for thread in sleepers:
            thread.join(30)
        tool_process.wait(30)
        for conn in (own, reader, other, sleeping_other):
            conn.close()
