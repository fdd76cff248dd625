"""--defer-indexes: the copy runs without the non-unique secondary indexes, and the swapped-in table ends with
exactly the indexes the ALTER gives the table, whatever kill and resume happened in between.

The oracle of the indexes is a reference table made before the migration by `CREATE TABLE … LIKE` the original
plus the same ALTER, compared through information_schema.STATISTICS; the oracle of the data is the writers'
ledger of acknowledged writes.
"""
from __future__ import annotations

import signal

import pytest

from cli.main import main
from core.db import STATEMENT_TAG, qualified, query, scalar
from core.deferred_indexes import DEFERRED_INDEXES_OPTION
from core.spec import helper_table_name
from core.state import StateStore
from tests.integration.helpers import (chunk_progress, cli, db_conn, fresh_ledger_table, latest_migration_id, leftovers,
                                       migration_row, new_migration_row, start_cli, wait_for)
from tests.integration.ledger import Ledger

pytestmark = pytest.mark.integration

DB = "defer_idx"
ROWS = 24_000   # enough for the copy to be caught mid-way
WRITERS = 4
# The original's secondary indexes: composite, prefix, descending with a comment, ignored, full-text, unique.
INDEXES = ("ADD KEY payload_prefix (payload(8)), ADD KEY seq_counter (seq, counter DESC) COMMENT 'newest first', "
           "ADD KEY counter_ignored (counter) IGNORED, ADD FULLTEXT KEY payload_words (payload), "
           "ADD UNIQUE KEY seq_writer (seq, writer)")
ALTER = "ADD COLUMN note VARCHAR(32) NULL, ADD KEY note_writer (note, writer), DROP KEY counter_ignored"
DEFERRED = {"note_writer", "payload_prefix", "payload_words", "seq_counter", "writer_seq"}
OPTIONS = ["--defer-indexes", "--copy-workers", "1", "--chunk-size", "2000", "--batch-size", "200",
           "--target-batch-time", "0", "--partitions", "2", "--apply-workers", "2", "--max-lag", "0", "--drop-old"]


def index_statistics(conn, db: str, table: str) -> list[tuple]:
    """Every column of every index as STATISTICS describes it, with the ignored/visible attribute the server has."""
    visibility = [c for (c,) in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                                            "TABLE_SCHEMA='information_schema' AND TABLE_NAME='STATISTICS' AND "
                                            "COLUMN_NAME IN ('IGNORED', 'IS_VISIBLE')")]
    return query(conn, "SELECT INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, SUB_PART, NON_UNIQUE, INDEX_TYPE, COLLATION, "
                       f"INDEX_COMMENT{''.join(', ' + c for c in visibility)} FROM information_schema.STATISTICS "
                       "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX", (db, table))


def index_names(conn, db: str, table: str) -> set[str]:
    return {row[0] for row in index_statistics(conn, db, table)}


def ledger_table_with_indexes(conn, table: str, rows: int) -> str:
    """The ledger table with INDEXES, and its reference: the same table with the ALTER applied directly."""
    fresh_ledger_table(conn, DB, table, rows=rows, writers=WRITERS)
    query(conn, f"ALTER TABLE {qualified(DB, table)} {INDEXES}")
    reference = f"{table}_ref"
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, reference)}")
    query(conn, f"CREATE TABLE {qualified(DB, reference)} LIKE {qualified(DB, table)}")
    query(conn, f"ALTER TABLE {qualified(DB, reference)} {ALTER}")
    return reference


