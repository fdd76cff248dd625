"""Instant when the server can (--algorithm auto, migration/instant_stage.py): an ALTER the server makes instantly
is made on the table itself, under writers, with nothing else created and every acknowledged write kept; one it
cannot make instantly is copied as before; a transaction holding the table makes the try wait without holding the
application's writes longer than the lock-wait timeout; a dry run names the path it expects and creates nothing;
several --table are one clear refusal."""
from __future__ import annotations

from collections.abc import Callable
import io
import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from core.db import connect, qualified, query
from core.endpoints import Endpoints
from core.spec import MigrationSpec
from cutover import blocker_wait
from migration import instant_stage
from migration.runner import Runner
from monitor.metrics import MigrationMetrics
from monitor.progress import Progress
from tests.integration.helpers import (cli, fresh_ledger_table, latest_migration_id, leftovers, migration_row,
                                       status_doc, table_columns, wait_for)
from tests.integration.ledger import Ledger

pytestmark = pytest.mark.integration

DB = "instant"
WRITERS = 4
LOCK_WAIT_S = 0.5
WRITE_BOUND_S = 1.5   # a write may wait one try (0.5 s) behind the tool, plus a busy 2-core machine's delays


def spec_for(table: str, alter: str = "ADD COLUMN note VARCHAR(32) NULL", **options) -> MigrationSpec:
    return MigrationSpec(database=DB, table=table, alter=alter, copy_workers=2, apply_workers=2, chunk_size=5_000,
                         partitions=2, keep_old=False, lock_wait_s=LOCK_WAIT_S, **options).validate()


def rows_since(conn, table: str, after_id: int) -> list[tuple]:
    """(stage, status, path) of every migration of the table recorded after `after_id`."""
    return [(stage, status, json.loads(options).get("path")) for stage, status, options in query(
        conn, "SELECT stage, status, options FROM stream_osc.migrations WHERE db=%s AND tbl=%s AND id > %s "
              "ORDER BY id", (DB, table, after_id))]


class HeldTransaction(threading.Thread):
    """An application session with a transaction open on the table (it read a few rows), committed once `end()`
    is called; `closed_at` is when (wall clock)."""

    def __init__(self, endpoints: Endpoints, table: str) -> None:
        super().__init__(daemon=True)
        self.conn = connect(endpoints.mysql)
        self.connection_id = self.conn.thread_id()
        query(self.conn, "BEGIN")
        query(self.conn, f"SELECT * FROM {qualified(DB, table)} WHERE id > 100 LIMIT 3")
        self.opened_at, self.closed_at = time.time(), 0.0
        self.ended = threading.Event()
        self.outcome = ""

    def end(self) -> None:
        self.ended.set()

    def run(self) -> None:
        self.ended.wait(120)
        try:
            query(self.conn, "COMMIT")
            self.outcome = "committed"
        finally:
            self.closed_at = time.time()
            self.conn.close()


def test_an_instant_add_column_under_writers_is_the_change_and_makes_nothing_else(endpoints, conn, caplog):
    table = "added"
    fresh_ledger_table(conn, DB, table, rows=50_000, writers=WRITERS)
    before = latest_migration_id(conn, DB, table)
    out, metrics = io.StringIO(), MigrationMetrics(f"{DB}.{table}")
    caplog.set_level("INFO", logger="stream_osc.runner")
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=21) as ledger:
        ledger.wait_for_writes(300)
        started = time.time()
        assert Runner(endpoints, spec_for(table), Progress(stream=out), metrics=metrics).run() == 0
        finished = time.time()
        ledger.wait_for_writes(300)
    progress = out.getvalue()
    print(f"instant in {finished - started:.2f} s; writers' worst latency meanwhile "
          f"{ledger.worst_latency(started, finished):.3f} s\n{progress}")
    assert "the server made the change instantly (ALGORITHM=INSTANT" in progress.splitlines()[-1]
    assert "note" in table_columns(conn, DB, table)
    assert rows_since(conn, table, before) == [("done", "done", "instant")]
    assert leftovers(endpoints, DB, table) == []   # no helper table, connector, topic, fence or capture table
    ledger.assert_kept(conn)
    assert ledger.worst_latency(started, finished) < WRITE_BOUND_S
    assert metrics.registry.get_sample_value("stream_osc_path_info", {"table": f"{DB}.{table}",
                                                                      "path": "instant"}) == 1
    assert [r.fields.get("path") for r in caplog.records if r.getMessage() == "path"] == ["instant"]
    doc = status_doc(DB, table)
    assert (doc["path"], doc["path_reason"], doc["stage"], doc["state"]) == ("instant", None, "done", "done")


