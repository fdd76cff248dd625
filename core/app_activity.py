"""How busy the application is right now: the statements other sessions are running.

`--max-app-latency auto` yields to an application that feels the work. On a server where nothing but the
migration runs, the probe's write still waits for the copy's own commits (its latency doubles on an idle
server: docs/benchmarks.md), and yielding to that protects no one while it slows an idle copy by a third.
So each probe sample also counts the statements other sessions are running at that moment; averaged over
the judged second, that is the application's concurrency (Little's law: its statement rate times their
latency). An application that feels the work shows up in it more, since its statements take longer.

Not counted: this process's own sessions (core/db.py), sessions that sleep, and the server's and
replication's threads (binlog dumps, the connector's included). Every other command counts, so that a kind
of statement not named here errs on the side of yielding. The sessions of any other process (a `stream-osc
worker`, another migration) are counted as the application's: yielding to them is the safe side too.

What it misses: an application whose statements are in flight less than BUSY_AT of the time
(core/yielding.py) is not yielded to until the work slows it enough that they are. By Little's law, one
running 40 statements a second counts once they take 6 ms; a duration given to `--max-app-latency` protects
it from the start.
"""
from __future__ import annotations

import pymysql

from core.db import own_session_ids, query

# commands of sessions that run nothing for a client: idle, ended, or the server's and replication's own
NOT_RUNNING_COMMANDS = ("Sleep", "Daemon", "Killed", "Binlog Dump", "Binlog Dump GTID")
SERVER_USERS = ("system user", "event_scheduler")


def sessions_of_others_running(conn: pymysql.connections.Connection) -> list[int]:
    """The ids of the sessions, not this process's, that run a statement now (PROCESS privilege, which
    migration/checks.py requires, shows every user's)."""
    commands = ", ".join(["%s"] * len(NOT_RUNNING_COMMANDS))
    users = ", ".join(["%s"] * len(SERVER_USERS))
    running = query(conn, f"SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND NOT IN ({commands}) "
                          f"AND USER NOT IN ({users}) AND ID <> CONNECTION_ID()",
                    (*NOT_RUNNING_COMMANDS, *SERVER_USERS))
    own = own_session_ids(conn.host, conn.port)
    return [session for (session,) in running if session not in own]
