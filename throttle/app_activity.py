"""How busy the application is right now: the statements other sessions are running.

`--max-app-latency auto` yields to an application that feels the work. On a server where nothing but the
migration runs, the probe's write still waits for the copy's own commits (its latency doubles on an idle
server: docs/benchmarks.md), and yielding to that protects no one while it slows an idle copy by a third.
So a thread of its own counts the statements other sessions are running, every COUNT_EVERY_S in a session
of its own (a slow probe write must not thin the counts, and the application's statements held up by the
same stall are seen); averaged over the judged second, that is the application's concurrency (Little's
law: its statement rate times their latency). An application that feels the work shows up in it more,
since its statements take longer.

Not counted: the tool's own statements, told by the tag that opens each (core/db.py: STATEMENT_TAG) whichever
process sent them (this one, a `stream-osc worker` on another machine, another migration) and through a proxy
whose session ids are not the server's; sessions that sleep; and the server's and replication's threads (binlog
dumps, the connector's included). Every other command counts, so that a kind of statement not named here errs
on the side of yielding.

What it misses: an application whose statements are in flight less than BUSY_AT of the time
(throttle/yielding.py) is not yielded to until the work slows it enough that they are. By Little's law, one
running 50 statements a second counts once they take 5 ms; a duration given to `--max-app-latency` protects
it from the start.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pymysql

from core.db import STATEMENT_TAG, close_quietly, query
from core.logs import log_event
from throttle.yielding import Yielding

log = logging.getLogger("stream_osc.app_activity")

COUNT_EVERY_S = 0.1
RETRY_EVERY_S = 1.0   # after a failed count: a server refusing sessions is not asked ten times a second

# commands of sessions that run nothing for a client: idle, ended, or the server's and replication's own
NOT_RUNNING_COMMANDS = ("Sleep", "Daemon", "Killed", "Binlog Dump", "Binlog Dump GTID")
SERVER_USERS = ("system user", "event_scheduler")


def sessions_of_others_running(conn: pymysql.connections.Connection) -> list[int]:
    """The ids of the sessions running a statement now that is not the tool's (PROCESS privilege, which
    migration/checks.py requires, shows every user's)."""
    commands = ", ".join(["%s"] * len(NOT_RUNNING_COMMANDS))
    users = ", ".join(["%s"] * len(SERVER_USERS))
    running = query(conn, f"SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND NOT IN ({commands}) "
                          f"AND USER NOT IN ({users}) AND (INFO IS NULL OR LEFT(INFO, %s) <> %s)",
                    (*NOT_RUNNING_COMMANDS, *SERVER_USERS, len(STATEMENT_TAG), STATEMENT_TAG))
    return [session for (session,) in running]


class ActivityCounter:
    """A daemon thread giving `yielding` a count every COUNT_EVERY_S while it judges the application's activity
    (`auto`, once the baseline is taken) and the migration is not paused. A count that cannot be read is given
    as None, which counts as busy; no failure ends the thread (logged once per streak)."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], yielding: Yielding,
                 paused: Callable[[], bool] = lambda: False) -> None:
        self.connect = connect
        self.yielding = yielding
        self.paused = paused   # nothing is judged then, so nothing is counted
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="app-activity-count", daemon=True)

    def start(self) -> "ActivityCounter":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def _run(self) -> None:
        """Count until stopped. The session is closed whenever nothing is counted (paused, or not `auto`), so
        that a long pause does not leave it to the server's idle timeout."""
        conn: pymysql.connections.Connection | None = None
        failing = False
        while not self.stopped.is_set():
            began = time.monotonic()
            if not self.yielding.judges_activity() or self.paused():
                conn = close_quietly(conn)
            else:
                count = None
                try:
                    conn = conn or self.connect()
                    count = len(sessions_of_others_running(conn))
                    failing = False
                except Exception as exc:   # this count only tells whether to yield: nothing may end the thread
                    if not failing:
                        log_event(log, "cannot count the server's running sessions; the application is taken to "
                                       "be busy", logging.WARNING, reason=str(exc))
                    failing = True
                    conn = close_quietly(conn)
                self.yielding.count_others(count)
            every = RETRY_EVERY_S if failing else COUNT_EVERY_S
            self.stopped.wait(max(0.0, every - (time.monotonic() - began)))
        close_quietly(conn)
