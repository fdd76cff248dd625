"""Load-based throttling against the real server: --max-load holds the work back while the server's
own status counter is over the limit, --critical-load stops the migration (resumable), and a bad or
already-reached threshold is refused before anything is made."""
from __future__ import annotations

import threading
import time

import pytest

from cutover.compare import compare_tables
from core.db import query
from tests.integration.helpers import (chunk_progress, cli, db_conn, fresh_table, latest_migration_id, leftovers,
                                       migration_row, new_migration_row, start_cli, status_doc, table_is_original,
                                       wait_for)
from core.spec import helper_table_name

pytestmark = pytest.mark.integration

DB = "throttle"
ROWS = 60_000
ALTER = "MODIFY k BIGINT NOT NULL DEFAULT 0"
SLEEPERS = 30          # sessions in SELECT SLEEP count in Threads_running
LIMIT = "Threads_running=25"


class Sleepers:
    """SLEEPERS sessions each running SELECT SLEEP until stopped: Threads_running rises by that many."""

    def __init__(self, endpoints) -> None:
        self.endpoints = endpoints
        self.conns = [db_conn(endpoints) for _ in range(SLEEPERS)]
        self.threads = [threading.Thread(target=self._sleep, args=(c,), daemon=True) for c in self.conns]

    @staticmethod
    def _sleep(conn) -> None:
        try:
            query(conn, "SELECT SLEEP(600)")
        except Exception:  # noqa: BLE001 - ended by KILL QUERY
            pass

    def __enter__(self) -> "Sleepers":
        for thread in self.threads:
            thread.start()
        killer = db_conn(self.endpoints)
        wait_for(lambda: int(query(killer, "SHOW GLOBAL STATUS LIKE 'Threads_running'")[0][1]) > SLEEPERS,
                 30, "the sleeping sessions to run")
        killer.close()
        return self

    def __exit__(self, *exc) -> None:
        killer = db_conn(self.endpoints)
        for conn in self.conns:
            query(killer, f"KILL QUERY {conn.thread_id()}")
        for thread in self.threads:
            thread.join(30)
        for conn in self.conns:
            conn.close()
        killer.close()


def test_max_load_holds_the_copy_back_until_the_load_drops(endpoints, cli_log):
    table = "held"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=ROWS, seed=21)
    earlier = latest_migration_id(conn, DB, table)
    with Sleepers(endpoints):
        proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, "--max-load", LIMIT,
                         "--copy-workers", "2", "--chunk-size", "10000", "--batch-size", "1000",
                         "--target-batch-time", "0", log=cli_log)
        try:
            migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
            wait_for(lambda: (status_doc(DB, table)["throttle_reason"] or "").startswith("Threads_running="), 60,
                     "status to show the throttle")
            time.sleep(2.0)   # an observation window: nothing may be copied while the load is over the limit
            assert chunk_progress(conn, migration.id)[0] == 0 and migration_row(conn, DB, table).stage == "copy"
        except BaseException:
            proc.kill()
            raise
    try:
        assert proc.wait(300) == 0, cli_log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    log = cli_log.read_text()
    assert "throttled: Threads_running=" in log and "throttle released" in log
    assert migration_row(conn, DB, table).status == "done"
    assert compare_tables(conn, DB, helper_table_name(table, "old"), table).equal


def test_critical_load_stops_the_migration_and_resume_finishes_it(endpoints, cli_log):
    table = "critical"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=ROWS, seed=22)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, "--critical-load", LIMIT,
                     "--copy-workers", "2", "--chunk-size", "10000", "--batch-size", "300",
                     "--target-batch-time", "0", log=cli_log)
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        wait_for(lambda: chunk_progress(conn, migration.id)[0] > 0, 60, "the copy to start")
        assert cli("pause", "--table", f"{DB}.{table}").returncode == 0
        with Sleepers(endpoints):
            assert cli("resume", "--table", f"{DB}.{table}").returncode == 0
            assert proc.wait(120) == 4   # stopped by --critical-load, resumable
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "critical load reached (Threads_running=" in cli_log.read_text()
    assert table_is_original(conn, DB, table)
    stopped = migration_row(conn, DB, table)
    # stopped before the swap: a copy this small can end before the pause lands, and the check then
    # stops the migration in validation or in cutover, before its lock
    assert stopped.id == migration.id and stopped.stage in ("copy", "apply", "validate", "cutover")

    resumed = cli("resume", "--table", f"{DB}.{table}", "--quiet")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert migration_row(conn, DB, table).status == "done"
    assert compare_tables(conn, DB, helper_table_name(table, "old"), table).equal


@pytest.mark.parametrize("option, value, message", [
    ("--max-load", "Threads_running", "is not STATUS_VARIABLE=NUMBER"),
    ("--max-load", "No_such_counter=5", "no numeric global status variable No_such_counter"),
    ("--critical-load", "Uptime=1", "--critical-load is already reached (Uptime="),
])
def test_bad_or_reached_thresholds_are_refused_and_change_nothing(endpoints, option, value, message):
    table = "refused"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=1_000, seed=23)
    result = cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, option, value, "--quiet")
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert leftovers(endpoints, DB, table) == []
