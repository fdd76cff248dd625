"""`abort` tells the truth and leaves nothing behind: after a swap the metadata never recorded, and after a
kill in the middle of init."""
from __future__ import annotations

import subprocess

import pytest

import migration.init_stage as init_stage
from cli.main import main
from connectors.rest import ConnectClient
from core.db import ServerInfo, qualified, query, scalar
from core.keys import primary_key
from core.spec import MigrationSpec
from core.state import StateStore
from core.stages import Stage, Status
from streams.topics import TopicNames
from tests.integration.helpers import (existing_topics, leftovers, migration_row, owner_of, recorded_migration,
                                       table_columns)

pytestmark = pytest.mark.integration

DB = "abort_truth"


SAMPLE_ROWS = [(1, 10), (2, 20), (3, 30)]


def sample_table(conn, table: str) -> None:
    query(conn, f"DROP TABLE IF EXISTS {DB}.{table}, {DB}.{table}_osc_new, {DB}.{table}_osc_old")
    query(conn, f"CREATE TABLE {DB}.{table} (id INT PRIMARY KEY, v INT)")
    query(conn, f"INSERT INTO {DB}.{table} VALUES " + ", ".join(["(%s, %s)"] * len(SAMPLE_ROWS)),
          tuple(v for row in SAMPLE_ROWS for v in row))


def test_abort_after_a_swap_the_metadata_missed_says_so_and_finishes_the_cleanup(endpoints, conn, capsys):
    """The coordinator died between the RENAME and recording it: the table already has the new schema."""
    with recorded_migration(conn, endpoints, DB, "items", columns="id INT PRIMARY KEY, v INT",
                            rows=SAMPLE_ROWS) as recorded:
        spec, store, migration = recorded.spec, recorded.store, recorded.migration
        init_stage.create_new_table(conn, spec, primary_key(conn, DB, "items"))
        init_stage.start_capture(conn, endpoints, spec, ServerInfo.read(conn), migration)
        store.update(migration.id, stage=Stage.CUTOVER)   # staged: the coordinator reached the cutover
        query(conn, f"INSERT INTO {DB}.items_osc_new SELECT id, v, NULL FROM {DB}.items")
        query(conn, f"RENAME TABLE {qualified(DB, 'items')} TO {qualified(DB, 'items_osc_old')}, "
                    f"{qualified(DB, 'items_osc_new')} TO {qualified(DB, 'items')}")
        query(conn, f"INSERT INTO {DB}.items VALUES (4, 40, 1)")   # the application writes to the new table

        code = main(["abort", "--table", f"{DB}.items"])
        out = capsys.readouterr().out
        assert code == 6, out
        assert "already been swapped" in out and f"{DB}.items_osc_old" in out
        assert "is the original table" not in out and "untouched" not in out
        assert table_columns(conn, DB, "items") == ["id", "v", "x"]
        assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.items") == 4, "the new table and its writes stay in place"
        assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.items_osc_old") == 3, "the original is kept, not dropped"
        row = migration_row(conn, DB, "items")
        assert (row.stage, row.status) == (Stage.DONE, Status.DONE)
        assert not ConnectClient(endpoints.connect_url).exists(migration.connector)
        assert not set(TopicNames(migration.prefix, DB, "items").all()) & set(existing_topics(endpoints.kafka))
        assert leftovers(endpoints, DB, "items") == [f"table {DB}.items_osc_old"]


@pytest.fixture
def killed_after_new_table(endpoints, conn, monkeypatch):
    """Run init and kill it right after it created the new table: the process does no undo."""
    sample_table(conn, "orders")
    spec = MigrationSpec(algorithm="copy", database=DB, table="orders", alter="ADD COLUMN x INT",
                         partitions=2).validate()
    real_create = init_stage.create_new_table
    recorded_first = []

    def create_then_die(conn_, spec_, pk, target=None):
        recorded_first.append(StateStore(conn_, spec_.metadata_schema).active(DB, "orders") is not None)
        real_create(conn_, spec_, pk, target)
        raise KeyboardInterrupt   # SIGKILL: no statement after this one runs
    monkeypatch.setattr(init_stage, "create_new_table", create_then_die)
    monkeypatch.setattr(init_stage, "tear_down", lambda *args, **kwargs: True)
    gone = subprocess.Popen(["true"])
    gone.wait()   # a process of this host that no longer runs: the killed coordinator
    with pytest.raises(KeyboardInterrupt):
        init_stage.run_init(conn, endpoints, spec, ServerInfo.read(conn), owner_of(gone.pid))
    monkeypatch.undo()
    assert recorded_first == [True], "the migration row must exist before the new table"
    assert table_columns(conn, DB, "orders_osc_new") == ["id", "v", "x"]
    row = migration_row(conn, DB, "orders")
    assert (row.stage, row.status) == (Stage.INIT, Status.RUNNING)
    yield spec
    query(conn, f"DROP TABLE IF EXISTS {DB}.orders, {DB}.orders_osc_new, {DB}.orders_osc_old")


def test_a_kill_between_new_table_and_capture_leaves_what_abort_removes(endpoints, conn, capsys,
                                                                         killed_after_new_table):
    code = main(["abort", "--table", f"{DB}.orders"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "is the original table" in out
    assert leftovers(endpoints, DB, "orders") == []
    assert table_columns(conn, DB, "orders") == ["id", "v"]
    assert migration_row(conn, DB, "orders").status == Status.ABORTED


def test_a_kill_between_new_table_and_capture_leaves_what_migrate_starts_over_from(endpoints, conn, capsys,
                                                                                    killed_after_new_table):
    code = main(["migrate", "--algorithm", "copy", "--table", f"{DB}.orders", "--alter", "ADD COLUMN x INT", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert table_columns(conn, DB, "orders") == ["id", "v", "x"]
    assert sorted(query(conn, f"SELECT id, v FROM {DB}.orders")) == [(1, 10), (2, 20), (3, 30)]
    assert leftovers(endpoints, DB, "orders") == [f"table {DB}.orders_osc_old"]   # kept by default
    assert migration_row(conn, DB, "orders").status == Status.DONE
