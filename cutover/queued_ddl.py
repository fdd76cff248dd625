"""Statements other than reads and row changes that may be queued for the table beside the RENAME (MariaDB).

On MariaDB the RENAME runs in a second session and waits for the lock session's UNLOCK, so the source
check the lock session made is decisive only for what queues after the RENAME. Among exclusive requests
for the table the first queued is granted first: a TRUNCATE, DROP, RENAME or CREATE OR REPLACE that
queued during the window would empty or replace the original an instant before the swap, and a TRUNCATE
or DROP sends no row event, so the swap would bring back every row it removed. (An ALTER asks for a
weaker lock first and waits behind the RENAME; it is flagged all the same.) Row changes queued there are
what the window is for: the RENAME is ahead of them (cutover/short_lock.py) and they are captured.

Read once the RENAME is queued, from every session's statement text rather than its state: a statement
joins the lock queue before its state says so, and leaves that state briefly every second while it
waits. While the lock session holds the table, a statement naming it is queued or about to be; anything
that is not a read or a row change makes the attempt roll back (cutover/swap.py), and the next attempt
checks the source again.
"""
from __future__ import annotations

import re

import pymysql

from core.db import query
from core.sql_names import names_table

TABLE_MDL_WAIT = "Waiting for table metadata lock"   # PROCESSLIST.STATE of a statement queued on a table

# Leading blanks and comments, then the statement's first word (each alternative consumes a fixed prefix,
# so a long run of blanks is not tried in every split: this runs under the lock). Executable comments
# (`/*!…*/`, `/*M!…*/`) and hints (`/*+…*/`) are not skipped: their text runs, so the statement is not known
# to be a row change. A leading `(` is let through before SELECT, WITH or VALUES only.
_FIRST_WORD = re.compile(r"^(?:\s|/\*(?![!+]|M!)(?:[^*]|\*(?!/))*\*/|--\s[^\n]*(?:\n|$)|#[^\n]*(?:\n|$)"
                         r"|\((?=\s*(?:SELECT|WITH|VALUES)\b))*(\w+)", re.DOTALL | re.IGNORECASE)
# MariaDB's per-statement settings before the statement itself; values unquoted only (a quoted one could
# hide a FOR), so anything else is judged by its first word, SET.
_VALUE = r"[+-]?[\w.]+(?:[+-][\w.]+)*"   # no two signs in a row: `--` would open a comment
_SET_STATEMENT = re.compile(rf"^\s*SET\s+STATEMENT\s+(?:\w+\s*=\s*{_VALUE}\s*,\s*)*\w+\s*=\s*{_VALUE}\s+FOR\s+",
                            re.IGNORECASE)
LET_THROUGH = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH", "VALUES", "DO", "LOAD",
                         "HANDLER", "SHOW", "DESCRIBE", "DESC", "EXPLAIN"})
# Sessions with no statement of their own to queue.
IDLE_COMMANDS = ("Sleep", "Daemon", "Binlog Dump", "Binlog Dump GTID")


def is_read_or_row_change(statement: str) -> bool:
    """Does the statement only read or change rows (as a captured write does), by its first word?"""
    first = _FIRST_WORD.match(_SET_STATEMENT.sub("", statement, count=1))
    return first is not None and first.group(1).upper() in LET_THROUGH


def queued_statements(conn: pymysql.connections.Connection, database: str, table: str,
                      own_sessions: tuple[int, ...]) -> list[tuple[int, str]]:
    """(session id, statement) of the other sessions running a statement that names database.table and is
    not a read or a row change."""
    rows = query(conn, "SELECT ID, INFO, DB FROM information_schema.PROCESSLIST WHERE INFO IS NOT NULL AND "
                       f"ID <> CONNECTION_ID() AND COMMAND NOT IN ({', '.join(['%s'] * len(IDLE_COMMANDS))}) "
                       "AND (LOCATE(%s, INFO) > 0 OR LOCATE(%s, INFO) > 0)",
                 (*IDLE_COMMANDS, table, table.replace("`", "``")))
    return [(int(session), str(statement)) for session, statement, session_database in rows
            if int(session) not in own_sessions and names_table(str(statement), database, table, session_database)
            and not is_read_or_row_change(str(statement))]
