"""Rows and columns must not vanish at the swap: DDL on the source, triggers, id 0, unsigned BIGINT keys at
their limits, the AUTO_INCREMENT position, sessions still writing statement-based binlog.

Each test is named after the guarantee it attacks. Data tests check the final table against what the
application was told (its own writes), not against the tool's idea of the swap.
"""
from __future__ import annotations

import threading

import pytest

from applier.table import load_pair
from cutover.swap import Cutover
from migration.context import RunContext
from migration.cli import main
from migration.db import ServerInfo, query, scalar
from migration.runner import Runner
from migration.spec import MigrationSpec, helper_table_name
from migration.state import SourceChanged, StateStore
from migration.traffic import create_sample_table
from monitor.progress import Progress
from tests.integration.helpers import cli, db_conn, leftovers, migration_row, wait_for

pytestmark = pytest.mark.integration

DB = "vanish"


@pytest.fixture
def conn(endpoints):
    conn = db_conn(endpoints)
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    yield conn
    conn.close()


def spec_for(table: str, alter: str, **options) -> MigrationSpec:
    settings = {"copy_workers": 1, "apply_workers": 1, "chunk_size": 2_000, "batch_size": 200, "partitions": 2,
                "keep_old": False, "max_lag_events": 50}
    settings.update(options)
    return MigrationSpec(database=DB, table=table, alter=alter, **settings).validate()


def fresh(conn, table: str) -> None:
    """Whatever an earlier, interrupted run of a test left of db.table's migration is removed."""
    cli("abort", "--table", f"{DB}.{table}")
    for role in ("new", "old"):
        query(conn, f"DROP TABLE IF EXISTS {DB}.{helper_table_name(table, role)}")


class RunnerThread(threading.Thread):
    """A migration running in the background; keeps its result or its exception."""

    def __init__(self, endpoints, spec: MigrationSpec) -> None:
        super().__init__(daemon=True)
        self.runner = Runner(endpoints, spec, Progress(quiet=True))
        self.result: int | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.runner.run()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.error = exc


# 1. DDL on the source ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, ddl, change", [
    ("add", "ALTER TABLE {t} ADD COLUMN extra INT NOT NULL DEFAULT 7", "column extra added (int(11) NOT NULL DEFAULT 7)"),
    ("drop", "ALTER TABLE {t} DROP COLUMN legacy", "column legacy dropped"),
    ("trigger", "CREATE TRIGGER {t}_audit BEFORE UPDATE ON {t} FOR EACH ROW SET NEW.note = 'audited'",
     "trigger ddl_trigger_audit added (BEFORE UPDATE)"),
])
def test_ddl_on_the_source_during_the_migration_stops_it_with_the_original_untouched(endpoints, conn, kind, ddl,
                                                                                      change):
    table = f"ddl_{kind}"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=20_000, seed=3)
    run = RunnerThread(endpoints, spec_for(table, "ADD INDEX c_idx (c)", batch_size=100))
    run.start()
    wait_for(lambda: (row := migration_row(conn, DB, table)) is not None and row.stage == "copy"
             and scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND next_pk > start_pk",
                        (row.id,)), 60, "the copy under way")
    query(conn, ddl.format(t=f"{DB}.{table}"))
    run.join(120)
    assert not run.is_alive()
    assert isinstance(run.error, SourceChanged), (run.result, run.error)
    assert f"table {DB}.{table} was altered during the migration" in str(run.error)
    assert change in str(run.error)
    assert migration_row(conn, DB, table).error == str(run.error)   # `status` shows why
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table}") == 20_000
    assert scalar(conn, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s AND "
                        "TABLE_NAME=%s AND INDEX_NAME='c_idx'", (DB, table)) == 0
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def test_ddl_on_the_source_before_the_lock_is_caught_inside_the_cutover_lock(endpoints, conn):
    table = "ddl_at_lock"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=3_000, seed=4)
    spec = spec_for(table, "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0", cutover="manual")
    assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0          # in sync, waiting for cutover
    query(conn, f"ALTER TABLE {DB}.{table} ADD COLUMN extra VARCHAR(10) NULL")   # after the last health check
    query(conn, f"UPDATE {DB}.{table} SET extra = 'kept' WHERE id <= 10")
    migration = StateStore(conn, spec.metadata_schema).active(DB, table)
    ctx = RunContext(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table, "id"))
    with pytest.raises(SourceChanged, match=f"table {DB}.{table} was altered.*column extra added"):
        Cutover(ctx, ServerInfo.read(conn).is_mariadb).attempt(spec.cutover_window_s)
    columns = [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                                         "AND TABLE_NAME=%s", (DB, table))]
    assert "extra" in columns and "flag" not in columns                       # not swapped
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table} WHERE extra = 'kept'") == 10
    assert query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                 (DB, spec.old_table)) == []                                  # the sentry is gone
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table}") == 3_000
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


# 2. triggers ---------------------------------------------------------------------------------------
def test_triggers_are_not_left_behind_on_the_old_table(endpoints, conn, capsys):
    table = "with_trigger"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=100, seed=5)
    query(conn, f"CREATE TRIGGER {DB}.{table}_bi BEFORE INSERT ON {DB}.{table} FOR EACH ROW SET NEW.k = NEW.k + 1")
    query(conn, f"CREATE TRIGGER {DB}.{table}_ad AFTER DELETE ON {DB}.{table} FOR EACH ROW SET @deleted = OLD.id")
    code = main(["migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN flag INT NULL", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"table {DB}.{table} has triggers ({table}_ad, {table}_bi)" in err
    assert leftovers(endpoints, DB, table) == []
    assert scalar(conn, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA=%s "
                        "AND EVENT_OBJECT_TABLE=%s", (DB, table)) == 2
