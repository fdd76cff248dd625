"""How busy the application is right now: the statements other sessions are running.

`--max-app-latency auto` yields to an application that feels the work. On a server where nothing but the
migration runs, the probe's write still waits for the copy's own commits (its latency doubles on an idle
server: docs/benchmarks.md), and yielding to that protects no one while it slows an idle copy by a third.
So each probe sample also counts the statements other sessions are running at that moment; averaged over
the judged second, that is the application's concurrency (Little's law: its statement rate times their
latency). An application that feels the work shows up in it twice over: its statements keep coming and
take longer.

Not counted: this process's own sessions (core/db.py), sessions that sleep, and server and replication
threads (binlog dumps, the connector's included). The migration's sessions in other processes (`stream-osc
worker`) are counted as the application's: yielding to them is the safe side of the mistake.
"""
from __future__ import annotations

import pymysql

from core.db import own_session_ids, query

# the commands of a session running a client's statement; others sleep, connect, or are the server's own
RUNNING_COMMANDS = ("Query", "Execute", "Fetch", "Prepare")


def sessions_of_others_running(conn: pymysql.connections.Connection) -> list[int]:
    """The ids of the sessions, not this process's, that run a statement now (PROCESS privilege, which
    migration/checks.py requires, shows every user's)."""
    placeholders = ", ".join(["%s"] * len(RUNNING_COMMANDS))
    running = query(conn, f"SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND IN ({placeholders}) "
                          "AND ID <> CONNECTION_ID()", RUNNING_COMMANDS)
    own = own_session_ids()
    return [session for (session,) in running if session not in own]
