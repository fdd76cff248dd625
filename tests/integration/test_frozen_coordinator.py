"""A coordinator frozen (SIGSTOP) while it holds the cutover's LOCK TABLES: the server itself ends its session, and
so its locks, within the window plus a few seconds, and the application's writes go on while the process is still
stopped. Then it is let go on (SIGCONT) or killed (SIGKILL, then `stream-osc resume`); either way the migration
finishes and every write the application was told committed is in the final table.

How the freeze is caught inside the lock, not before or after it: an application session keeps the table in short
transactions (each younger than the age at which the tool waits for a holder: cutover/blockers.py), so the tool's
LOCK TABLES queues behind one of them. Once the server shows that request waiting, the coordinator is stopped and
the transaction ends: the server grants the lock to a process that can no longer answer.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from core.db import connect, qualified, query
from core.spec import helper_table_name
from cutover.blockers import MIN_AGE_S
from cutover.session_bounds import idle_limit_s
from tests.integration.helpers import cli, fresh_ledger_table, migration_row, start_cli, wait_for, \
    waiting_without_coordinator
from tests.integration.ledger import Ledger

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]   # alone: it measures how long the application waits

DB = "frozen_coordinator"
WRITERS = 4
WINDOW_S = 3.0
BOUND_S = WINDOW_S + 5   # the application's writes resume within this while the coordinator is stopped
HOLD_S = MIN_AGE_S * 0.7   # each of the application's short transactions: never waited for as a holder
OPTIONS = ("--alter", "ADD COLUMN note INT NULL", "--algorithm", "copy", "--copy-workers", "2", "--apply-workers", "2",
           "--partitions", "4",
           "--chunk-size", "5000", "--batch-size", "1000", "--max-lag", "500", "--cutover-window", str(WINDOW_S),
           "--lock-tries", "20")


class ShortTransactions(threading.Thread):
    """An application session reading the table in back-to-back transactions of HOLD_S each, until released (its
    open transaction then ends at once)."""

    def __init__(self, endpoints, table: str) -> None:
        super().__init__(daemon=True)
        self.conn = connect(endpoints.mysql, tagged=False)
        self.table = table
        self.released = threading.Event()

    def run(self) -> None:
        try:
            while not self.released.is_set():
                query(self.conn, "BEGIN")
                query(self.conn, f"SELECT id FROM {qualified(DB, self.table)} LIMIT 1")
                self.released.wait(HOLD_S)
                query(self.conn, "COMMIT")
        finally:
            self.conn.close()

    def release(self) -> None:
        self.released.set()
        self.join(10)


def lock_request_waiting(conn) -> int | None:
    """The session of the tool's cutover LOCK TABLES (it also locks the migrations table READ) while it waits."""
    rows = query(conn, "SELECT ID FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata lock' "
                       "AND INFO LIKE '%%stream-osc%%LOCK TABLES%%`migrations` READ%%'")
    return int(rows[0][0]) if rows else None


def holds_cutover_lock(conn, table: str) -> bool:
    """Whether a session holds LOCK TABLES … WRITE on the table and its sentry (only the cutover's lock session
    does)."""
    return bool(query(conn, """
        SELECT THREAD_ID FROM information_schema.METADATA_LOCK_INFO
        WHERE LOCK_MODE = 'MDL_SHARED_NO_READ_WRITE' AND TABLE_SCHEMA = %s AND TABLE_NAME IN (%s, %s)
        GROUP BY THREAD_ID HAVING COUNT(DISTINCT TABLE_NAME) = 2""", (DB, table, helper_table_name(table, "old"))))


def stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (state T in /proc)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def freeze_in_lock(endpoints, conn, proc: subprocess.Popen, table: str) -> float:
    """Stop `proc` once it holds the cutover's lock; returns the wall-clock time it was stopped. A lock try that ran
    out before the application's transaction ended is let go on, and the next one caught."""
    for _ in range(10):
        holder = ShortTransactions(endpoints, table)
        holder.start()
        try:
            wait_for(lambda: proc.poll() is not None or lock_request_waiting(conn), 300, "the cutover's lock request",
                     every_s=0.005)
            assert proc.poll() is None, f"`stream-osc cutover` exited ({proc.returncode}) before its lock"
            os.kill(proc.pid, signal.SIGSTOP)
            frozen_at = time.time()
        finally:
            holder.release()
        try:
            wait_for(lambda: holds_cutover_lock(conn, table), 2, "the lock granted to the stopped coordinator",
                     every_s=0.01)
            return frozen_at
        except AssertionError:
            os.kill(proc.pid, signal.SIGCONT)   # that try ran out first: the coordinator tries again
    raise AssertionError("no lock try was caught waiting and then granted")


@pytest.mark.slow
@pytest.mark.parametrize("then", ["continued", "killed"])
def test_a_coordinator_frozen_in_its_lock_holds_the_application_at_most_the_window_plus_five_seconds(
        endpoints, conn, tmp_path, then):
    table = f"frozen_{then}"
    fresh_ledger_table(conn, DB, table, rows=20_000, writers=WRITERS)
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=47) as ledger:
        ledger.wait_for_writes(200)
        waiting_without_coordinator(conn, DB, table, *OPTIONS)
        proc = start_cli("--log-level", "INFO", "cutover", "--table", f"{DB}.{table}", log=tmp_path / "cutover.log")
        try:
            frozen_at = freeze_in_lock(endpoints, conn, proc, table)
            locked = time.monotonic()
            wait_for(lambda: not holds_cutover_lock(conn, table), BOUND_S + 5, "the server to end the frozen lock")
            held_s = time.monotonic() - locked
            ledger.wait_for_writes(100, timeout=BOUND_S)
            assert stopped(proc.pid), "the coordinator ran again: the lock's end proves nothing"
            worst = ledger.worst_latency(since=frozen_at)
            print(f"frozen coordinator ({then}): lock held {held_s:.2f} s after it was seen granted, the "
                  f"application's worst write {worst:.2f} s (idle limit {idle_limit_s(WINDOW_S)} s, "
                  f"window {WINDOW_S} s)")
            assert worst <= BOUND_S
            assert migration_row(conn, DB, table).stage == "cutover"
            if then == "continued":
                os.kill(proc.pid, signal.SIGCONT)
                assert proc.wait(300) == 0, "the coordinator did not finish the migration after SIGCONT"
            else:
                proc.kill()
                proc.wait(30)
                resume_manual_migration(conn, table, tmp_path)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(30)
        ledger.wait_for_writes(200)
    final = migration_row(conn, DB, table)
    assert (final.stage, final.status) == ("done", "done")
    assert query(conn, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                       "AND COLUMN_NAME='note'", (DB, table))[0][0] == 1
    ledger.assert_kept(conn)


def resume_manual_migration(conn, table: str, tmp_path: Path) -> None:
    """`stream-osc resume` of the killed coordinator's migration (--cutover manual: it waits in sync), then
    `stream-osc cutover`, which asks the resumed coordinator to swap."""
    resumed = start_cli("--log-level", "INFO", "resume", "--table", f"{DB}.{table}", log=tmp_path / "resume.log")
    try:
        wait_for(lambda: resumed.poll() is not None or migration_row(conn, DB, table).status == "waiting", 300,
                 "the resumed migration to wait for its cutover")
        assert resumed.poll() is None, f"resume exited ({resumed.returncode})"
        asked = cli("cutover", "--table", f"{DB}.{table}", "--quiet", timeout=300)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        assert resumed.wait(120) == 0
    finally:
        if resumed.poll() is None:
            resumed.kill()
            resumed.wait(30)
