"""Validation finds a row the new table got wrong, re-copies it, and counts it; in one consistent snapshot."""
from __future__ import annotations

import pytest

from cutover.compare import compare_tables
from core.db import qualified, query, scalar
from core.state import StateStore
from migration.cutover_loop import SNAPSHOT_TRIES
from tests.integration.helpers import (HELD_COPY, cli, db_conn, fresh_table, held_copy, hold_apply_open,
                                       latest_migration_id, leftovers, migration_row, new_migration_row, start_cli,
                                       status_doc, wait_for)
from core.spec import helper_table_name

pytestmark = pytest.mark.integration

DB = "validate"
ALTER = "MODIFY k BIGINT NOT NULL DEFAULT 0"


def test_a_wrong_row_in_the_new_table_is_found_and_repaired(endpoints, cli_log):
    table = "wrong_row"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=20_000, seed=31)
    StateStore(conn, "stream_osc").ensure_schema()
    blocker = db_conn(endpoints)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, "--chunk-size", "5000",
                     "--max-lag", "0", "--apply-workers", "1", *HELD_COPY, log=cli_log)
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        # Hold apply open, pause, and damage a row of the new table behind the tool's back:
        # only validation can notice it.
        hold_apply_open(endpoints, conn, blocker, DB, table, migration.id)
        assert cli("pause", "--table", f"{DB}.{table}").returncode == 0
        query(conn, f"UPDATE {DB}.{helper_table_name(table, 'new')} SET c = 'damaged' WHERE id = 7")
        query(blocker, "ROLLBACK")
        wait_for(lambda: migration_row(conn, DB, table).stage == "validate", 60, "stage validate")
        assert cli("resume", "--table", f"{DB}.{table}").returncode == 0
        assert proc.wait(300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        blocker.close()
    log = cli_log.read_text()
    assert "validate: comparing checksums of every PK range in one consistent snapshot" in log
    assert "validate: clean (1 differing rows re-copied and re-checked)" in log
    status = status_doc(DB, table)
    assert status["validation_diffs"] == 1 and status["stage"] == "done"
    assert compare_tables(conn, DB, helper_table_name(table, "old"), table).equal
    assert scalar(conn, f"SELECT c FROM {DB}.{table} WHERE id = 7") != "damaged"


def test_a_validation_snapshot_that_misses_its_window_is_tried_again_before_the_live_tables_are_compared(
        endpoints, cli_log):
    """Live tables under steady writes to the same rows may never compare equal: one lock or drain too slow for
    the window must not give the snapshot up. Here every try misses whatever the machine's speed: a session the
    test holds open on the migration's fence table makes each lock try time out (no application session holds
    the source, so the tool has no holder to wait for)."""
    table = "snapshot_tries"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=20_000, seed=37)
    StateStore(conn, "stream_osc").ensure_schema()
    copy_holder, fence_holder = db_conn(endpoints), db_conn(endpoints)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, "--chunk-size", "5000",
                     "--lock-wait-timeout", "1", "--lock-tries", "1", *HELD_COPY, log=cli_log)
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        with held_copy(conn, copy_holder, DB, table, migration.id):
            query(fence_holder, "BEGIN")
            query(fence_holder, f"SELECT * FROM {qualified('stream_osc', migration.fence_table)} LIMIT 1")
        wait_for(lambda: "against the live tables" in cli_log.read_text() or proc.poll() is not None, 120,
                 "validation against the live tables")
    finally:
        proc.kill()
        proc.wait(30)
        copy_holder.close()
        fence_holder.close()
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    log = cli_log.read_text()
    assert log.count("validate: no consistent snapshot within the window") == SNAPSHOT_TRIES, log[-3000:]
    assert log.count("trying again in") == SNAPSHOT_TRIES - 1 >= 1, log[-3000:]
    assert "validate: comparing checksums of every PK range against the live tables" in log
    assert leftovers(endpoints, DB, table) == []
