"""A server whose settings would let the application's writes run before the cutover's RENAME is refused: before
anything is made, and again before the swap when the setting is lowered while the migration runs. The oracle is
the writers' own record of acknowledged writes (tests/integration/ledger.py).

With `max_write_lock_count = 1` and no check, the repeated-swaps test (test_acknowledged_writes.py) lost acknowledged
increments on MariaDB 10.11: the server granted the waiting writes before the waiting RENAME at the unlock.
"""
from __future__ import annotations

import pytest

from cutover import move as move_module
from cutover import swap as swap_module
from core.db import query
from core.spec import MigrationSpec
from core.swap_preconditions import MIN_WRITE_LOCK_COUNT, check_swap_settings
from migration.coordination import MigrationStopped
from migration.runner import Runner
from monitor.progress import Progress
from tests.integration.helpers import (cli, fresh_ledger_table, latest_migration_id, leftovers, migration_row,
                                       table_columns, target_schema, waiting_for_cutover)
from tests.integration.ledger import Ledger

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]   # alone: it lowers server settings every migration reads

DB = "swap_settings"
MOVED_DB = "swap_settings_moved"   # the schema on the target server


@pytest.fixture
def lowered(conn):
    """A function lowering the server's max_write_lock_count (global: any other user of the server meets it while
    the test runs); the value it had is set back after the test."""
    if not query(conn, "SELECT VERSION() LIKE '%MariaDB%'")[0][0]:
        pytest.skip("MySQL renames inside the lock session: max_write_lock_count does not decide the swap there")
    original = int(query(conn, "SELECT @@GLOBAL.max_write_lock_count")[0][0])
    yield lambda value: query(conn, "SET GLOBAL max_write_lock_count = %s", (value,))
    if original >= MIN_WRITE_LOCK_COUNT:
        query(conn, "SET GLOBAL max_write_lock_count = %s", (original,))
    else:   # a low value left by an interrupted run of this module: every migration would be refused
        query(conn, "SET GLOBAL max_write_lock_count = DEFAULT")


def test_a_server_letting_writes_pass_the_rename_is_refused_before_anything_is_made(endpoints, conn, lowered):
    table = "refused"
    fresh_ledger_table(conn, DB, table, rows=1_000, writers=2)
    before = latest_migration_id(conn, DB, table)
    lowered(1)
    result = cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note INT NULL")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "max_write_lock_count is 1" in result.stderr
    assert latest_migration_id(conn, DB, table) == before
    assert leftovers(endpoints, DB, table) == []
    assert "note" not in table_columns(conn, DB, table)


def test_a_setting_lowered_during_the_migration_stops_it_before_the_swap_and_loses_no_write(endpoints, conn, lowered,
                                                                                             cli_log):
    table = "lowered_later"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=8)
    with Ledger(endpoints.mysql, DB, table, writers=8, seed=7) as ledger:
        proc = waiting_for_cutover(conn, DB, table, "--alter", "ADD COLUMN note INT NULL", "--partitions", "4",
                                   log=cli_log)
        try:
            ledger.wait_for_writes(200)
            lowered(1)
            refused = cli("cutover", "--table", f"{DB}.{table}")
            assert proc.wait(120) == 3, cli_log.read_text()[-3000:]
        finally:
            proc.kill()
            proc.wait(30)
        assert refused.returncode == 3, refused.stderr[-3000:]
        assert "max_write_lock_count is 1" in refused.stderr
        assert "note" not in table_columns(conn, DB, table)   # not swapped: the original is in place
        ledger.wait_for_writes(200)
        query(conn, "SET GLOBAL max_write_lock_count = DEFAULT")
        done = cli("cutover", "--table", f"{DB}.{table}")
        assert done.returncode == 0, done.stderr[-3000:]
        ledger.wait_for_writes(200)   # writes after the swap count as much as any other
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    assert "note" in table_columns(conn, DB, table)
    assert migration_row(conn, DB, table).stage == "done"


@pytest.mark.parametrize("move", [False, True], ids=["same_server", "moved_to_another_server"])
def test_a_setting_lowered_after_the_attempt_began_is_caught_inside_the_lock_before_the_rename(
        endpoints, conn, lowered, monkeypatch, move):
    """The attempt's first check passes; the setting is lowered right after it, while the attempt catches up and
    locks: the check inside the lock, just before the RENAME is queued, must refuse it."""
    table = f"lowered_in_attempt_{int(move)}"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=4)
    cutover_class = move_module.MoveCutover if move else swap_module.Cutover
    calls: list[str] = []   # every check, and every attempt
    check_now, attempt_now = check_swap_settings, cutover_class.attempt

    def check_then_lower(lock_conn, is_mariadb):
        calls.append("check")
        check_now(lock_conn, is_mariadb)
        if calls.count("check") == 1:
            lowered(1)

    def counted_attempt(self, *args):
        calls.append("attempt")
        return attempt_now(self, *args)

    for module in (swap_module, move_module):   # a move's first check is the one it shares with the swap
        monkeypatch.setattr(module, "check_swap_settings", check_then_lower)
    monkeypatch.setattr(cutover_class, "attempt", counted_attempt)
    if move:
        monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)
    spec = MigrationSpec(algorithm="copy", database=DB, table=table, alter="ADD COLUMN note INT NULL", copy_workers=2,
                         apply_workers=2, chunk_size=5_000, partitions=4, max_lag_events=200, target_server=move,
                         target_table=f"{MOVED_DB}.{table}" if move else "").validate()
    with target_schema(endpoints, move, MOVED_DB) as target:
        with Ledger(endpoints.mysql, DB, table, writers=4, seed=11) as ledger:
            ledger.wait_for_writes(200)
            with pytest.raises(MigrationStopped, match="max_write_lock_count is 1"):
                Runner(endpoints, spec, Progress(quiet=True)).run()
            # one attempt: its first check passed, the one inside the lock refused (not a later attempt's first)
            assert calls == ["attempt", "check", "check"]
            original = table_columns(conn, DB, table)
            assert original and "note" not in original   # the original, in place
            assert not table_columns(conn, DB, f"{table}_osc_old")   # nothing renamed
            monkeypatch.undo()
            if move:
                monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)
            if not move:   # the resume's warning is the runner's, whatever the cutover: said once, here
                warned = cli("resume", "--table", f"{DB}.{table}")   # said at once, refused again at the cutover
                assert warned.returncode == 3, warned.stderr[-3000:]
                assert "warning: the cutover will refuse unless this changes first: max_write_lock_count is 1" in \
                    warned.stdout + warned.stderr
            query(conn, "SET GLOBAL max_write_lock_count = DEFAULT")
            done = cli("resume", "--table", f"{DB}.{table}")
            assert done.returncode == 0, done.stderr[-3000:]
            if not move:   # a moved table's source is renamed away: later writes to it fail, as they must
                ledger.wait_for_writes(200)   # writes after the swap count as much as any other
        ledger.assert_kept(conn, (target, (MOVED_DB, table)) if target is not None else None)
        if target is None:
            assert "note" in table_columns(conn, DB, table)