def test_deferred_indexes_end_exactly_as_the_alter_defines_them_after_a_kill_during_copy(endpoints, cli_log):
    table = "kill_copy"
    conn = db_conn(endpoints)
    reference = ledger_table_with_indexes(conn, table, ROWS)
    earlier = latest_migration_id(conn, DB, table)
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=16) as ledger:
        proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, *OPTIONS, log=cli_log)
        try:
            migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
            wait_for(lambda: 0 < chunk_progress(conn, migration.id)[0] < ROWS // 2, 60, "a partly done copy")
            # mid-copy the new table holds only its primary and unique keys
            assert index_names(conn, DB, helper_table_name(table, "new")) == {"PRIMARY", "seq_writer"}
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert {i["name"] for i in migration_row(conn, DB, table).options[DEFERRED_INDEXES_OPTION]} == DEFERRED
        result = cli("resume", "--table", f"{DB}.{table}")
        assert result.returncode == 0, result.stderr[-5000:]
        ledger.wait_for_writes(200)   # writes after the swap count as much as any other
    assert (migration_row(conn, DB, table).stage, migration_row(conn, DB, table).status) == ("done", "done")
    assert index_statistics(conn, DB, table) == index_statistics(conn, DB, reference)
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    assert leftovers(endpoints, DB, table) == []


def index_builds(conn, db: str, new_table: str) -> dict[int, str]:
    """{connection id: state} of the sessions running an ALTER TABLE of the new table."""
    building = f"{STATEMENT_TAG}ALTER TABLE `{db}`.`{new_table}` ADD %"
    return {pid: state for pid, state in query(conn, "SELECT ID, STATE FROM information_schema.PROCESSLIST WHERE "
                                                     "INFO LIKE %s", (building,))}


def test_kills_during_init_and_the_index_build_end_with_exactly_the_missing_indexes_added(endpoints, cli_log):
    """Killed during init, the migration is started over by `resume` (which has no --defer-indexes) still deferring.
    Then the coordinator is killed while its index build waits (a session holds the new table's metadata lock),
    and some deferred indexes are added meanwhile, as after a kill once a build had run: the resumed run must add
    exactly the missing ones, and the table end with exactly the ALTER's indexes."""
    table = "kill_build"
    new_table = helper_table_name(table, "new")
    conn, blocker = db_conn(endpoints), db_conn(endpoints)
    reference = ledger_table_with_indexes(conn, table, 5_000)
    StateStore(conn, "stream_osc").ensure_schema()
    earlier = latest_migration_id(conn, DB, table)
    with Ledger(endpoints.mysql, DB, table, writers=2, seed=17) as ledger:
        query(blocker, "LOCK TABLES stream_osc.chunks READ")   # init ends by writing the copy plan: held there
        proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, *OPTIONS, log=cli_log)
        try:
            killed_in_init = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
            wait_for(lambda: scalar(conn, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE "
                                          "'%%INSERT%%stream_osc%%chunks%%'"), 60, "init waiting to write the plan")
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            query(blocker, "UNLOCK TABLES")
            proc = start_cli("resume", "--table", f"{DB}.{table}", log=cli_log)
            wait_for(lambda: getattr(new_migration_row(conn, DB, table, killed_in_init.id), "stage", "") == "copy", 60,
                     "the copy stage of the migration started over")
            query(blocker, "BEGIN")
            query(blocker, f"SELECT COUNT(*) FROM {qualified(DB, new_table)} WHERE id = 1")   # holds its MDL
            wait_for(lambda: index_builds(conn, DB, new_table), 120, "the index build")
            assert migration_row(conn, DB, table).stage == "indexes"
            assert index_names(conn, DB, new_table) == {"PRIMARY", "seq_writer"}
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            wait_for(lambda: not index_builds(conn, DB, new_table), 30, "the killed run's ALTER to end")
        finally:
            query(blocker, "ROLLBACK")
            query(blocker, "UNLOCK TABLES")
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        recorded = migration_row(conn, DB, table).options[DEFERRED_INDEXES_OPTION]
        query(conn, f"ALTER TABLE {qualified(DB, new_table)} " + ", ".join(f"ADD {i['clause']}" for i in recorded[:2]))
        result = cli("resume", "--table", f"{DB}.{table}")
        assert result.returncode == 0, result.stderr[-5000:]
        ledger.wait_for_writes(200)
    assert (migration_row(conn, DB, table).stage, migration_row(conn, DB, table).status) == ("done", "done")
    assert index_statistics(conn, DB, table) == index_statistics(conn, DB, reference)
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    assert leftovers(endpoints, DB, table) == []


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_defer_indexes_with_no_index_to_defer_is_refused_and_changes_nothing(endpoints, capsys, extra):
    """Only PRIMARY and UNIQUE keys after the ALTER: the option would do nothing, and says so."""
    conn = db_conn(endpoints)
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {DB}.only_unique")
    query(conn, f"CREATE TABLE {DB}.only_unique (id INT PRIMARY KEY, a INT, b INT, KEY b (b), UNIQUE KEY a (a))")
    code = main(["migrate", "--table", f"{DB}.only_unique", "--alter", "DROP KEY b", "--defer-indexes", "--quiet",
                 *extra])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("stream-osc: error: --defer-indexes: ") and "no non-unique secondary index" in err
    assert leftovers(endpoints, DB, "only_unique") == []
    assert index_names(conn, DB, "only_unique") == {"PRIMARY", "a", "b"}