def test_a_change_the_server_cannot_make_instantly_is_copied_as_before(endpoints, conn):
    table = "retyped"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=2)
    before = latest_migration_id(conn, DB, table)
    out = io.StringIO()
    with Ledger(endpoints.mysql, DB, table, writers=2, seed=22) as ledger:
        ledger.wait_for_writes(100)
        assert Runner(endpoints, spec_for(table, "MODIFY seq BIGINT NOT NULL"), Progress(stream=out)).run() == 0
        ledger.wait_for_writes(100)
    progress = out.getvalue()
    print(progress)
    assert "init: copying (the server cannot make this change instantly" in progress
    assert "cutover: swapped" in progress and progress.splitlines()[-1].startswith(f"done: {DB}.{table} has the new")
    assert query(conn, "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                       "AND COLUMN_NAME='seq'", (DB, table))[0][0] == "bigint"
    assert rows_since(conn, table, before) == [("done", "done", "copy")]
    assert "server error 184" in migration_row(conn, DB, table).path_reason   # 1845 or 1846, the server's words
    ledger.assert_kept(conn)
    assert leftovers(endpoints, DB, table) == []


def migrate_beside_held(endpoints, conn, table: str, spec: MigrationSpec,
                        release_after: Callable[[str, HeldTransaction], bool], hold_s: float, seed: int,
                        before_holding: Callable[[], None] = lambda: None
                        ) -> tuple[HeldTransaction, Ledger, str, float]:
    """Migrate `table` with `spec` under the writers while an application transaction holds it, ended `hold_s` after
    `release_after(progress text, transaction)` first holds: (that transaction, the writers' ledger, the progress
    text, the writers' worst latency while it was held)."""
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=WRITERS)
    held = HeldTransaction(endpoints, table)
    out = io.StringIO()
    releaser = threading.Thread(daemon=True, target=lambda: (
        wait_for(lambda: release_after(out.getvalue(), held), 60, "the instant try to meet the holder"),
        time.sleep(hold_s), held.end()))
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=seed) as ledger:
        ledger.wait_for_writes(200)
        before_holding()
        held.start()
        releaser.start()
        try:
            assert Runner(endpoints, spec, Progress(stream=out)).run() == 0
        finally:
            held.end()
        ledger.wait_for_writes(200)
    held.join()
    releaser.join()
    worst = ledger.worst_latency(held.opened_at, held.closed_at)
    print(f"writers' worst latency while the table was held: {worst:.3f} s\n{out.getvalue()}")
    return held, ledger, out.getvalue(), worst


def test_a_transaction_holding_the_table_is_waited_for_without_holding_the_writers(endpoints, conn):
    """Seen holding the table, the transaction is waited for with nothing asked of the server; the change is made
    once it ends."""
    table = "held"
    held, ledger, _, worst = migrate_beside_held(
        endpoints, conn, table, spec_for(table),
        lambda out, held: f"init: waiting for connection {held.connection_id}" in out, hold_s=2.0, seed=23,
        before_holding=lambda: time.sleep(1.2))   # held for over a second: a holder, not a passing statement
    assert held.outcome == "committed"
    migration = migration_row(conn, DB, table)
    assert (migration.stage, migration.path) == ("done", "instant")
    assert migration.cutover_at >= held.closed_at - 0.5, "changed while the transaction held the table"
    assert worst < WRITE_BOUND_S, f"a write waited {worst:.2f} s while the instant try waited for the holder"
    ledger.assert_kept(conn)
    assert leftovers(endpoints, DB, table) == []


def test_a_holder_the_look_misses_holds_each_write_at_most_one_bounded_try(endpoints, conn, monkeypatch):
    """A holder no look finds (the look is made blind here): every try queues in front of the writers, and gives
    up after --lock-wait-timeout; tries and attempts go on until the transaction ends, and the change is made."""
    table = "unseen"
    monkeypatch.setattr(instant_stage, "find_blockers", lambda *args, **kwargs: [])
    monkeypatch.setattr(blocker_wait, "find_blockers", lambda *args, **kwargs: [])
    held, ledger, _, worst = migrate_beside_held(
        endpoints, conn, table, spec_for(table, lock_tries=2, cutover_attempts=3),
        lambda out, held: "trying again in" in out, hold_s=0.0, seed=24)
    assert worst >= 0.2, "no write queued behind a try: the try did not wait for the holder"
    assert worst < WRITE_BOUND_S, f"a write waited {worst:.2f} s behind one try of {LOCK_WAIT_S} s"
    assert (migration_row(conn, DB, table).path, held.outcome) == ("instant", "committed")
    ledger.assert_kept(conn)
    assert leftovers(endpoints, DB, table) == []


