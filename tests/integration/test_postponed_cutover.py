"""A postponed cutover stays postponed: outside its window a migration waits in sync, through a crash and a resume;
a manual one is not swapped by `resume`; `cutover` swaps at once."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from core.db import query, scalar
from tests.integration.helpers import cli, leftovers, migration_row, start_cli, status_doc, wait_for
from tests.integration.ledger import create_ledger_table

pytestmark = pytest.mark.integration

DB = "cut_window"
WAITING = "waiting for the cutover window"


def fresh(conn, table: str, rows: int) -> None:
    """The ledger table, with whatever an earlier, interrupted run left of its migration removed."""
    cli("abort", "--table", f"{DB}.{table}")
    query(conn, f"DROP TABLE IF EXISTS {DB}.{table}_osc_old")
    create_ledger_table(conn, DB, table, rows=rows, writers=2)


def closed_window() -> str:
    """A half-hour window twelve hours from now (UTC): closed for the whole test."""
    start = datetime.now(timezone.utc) + timedelta(hours=12)
    return f"{start:%H:%M}-{start + timedelta(minutes=30):%H:%M}"


def test_outside_its_window_a_migration_waits_in_sync_and_keeps_waiting_after_a_crash(endpoints, conn, cli_log):
    table = "scheduled"
    fresh(conn, table, rows=5_000)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note INT NULL", "--partitions", "4",
                     "--chunk-size", "5000", "--cutover-window-schedule", closed_window(), log=cli_log)
    try:
        wait_for(lambda: WAITING in cli_log.read_text() or proc.poll() is not None, 180,
                 "the migration to wait for its window")
        assert WAITING in cli_log.read_text()
        doc = status_doc(DB, table)
        assert doc["stage"] == "cutover" and "next at" in doc["cutover_window"], doc
        # The appliers keep applying while it waits: a change made now reaches the new table.
        query(conn, f"UPDATE {DB}.{table} SET payload = 'while waiting' WHERE id = 100")
        wait_for(lambda: scalar(conn, f"SELECT payload FROM {DB}.{table}_osc_new WHERE id = 100") == "while waiting",
                 60, "the change applied while waiting")
        proc.kill()   # a crash while waiting; resume, given no schedule, keeps the migration's own
        proc.wait(30)
        proc = start_cli("resume", "--table", f"{DB}.{table}", log=cli_log)
        wait_for(lambda: cli_log.read_text().count(WAITING) == 2, 180, "the resumed migration to wait again")
        assert migration_row(conn, DB, table).stage == "cutover"
    finally:
        proc.kill()
        proc.wait(30)
    result = cli("cutover", "--table", f"{DB}.{table}")   # the operator's word overrides the schedule
    assert result.returncode == 0, result.stderr[-3000:]
    assert migration_row(conn, DB, table).stage == "done"
    assert scalar(conn, f"SELECT payload FROM {DB}.{table} WHERE id = 100") == "while waiting"
    assert "note" in columns(conn, table)
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{table}_osc_old"]


def test_resume_keeps_a_manual_cutover_waiting(endpoints, conn):
    table = "manual"
    fresh(conn, table, rows=2_000)
    waiting = cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note INT NULL", "--cutover", "manual",
                  "--quiet")
    assert waiting.returncode == 0, waiting.stderr[-3000:]
    resumed = cli("resume", "--table", f"{DB}.{table}", "--quiet")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    migration = migration_row(conn, DB, table)
    assert (migration.stage, migration.status) == ("cutover", "waiting")
    assert "note" not in columns(conn, table)   # not swapped
    assert cli("cutover", "--table", f"{DB}.{table}", "--quiet").returncode == 0
    assert migration_row(conn, DB, table).stage == "done" and "note" in columns(conn, table)


def columns(conn, table: str) -> list[str]:
    return [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                                      "AND TABLE_NAME=%s", (DB, table))]


def test_a_joined_worker_stays_joined_and_applies_while_a_manual_cutover_waits(endpoints, conn, cli_log):
    table = "joined"
    fresh(conn, table, rows=2_000)
    waiting = cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note INT NULL", "--cutover", "manual",
                  "--quiet")
    assert waiting.returncode == 0, waiting.stderr[-3000:]
    worker = start_cli("--log-level", "INFO", "worker", "--table", f"{DB}.{table}", log=cli_log)
    try:
        query(conn, f"UPDATE {DB}.{table} SET payload = 'while waiting' WHERE id = 100")
        wait_for(lambda: scalar(conn, f"SELECT payload FROM {DB}.{table}_osc_new WHERE id = 100") == "while waiting",
                 60, "the worker's appliers to apply the change")
        assert cli_log.read_text().count("workers joined") == 1, "the worker left and re-joined the applier group"
        assert migration_row(conn, DB, table).status == "waiting"
        result = cli("cutover", "--table", f"{DB}.{table}", "--quiet")
        assert result.returncode == 0, result.stderr[-3000:]
        assert worker.wait(60) == 0   # it leaves once the tables are swapped
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
    assert scalar(conn, f"SELECT payload FROM {DB}.{table} WHERE id = 100") == "while waiting"
