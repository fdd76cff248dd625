"""Resumable by construction: the coordinating process is killed (SIGKILL) in each stage, then resumed.

Each stage is held open by a real obstacle rather than by timing: copy is long enough to be caught
mid-way, an applier waits on a row lock, a paused migration waits at the start of validation, and
cutover waits for a transaction holding the table's metadata lock to end.
"""
from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from applier.chunks import LEASE_MS
from connectors.rest import ConnectClient
from cutover.compare import compare_tables
from cutover.swap import SENTRY_COMMENT
from core import redis_keys
from core.db import query, scalar
from core.state import StateStore
from core.state_records import Migration
from streams.topics import TopicNames, delete_topics
from tests.integration.helpers import (HELD_COPY, chunk_progress, cli, db_conn, fresh_table, hold_apply_open,
                                       latest_migration_id, leftovers, migration_row, new_migration_row, start_cli,
                                       status_doc, table_is_original, wait_for, waiting_without_coordinator)
from core.spec import helper_table_name

pytestmark = pytest.mark.integration

DB = "resume"
ROWS = 60_000
ALTER = "MODIFY k BIGINT NOT NULL DEFAULT 0, ADD COLUMN flag TINYINT NOT NULL DEFAULT 1"
OPTIONS = ["--copy-workers", "2", "--chunk-size", "5000", "--batch-size", "500", "--target-batch-time", "0",
           "--partitions", "4",
           "--max-lag", "0", "--cutover-window", "2", "--apply-workers", "1"]


def rows_written(conn) -> int:
    """The server's own count of row writes into tables (Handler_write; temporary tables count apart)."""
    return int(query(conn, "SHOW GLOBAL STATUS LIKE 'Handler_write'")[0][1])


def statements_on(conn, table: str) -> int:
    """How many other sessions are running a statement that names `table`."""
    return int(scalar(conn, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() "
                            "AND INFO LIKE %s", (f"%{table}%",)))


def cutover_waits_for(db: str, table: str, connection_id: int) -> bool:
    """True while `status` shows the cutover waiting for that session to stop holding the table."""
    return any(b["connection_id"] == connection_id for b in status_doc(db, table).get("blockers") or [])


# a kill in apply and in validate: in the slow suite (make test-slow); init, copy and cutover run in every make test
@pytest.mark.parametrize("stage", ["init", "copy", pytest.param("apply", marks=pytest.mark.slow),
                                   pytest.param("validate", marks=pytest.mark.slow), "cutover"])
