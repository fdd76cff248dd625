"""Statements other than row changes that wait for the table's metadata lock beside the RENAME (MariaDB).

On MariaDB the RENAME runs in a second session and waits for the lock session's UNLOCK, so the source
check the lock session made is decisive only for what queues after the RENAME. A TRUNCATE, DROP,
CREATE OR REPLACE or ALTER that queued during the window may be granted first at the UNLOCK: it would
empty or change the original an instant before the swap, and a TRUNCATE or DROP sends no row event, so
the swap would bring back every row it removed. Row changes queued there are what the window is for:
the RENAME is ahead of them (cutover/short_lock.py) and they are captured either way.

Read after the RENAME queues: anything that is not a row change and names the table makes the attempt
roll back with the sentry in place, so the RENAME fails; the next attempt checks the source again.
"""
from __future__ import annotations

import re

import pymysql

from core.db import query

TABLE_MDL_WAIT = "Waiting for table metadata lock"   # PROCESSLIST.STATE of a statement queued on a table

# Leading comments and blanks, then the first word of the statement.
_FIRST_WORD = re.compile(r"^(?:\s+|/\*.*?\*/|--[^\n]*\n|#[^\n]*\n)*(\w+)", re.DOTALL)
ROW_CHANGE_WORDS = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH", "VALUES", "TABLE", "DO",
                              "LOAD", "HANDLER"})


def is_row_change(statement: str) -> bool:
    """Does the statement only read or change rows (as a captured write does), by its first word?"""
    first = _FIRST_WORD.match(statement)
    return first is not None and first.group(1).upper() in ROW_CHANGE_WORDS


def queued_statements(conn: pymysql.connections.Connection, table: str,
                      own_sessions: tuple[int, ...]) -> list[tuple[int, str]]:
    """(session id, statement) of the other sessions waiting for a table metadata lock with a statement that
    is not a row change and names `table` (as text, in any case: a false match only costs an attempt)."""
    rows = query(conn, "SELECT ID, INFO FROM information_schema.PROCESSLIST WHERE STATE = %s AND INFO IS NOT NULL",
                 (TABLE_MDL_WAIT,))
    return [(int(session), str(statement)) for session, statement in rows
            if int(session) not in own_sessions and table.lower() in str(statement).lower()
            and not is_row_change(str(statement))]