@pytest.mark.parametrize("alter, expected, table", [
    ("ADD COLUMN note INT NULL", "dry run: expected path instant", "dry_added"),
    ("MODIFY seq BIGINT NOT NULL", "dry run: expected path copy (the server cannot make this change instantly",
     "dry_retyped"),
])
def test_a_dry_run_names_the_path_it_expects_and_creates_nothing(endpoints, conn, alter, expected, table):
    fresh_ledger_table(conn, DB, table, rows=100, writers=1)
    before = latest_migration_id(conn, DB, table)
    columns = table_columns(conn, DB, table)
    done = cli("migrate", "--table", f"{DB}.{table}", "--alter", alter, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert expected in done.stderr and f"an empty copy of {DB}.{table}" in done.stderr, done.stderr
    if expected.endswith("path instant"):
        assert "the table itself can differ" in done.stderr
    assert table_columns(conn, DB, table) == columns
    assert latest_migration_id(conn, DB, table) == before
    assert leftovers(endpoints, DB, table) == []


def test_two_tables_are_one_clear_refusal_with_nothing_made(endpoints, conn):
    tables = ("first", "second")
    for table in tables:
        fresh_ledger_table(conn, DB, table, rows=10, writers=1)
    before = [latest_migration_id(conn, DB, table) for table in tables]
    done = cli("migrate", "--table", f"{DB}.first", "--table", f"{DB}.second", "--alter", "ADD COLUMN c INT")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--table given more than once" in lines[0], done.stderr
    assert "MariaDB" in lines[0] and "metadata-lock queue" in lines[0]
    assert [latest_migration_id(conn, DB, table) for table in tables] == before
    assert all(leftovers(endpoints, DB, table) == [] and "c" not in table_columns(conn, DB, table)
               for table in tables)


def test_a_change_the_server_would_rebuild_for_is_copied_not_tried_on_the_table(endpoints, conn):
    """MariaDB takes ORDER BY with ALGORITHM=INSTANT and rebuilds the table: that would be a copy under the table's
    lock, in front of the application. The empty copy's new table id tells it before the table is touched."""
    table = "reordered"
    fresh_ledger_table(conn, DB, table, rows=2_000, writers=2)
    out = io.StringIO()
    assert Runner(endpoints, spec_for(table, "ORDER BY seq"), Progress(stream=out)).run() == 0
    assert "init: copying (the server rebuilds the table for this ALTER although asked for ALGORITHM=INSTANT" \
        in out.getvalue(), out.getvalue()
    assert migration_row(conn, DB, table).path == "copy"
    assert leftovers(endpoints, DB, table) == []


KILLED_AT_DONE = """
import os, signal, sys
from migration import instant_stage
def killed(self, migration):   # the server made the change; the row is not marked done yet
    os.kill(os.getpid(), signal.SIGKILL)
instant_stage.InstantStage._done = killed
from cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_coordinator_killed_after_the_server_made_the_change_is_resumed_as_done(endpoints, conn):
    """SIGKILL right after the ALTER … ALGORITHM=INSTANT returned, before the row says done: `resume` finds the table
    as the ALTER makes it and records the migration done, instead of trying the ALTER again (the server would
    refuse a column it already has) or starting a copy."""
    table = "killed_instant"
    fresh_ledger_table(conn, DB, table, rows=2_000, writers=2)
    before = latest_migration_id(conn, DB, table)
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_DONE, "migrate", "--table", f"{DB}.{table}", "--alter",
                             "ADD COLUMN note VARCHAR(32) NULL", "--quiet"], capture_output=True, text=True,
                            timeout=300, stdin=subprocess.DEVNULL)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert "note" in table_columns(conn, DB, table)
    assert rows_since(conn, table, before) == [("init", "running", None)]
    resumed = cli("resume", "--table", f"{DB}.{table}")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "the server made the change instantly before the coordinator that asked for it was stopped" in resumed.stderr
    assert rows_since(conn, table, before) == [("done", "done", "instant")]
    assert table_columns(conn, DB, table).count("note") == 1
    assert leftovers(endpoints, DB, table) == []
