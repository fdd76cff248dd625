"""A move's cutover looks at both servers: a transaction left open on the target table is waited for before the
source is locked (not met under the lock, where the application would wait for it), and the target's
AUTO_INCREMENT, one behind the source's, is raised before the lock instead of by an ALTER under it.

Before this, the same setup held an application write to the source for 27.5 s: the ALTER … AUTO_INCREMENT the
cutover ran on the target under the source's lock waited for that transaction.
"""
from __future__ import annotations

import time

import pytest

from core.db import connect, qualified, query, scalar
from cutover.counters import read_counter
from cutover.swap import CutoverAborted, within_window
from cutover.watchdog import StatementWatchdog
from tests.integration.helpers import abort_leftover, start_cli, wait_for, waiting_without_coordinator
from tests.integration.ledger import Ledger, create_ledger_table

pytestmark = pytest.mark.integration

DB = "osc_move_held"
MOVED_DB = "osc_moved_held"
WRITERS = 4
OPTIONS = ("--target-dsn", "--copy-workers", "2", "--apply-workers", "2", "--partitions", "2",
           "--chunk-size", "5000", "--batch-size", "1000", "--cutover-window", "3", "--max-lag", "500")
WORST_WRITE_S = 1.0


@pytest.fixture
def target(endpoints, monkeypatch):
    """A session on the target server with its schema made fresh; the CLI finds the server in the environment."""
    monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)
    conn = connect(endpoints.target())
    query(conn, f"DROP DATABASE IF EXISTS {MOVED_DB}")
    query(conn, f"CREATE DATABASE {MOVED_DB}")
    yield conn
    conn.close()


def holders_seen_waited_for(log_path) -> bool:
    return "on the target server" in log_path.read_text(errors="replace")


def test_a_move_waits_for_a_transaction_on_the_target_table_without_holding_the_application(
        endpoints, conn, target, tmp_path):
    table = "held_on_target"
    abort_leftover(conn, DB, table)
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, table + '_osc_old')}")
    create_ledger_table(conn, DB, table, rows=2_000, writers=WRITERS)
    moved = qualified(MOVED_DB, table)
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=47) as ledger:
        ledger.wait_for_writes(100)
        waiting_without_coordinator(conn, DB, table, "--target-table", f"{MOVED_DB}.{table}", *OPTIONS)
        app = connect(endpoints.mysql, tagged=False)   # the source's counter one ahead: a rolled-back insert
        query(app, "BEGIN")
        query(app, f"INSERT INTO {qualified(DB, table)} (writer, seq) VALUES (99, 1)")
        query(app, "ROLLBACK")
        app.close()
        reader = connect(endpoints.target(), tagged=False)   # a transaction that read the target table, left open
        query(reader, "BEGIN")
        query(reader, f"SELECT COUNT(*) FROM {moved}")
        log = tmp_path / "cutover.log"
        started = time.time()
        proc = start_cli("--log-level", "INFO", "cutover", "--table", f"{DB}.{table}", log=log)
        try:
            wait_for(lambda: proc.poll() is not None or holders_seen_waited_for(log), 120,
                     "the cutover to wait for the transaction on the target")
            assert proc.poll() is None, f"the cutover exited ({proc.returncode}) while the target table was held"
            ledger.wait_for_writes(100)   # the application goes on meanwhile
            query(reader, "ROLLBACK")
            assert proc.wait(120) == 0
        finally:
            reader.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        ended = time.time()
        ledger.stop()
    worst = ledger.worst_latency(since=started, until=ended)
    print(f"move with a transaction open on the target table: the application's worst write during the cutover "
          f"{worst * 1000:.0f} ms")
    assert worst <= WORST_WRITE_S
    assert ledger.missing(target, (MOVED_DB, table)) == []
    source_counter = read_counter(conn, DB, f"{table}_osc_old", is_mariadb=True)
    assert read_counter(target, MOVED_DB, table, is_mariadb=True) >= source_counter   # no id handed out twice
    assert scalar(conn, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                  (DB, table)) == 0


def test_a_target_statement_still_waiting_at_the_windows_end_is_stopped_and_the_attempt_rolls_back(endpoints, target):
    """What a move does if a holder appears on the target after its look: the watchdog (the only limit MySQL has for
    a write or DDL) interrupts the statement at the deadline, from its own session, and the attempt is aborted."""
    table = qualified(MOVED_DB, "watched")
    query(target, f"CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY)")
    holder = connect(endpoints.target(), tagged=False)
    query(holder, "BEGIN")
    query(holder, f"SELECT * FROM {table}")
    watchdog = StatementWatchdog(lambda: connect(endpoints.target()), target.thread_id(), "target")
    try:
        started = time.monotonic()
        watchdog.arm(started + 0.3)
        with pytest.raises(CutoverAborted, match="did not fit the window"):
            with within_window("on the target"):
                query(target, f"ALTER TABLE {table} AUTO_INCREMENT = 100")
        took = time.monotonic() - started
    finally:
        watchdog.close()
        holder.close()
    assert watchdog.fired and 0.3 <= took < 1.0, took
    assert scalar(target, "SELECT 1") == 1   # the session is kept: the attempt still rolls back there
