"""`stream-osc set` on a running migration: a copy held back by a --max-load the server is always over goes on
once `set` clears the limit (the coordinator takes it up, logs it, `status` shows it); a bad value is refused
and changes nothing; two commands changing the options at once both keep their change; a setting is taken up
while an applier waits on a row lock an application holds."""
from __future__ import annotations

import time

import pytest

from core.db import query, scalar
from core.state import StateStore
from applier.apply import APPLIER_LOCK_WAIT_S
from tests.integration.helpers import (HELD_COPY, chunk_progress, cli, db_conn, fresh_table, held_copy,
                                       latest_migration_id, make_an_applier_wait, migration_row, new_migration_row,
                                       start_cli, status_doc, wait_for, waits_on_session)

pytestmark = pytest.mark.integration

DB = "settings"
ALWAYS_OVER = "Threads_running=1"   # the status query itself is a running thread


def test_set_releases_a_max_load_that_holds_a_running_copy_back(endpoints, conn, tmp_path):
    table = "adjusted"
    qualified = f"{DB}.{table}"
    fresh_table(conn, DB, table, rows=20_000, seed=51)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--algorithm", "copy", "--table", qualified, "--alter", "ADD COLUMN flag INT NULL",
                     "--max-load", ALWAYS_OVER, "--chunk-size", "4000", "--log-level", "info", log=tmp_path / "cli.log")
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        doc = wait_for(lambda: (lambda d: d if d["throttled"] else None)(status_doc(DB, table)), 60,
                       "status to show the throttle")
        assert doc["throttle_reason"].startswith("Threads_running=") and doc["settings"] == {}
        time.sleep(2.0)   # an observation window: nothing may be copied while held back
        assert chunk_progress(conn, migration.id)[0] == 0 and migration_row(conn, DB, table).stage == "copy"

        refused = cli("set", "--table", qualified, "batch-size=0")
        assert refused.returncode == 2 and "batch-size must be at least 1" in refused.stderr, refused.stderr
        assert status_doc(DB, table)["settings"] == {}       # a refused value changes nothing

        result = cli("set", "--table", qualified, "max-load=", "batch-size=500")
        assert result.returncode == 0, result.stderr
        assert status_doc(DB, table)["settings"] == {"max_load": "", "batch_size": 500}
        assert proc.wait(300) == 0, (tmp_path / "cli.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "cli.log").read_text()
    assert "settings changed: max_load=, batch_size=500" in log
    assert 'logger=stream_osc.runner msg="settings changed"' in log
    assert migration_row(conn, DB, table).status == "done"


def test_options_changed_by_two_commands_at_once_keep_both_changes(endpoints, conn):
    """`set`, a resume and init each rewrite the whole options document of the migration's row. A second command
    writing between one's read and its write (as two `set`s, or a `set` and a resume, can) must not lose its
    change: the first one's write must be computed again from the row as the second left it."""
    store, other = StateStore(conn, "stream_osc"), StateStore(db_conn(endpoints), "stream_osc")
    store.ensure_schema()
    query(conn, "DELETE FROM stream_osc.migrations WHERE db = %s AND tbl = 'options_race'", (DB,))
    migration = store.create(DB, "options_race", "ADD COLUMN flag INT NULL", "race", ("id",),
                             {"settings": {"batch_size": 500}})
    computed: list[dict] = []

    def set_max_load(current):
        computed.append(dict(current.options))
        if len(computed) == 1:   # another command writes between this one's read and its write
            other.change_options(migration.id, lambda row: {**row.options, "settings": {
                **row.options["settings"], "copy_workers": 2}})
        return {**current.options, "settings": {**current.options["settings"], "max_load": "Threads_running=40"}}

    try:
        store.change_options(migration.id, set_max_load)
        assert len(computed) == 2   # computed again from the row the other command left
        assert store.get(migration.id).options["settings"] == {"batch_size": 500, "copy_workers": 2,
                                                               "max_load": "Threads_running=40"}
    finally:
        store.delete(migration.id)
        other.conn.close()


# A stopped applier ends its re-copy's current lock wait, then stops at the retry. Joined until the re-copy gave
# up (twenty lock waits, over 100 s), the coordinator went on only then.
TAKEN_UP_S = 6 * APPLIER_LOCK_WAIT_S


def test_a_setting_is_taken_up_while_an_applier_waits_on_an_application_s_row_lock(endpoints, conn, tmp_path):
    """`set` restarts the appliers. One retrying a re-copy behind a row lock that an application keeps stops at its
    next retry, so the coordinator goes on with the copy (let go in full batches here) to its end and to apply
    while the lock is still held; once it is released, the change is in the final table."""
    table = "held_applier"
    fresh_table(conn, DB, table, rows=20_000, seed=52)
    StateStore(conn, "stream_osc").ensure_schema()
    blocker, holder = db_conn(endpoints), db_conn(endpoints)
    earlier = latest_migration_id(conn, DB, table)
    log = tmp_path / "cli.log"
    proc = start_cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter",
                     "ADD COLUMN flag INT NULL", "--max-lag", "0",
                     "--chunk-size", "5000", "--apply-workers", "1", *HELD_COPY, log=log)
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        with held_copy(conn, holder, DB, table, migration.id):   # so that the coordinator reads `set` mid-copy
            make_an_applier_wait(conn, blocker, DB, table)
            assert cli("set", "--table", f"{DB}.{table}", "batch-size=5000").returncode == 0
            wait_for(lambda: "settings changed: batch_size=5000" in log.read_text(), 30, "the coordinator to read it")
        read = time.monotonic()
        wait_for(lambda: migration_row(conn, DB, table).stage == "apply", 3 * TAKEN_UP_S, "the copy's end")
        went_on_s = time.monotonic() - read
        assert went_on_s < TAKEN_UP_S, f"the copy ended {went_on_s:.0f} s after the setting was read"
        wait_for(lambda: waits_on_session(conn, blocker), 60, "the restarted applier waiting on the row lock again")
        query(blocker, "ROLLBACK")
        assert proc.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        blocker.close()
        holder.close()
    assert scalar(conn, f"SELECT c FROM {DB}.{table} WHERE id = 5") == "changed during the copy"