@pytest.mark.exclusive   # the server's own count of row writes is its measure: every test's writes are in it
def test_killed_coordinator_resumes_without_copying_twice(endpoints, cli_log, stage):
    table = f"kill_{stage}"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=ROWS, seed=3)
    blocker = db_conn(endpoints)
    StateStore(conn, "stream_osc").ensure_schema()
    if stage == "init":
        query(blocker, "LOCK TABLES stream_osc.chunks READ")
    earlier = latest_migration_id(conn, DB, table)
    manual = ["--cutover", "manual"] if stage == "cutover" else []
    held = HELD_COPY if stage in ("apply", "validate") else ()
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, *OPTIONS, *manual, *held, log=cli_log)
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        if stage == "init":
            # init ends by writing the copy plan; our read lock on the chunk table holds it there
            wait_for(lambda: scalar(conn, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE "
                                          "'%%INSERT%%stream_osc%%chunks%%'"), 60, "init waiting to write the plan")
        elif stage == "copy":
            wait_for(lambda: 0 < chunk_progress(conn, migration.id)[0] < ROWS // 2, 60, "a partly done copy")
        elif stage in ("apply", "validate"):
            hold_apply_open(endpoints, conn, blocker, DB, table, migration.id)
            if stage == "validate":
                assert cli("pause", "--table", f"{DB}.{table}").returncode == 0
                query(blocker, "ROLLBACK")
                wait_for(lambda: migration_row(conn, DB, table).stage == "validate", 60, "stage validate")
        else:
            # In sync and waiting for `cutover`, the coordinator applying; then a transaction that reads the table
            # holds its metadata lock, `cutover` asks the coordinator, which waits (requesting no lock) for it.
            wait_for(lambda: migration_row(conn, DB, table).status == "waiting" or proc.poll() is not None, 180,
                     "the migration to wait for its cutover")
            assert proc.poll() is None, "migrate --cutover manual exited instead of waiting"
            query(blocker, "BEGIN")
            query(blocker, f"SELECT COUNT(*) FROM {DB}.{table} WHERE id < 10")
            asking = start_cli("cutover", "--table", f"{DB}.{table}", log=cli_log)
            wait_for(lambda: cutover_waits_for(DB, table, blocker.thread_id()), 120, "cutover waiting for the blocker")
            asking.kill()   # before the coordinator: else it would take the cutover over
            asking.wait(30)
        assert migration_row(conn, DB, table).stage == stage
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        query(blocker, "ROLLBACK")
        query(blocker, "UNLOCK TABLES")
        blocker.close()

    assert table_is_original(conn, DB, table), "the original table was left renamed or altered"
    copied_before = chunk_progress(conn, migration.id)[0] if stage != "init" else 0
    # A statement of the killed process runs on until it ends; its rows would count in the resumed run's.
    wait_for(lambda: not statements_on(conn, helper_table_name(table, "new")), 30,
             "the killed coordinator's statements to end")
    written_before = rows_written(conn)

    if stage == "cutover":   # a manual migration stays manual through a crash: its cutover is asked for again
        resumed = start_cli("resume", "--table", f"{DB}.{table}", log=cli_log)
        try:
            wait_for(lambda: migration_row(conn, DB, table).status == "waiting" or resumed.poll() is not None, 180,
                     "the resumed migration to wait for its cutover")
            assert resumed.poll() is None and table_is_original(conn, DB, table)
            result = cli("cutover", "--table", f"{DB}.{table}")
            assert result.returncode == 0, result.stderr[-5000:]
            assert resumed.wait(120) == 0
        finally:
            if resumed.poll() is None:
                resumed.kill()
                resumed.wait(30)
    else:
        result = cli("resume", "--table", f"{DB}.{table}")
        assert result.returncode == 0, result.stderr[-5000:]

    final = migration_row(conn, DB, table)
    assert (final.stage, final.status) == ("done", "done")
    assert scalar(conn, "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                        "AND COLUMN_NAME='k'", (DB, table)) == "bigint"
    comparison = compare_tables(conn, DB, helper_table_name(table, "old"), table)
    assert comparison.compared == ROWS and comparison.equal
    # Every row was copied exactly once, and the resumed run wrote only what was left to copy.
    copied, done, chunks = chunk_progress(conn, final.id)
    assert (copied, done) == (ROWS, chunks)
    slack = 1_000   # fence, sentry, metadata and re-copied rows
    assert rows_written(conn) - written_before <= (ROWS - copied_before) + slack
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{helper_table_name(table, 'old')}"]


def write_counters(conn) -> tuple[int, int]:
    """(Handler_write, Com_insert_select): the server's counters of rows and copy statements written."""
    status = dict(query(conn, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Handler_write', 'Com_insert_select')"))
    return int(status["Handler_write"]), int(status["Com_insert_select"])


def unchanged_for(conn, seconds: float) -> bool:
    """True if the write counters did not move during `seconds` (an observation window, not a wait)."""
    before = write_counters(conn)
    time.sleep(seconds)
    return write_counters(conn) == before


def lease_holders(endpoints, conn, migration_id: int) -> dict[int, bytes]:
    """Who holds the lease of each unfinished chunk now (chunks nobody holds left out)."""
    client = redis.Redis.from_url(endpoints.redis_url)
    try:
        pending = [c.number for c in StateStore(conn, "stream_osc").chunks(migration_id) if not c.done]
        holders = {n: client.get(redis_keys.chunk_lease(migration_id, n)) for n in pending}
    finally:
        client.close()
    return {n: holder for n, holder in holders.items() if holder is not None}


@pytest.mark.exclusive   # the server's write counters standing still are its measure
def test_pause_stops_every_write_keeps_the_chunks_leased_and_resume_continues(endpoints, cli_log):
    """A pause longer than a chunk's lease must not cost the paused workers their chunks: before the workers
    renewed their leases while paused, every chunk in progress was given up (a WARNING each) and claimed again."""
    table = "paused"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=150_000, seed=5)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, "--copy-workers", "2",
                     "--batch-size", "300",
                     "--target-batch-time", "0", "--chunk-size", "10000", log=cli_log)
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        wait_for(lambda: chunk_progress(conn, migration.id)[0] > 0, 60, "the copy to start")
        assert cli("pause", "--table", f"{DB}.{table}").returncode == 0
        wait_for(lambda: unchanged_for(conn, 1.0), 10, "the tool's writes to stop")
        copied = chunk_progress(conn, migration.id)
        assert copied[0] < 150_000, "the copy finished before the pause could be seen"
        assert unchanged_for(conn, 3.0) and chunk_progress(conn, migration.id) == copied
        assert status_doc(DB, table)["status"] == "paused" and proc.poll() is None
        held = lease_holders(endpoints, conn, migration.id)
        assert held, "no chunk was in progress at the pause"
        time.sleep(LEASE_MS / 1000 + 1.5)   # what is tested is a lease's time passing: nothing else marks it
        assert lease_holders(endpoints, conn, migration.id) == held

        resumed = cli("resume", "--table", f"{DB}.{table}")
        assert resumed.returncode == 0 and "resumed" in resumed.stdout + resumed.stderr
        wait_for(lambda: chunk_progress(conn, migration.id)[0] > copied[0], 30, "the copy to continue")
        assert proc.wait(300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert migration_row(conn, DB, table).status == "done"
    assert compare_tables(conn, DB, helper_table_name(table, "old"), table).equal
    assert "chunk given up" not in cli_log.read_text()


@contextmanager
def waiting_migration(endpoints, table: str, seed: int) -> Iterator[tuple[object, Migration, ConnectClient]]:
    """A small table's migration run with --cutover manual (in sync, coordinator gone, waiting for cutover);
    aborted afterwards, which must leave nothing behind. Yields (connection, migration, Connect client)."""
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=2_000, seed=seed)
    waiting_without_coordinator(conn, DB, table, "--alter", ALTER, "--quiet")
    migration = migration_row(conn, DB, table)
    assert migration.status == "waiting"
    try:
        yield conn, migration, ConnectClient(endpoints.connect_url)
    finally:
        assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def stop_connector(connect: ConnectClient, name: str) -> None:
    connect.stop(name)
    wait_for(lambda: connect.state(name).connector == "STOPPED", 60, "the connector to stop")


@pytest.mark.exclusive   # it purges the binlog every test's capture reads
def test_purged_binlog_position_stops_with_a_clear_error(endpoints):
    table = "purged"
    with waiting_migration(endpoints, table, seed=9) as (conn, migration, connect):
        # Capture stops, changes happen, and the binlog holding them is purged before capture resumes.
        stop_connector(connect, migration.connector)
        query(conn, f"UPDATE {DB}.{table} SET c = 'lost to capture' WHERE id <= 10")
        query(conn, "FLUSH BINARY LOGS")
        current = query(conn, "SHOW MASTER STATUS")[0][0]

        def purged() -> bool:   # a file another binlog reader still uses is skipped, so purge until gone
            query(conn, "PURGE BINARY LOGS TO %s", (current,))
            return [r[0] for r in query(conn, "SHOW BINARY LOGS")] == [current]
        wait_for(purged, 60, "the older binlog files to be purged")
        connect.resume(migration.connector)
        wait_for(lambda: connect.state(migration.connector).failed, 120, "the connector task to fail")

        result = cli("cutover", "--table", f"{DB}.{table}")
        assert result.returncode == 5   # stopped, cannot continue: abort and start again
        assert "binlog position is no longer on the server" in result.stderr and "stream-osc abort" in result.stderr
        assert table_is_original(conn, DB, table)
        status = cli("status", "--table", f"{DB}.{table}")
        assert "FAILED" in status.stdout and "binlog position is no longer on the server" in status.stdout


@pytest.mark.slow   # three restarts, each waited out as the product waits for them
def test_failing_connector_is_restarted_then_stops_the_migration(endpoints):
    table = "brokenhist"
    with waiting_migration(endpoints, table, seed=4) as (conn, migration, connect):
        # Without its schema history the task fails at every start: restarts cannot cure it.
        delete_topics(endpoints.kafka, [TopicNames(migration.prefix, DB, table).schema_history])
        stop_connector(connect, migration.connector)
        connect.resume(migration.connector)
        wait_for(lambda: connect.state(migration.connector).failed, 120, "the connector task to fail")

        result = cli("cutover", "--table", f"{DB}.{table}")
        assert result.returncode == 3   # stopped, resumable
        assert result.stderr.count("restarting it from its committed position") == 3, result.stderr
        assert f"connector {migration.connector} failed" in result.stderr.splitlines()[-1]
        assert table_is_original(conn, DB, table)


def test_abort_removes_a_sentry_left_by_a_killed_cutover(endpoints):
    table = "sentryleft"
    with waiting_migration(endpoints, table, seed=5) as (conn, migration, connect):
        # What a cutover attempt killed between creating its sentry and renaming leaves behind.
        query(conn, f"CREATE TABLE {DB}.{helper_table_name(table, 'old')} (sentry INT) COMMENT=%s", (SENTRY_COMMENT,))
    # waiting_migration aborts and then asserts that nothing is left, the sentry included
    assert table_is_original(conn, DB, table)
