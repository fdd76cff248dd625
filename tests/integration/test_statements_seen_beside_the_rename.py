"""What a MariaDB cutover attempt sees queued beside its RENAME (cutover/queued_ddl.py), read from the server."""
from __future__ import annotations

import threading

import pytest

from core.db import qualified, query, scalar
from cutover.queued_ddl import TABLE_MDL_WAIT, queued_statements
from tests.integration.helpers import application_session, db_conn, wait_for

pytestmark = pytest.mark.integration

DB = "queued"


def test_a_truncate_waiting_for_the_table_is_seen_and_a_row_change_is_not(endpoints, conn):
    query(conn, f"CREATE TABLE IF NOT EXISTS {qualified(DB, 't')} (id INT NOT NULL PRIMARY KEY)")
    query(conn, f"CREATE TABLE IF NOT EXISTS {qualified(DB, 'other')} (id INT NOT NULL PRIMARY KEY)")
    query(conn, f"DELETE FROM {qualified(DB, 't')}")
    holder = db_conn(endpoints)
    sessions = [application_session(endpoints.mysql) for _ in range(3)]
    statements = [f"TRUNCATE TABLE {DB}.t", f"INSERT INTO {DB}.t VALUES (1)", f"TRUNCATE TABLE {DB}.other"]
    waiting = [threading.Thread(target=query, args=(session, sql), daemon=True)
               for session, sql in zip(sessions, statements)]
    query(holder, f"LOCK TABLES {qualified(DB, 't')} WRITE, {qualified(DB, 'other')} WRITE")
    try:
        for thread in waiting:
            thread.start()
        wait_for(lambda: scalar(conn, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE=%s AND "
                                      "DB IS NULL AND INFO LIKE %s", (TABLE_MDL_WAIT, f"%{DB}.%")) == 3,
                 10, "the three statements to queue")
        truncating = sessions[0].thread_id()
        assert queued_statements(conn, DB, "t", ()) == [(truncating, statements[0])]
        assert queued_statements(conn, DB, "t", (truncating,)) == []   # the attempt's own RENAME is left out
    finally:
        query(holder, "UNLOCK TABLES")
        for thread, session in zip(waiting, sessions):
            thread.join(30)
            session.close()
        holder.close()
