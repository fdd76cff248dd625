"""Rows and columns must not vanish at the swap: DDL on the source, triggers, id 0, unsigned BIGINT keys at
their limits, the AUTO_INCREMENT position, sessions still writing statement-based binlog.

Each test is named after the guarantee it attacks. Data tests check the final table against what the
application was told (its own writes), not against the tool's idea of the swap.
"""
from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pymysql
import pytest

from core.table import load_pair
from cutover.queued_ddl import TABLE_MDL_WAIT
from cutover.swap import Cutover
from cli.exit_codes import ExitCode
from cli.main import main
from core.db import ServerInfo, connect, qualified, query, scalar
from core.endpoints import MySQLAddress
from migration.runner import Runner
from core.spec import MigrationSpec, helper_table_name
from core.source_check import SourceChanged
from core.state import PROTOCOL, STALE_S, StateStore
from core.state_records import Chunk
from demo.traffic import create_sample_table
from monitor.progress import Progress
from tests.integration.deadlocks import ConflictWatch, Refusal, assert_no_tool_deadlock, refusal
from tests.integration.helpers import (abort_leftover, application_session, cli, latest_migration_id, leftovers,
                                       migration_row, new_migration_row, run_context, wait_for,
                                       waiting_without_coordinator)

pytestmark = pytest.mark.integration

DB = "vanish"


def spec_for(table: str, alter: str, **options) -> MigrationSpec:
    settings = {"copy_workers": 1, "apply_workers": 1, "chunk_size": 2_000, "batch_size": 200, "partitions": 2,
                "keep_old": False, "max_lag_events": 50}
    settings.update(options)
    return MigrationSpec(algorithm="copy", database=DB, table=table, alter=alter, **settings).validate()


def fresh(conn, table: str) -> None:
    """Whatever an earlier, interrupted run of a test left of db.table's migration is removed."""
    abort_leftover(conn, DB, table)
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


class Incrementer(threading.Thread):
    """An application session incrementing counters of the given rows as fast as it can; it records what
    the server acknowledged (the oracle), so every update counted must be in the final table."""

    def __init__(self, addr: MySQLAddress, table: str, keys: list[int], seed: int) -> None:
        super().__init__(daemon=True)
        self.addr, self.name, self.keys = addr, qualified(DB, table), keys
        self.rng = random.Random(seed)
        self.acknowledged: Counter[int] = Counter()
        self.errors: list[str] = []
        self.refusals: list[Refusal] = []   # refused for a lock conflict: not acknowledged, not retried
        self.stop_event = threading.Event()

    def run(self) -> None:
        conn = connect(self.addr, tagged=False)   # the application's: its statements carry no tag
        try:
            while not self.stop_event.is_set():
                key = self.rng.choice(self.keys)
                try:
                    query(conn, f"UPDATE {self.name} SET counter = counter + 1 WHERE id = %s", (key,))
                except Exception as exc:  # noqa: BLE001 - an unacknowledged write; the test shows them
                    refused = refusal(exc, conn, f"increment {key}") if isinstance(exc, pymysql.err.MySQLError) \
                        else None
                    if refused is not None:
                        self.refusals.append(refused)
                    else:
                        self.errors.append(f"{key}: {exc}")
                    continue
                self.acknowledged[key] += 1
        finally:
            conn.close()

    def updates_to(self, key: int) -> int:
        return self.acknowledged[key]

    def wait_for_updates(self, more: int) -> None:
        target = sum(self.acknowledged.values()) + more
        wait_for(lambda: sum(self.acknowledged.values()) >= target, 60, f"{more} more updates")

    def __enter__(self) -> "Incrementer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.join()


def migrate_under_updates(endpoints, conn, table: str, keys: list[int], seed: int) -> Incrementer:
    """Migrate DB.table (adding a column) while counters of `keys` are incremented, before, during and after
    the swap; returns the record of acknowledged updates."""
    watch = ConflictWatch(endpoints.mysql, [DB], f"increments of {DB}.{table}")
    with Incrementer(endpoints.mysql, table, keys, seed) as writer:
        writer.wait_for_updates(100)
        spec = spec_for(table, "ADD COLUMN extra INT NULL", chunk_size=500, batch_size=100)
        started = time.monotonic()
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        ended = time.monotonic()
        writer.wait_for_updates(100)   # after the swap too
    assert writer.errors == []
    assert_no_tool_deadlock(watch, writer.refusals, (started, ended))
    assert "extra" in [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                                                 "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (DB, table))]
    return writer


def counter_table(conn, table: str, id_type: str, ids: list[int], filler: tuple[int, int]) -> None:
    """(Re)create DB.table (id, counter) holding `ids` and the ids filler[0]..filler[1]."""
    name = qualified(DB, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id {id_type} NOT NULL PRIMARY KEY, counter BIGINT NOT NULL DEFAULT 0, "
                "payload VARCHAR(32) NOT NULL DEFAULT 'x') ENGINE=InnoDB")
    query(conn, f"INSERT INTO {name} (id) VALUES " + ", ".join(["(%s)"] * len(ids)), ids)
    query(conn, f"INSERT INTO {name} (id) SELECT seq FROM {DB}.seq_{filler[0]}_to_{filler[1]}")


def assert_every_row_and_update(conn, table: str, writer: Incrementer, ids: set[int]) -> None:
    rows = dict(query(conn, f"SELECT id, counter FROM {qualified(DB, table)}"))
    assert set(rows) == ids, (sorted(ids - set(rows))[:5], sorted(set(rows) - ids)[:5])
    lost = {k: (rows[k], writer.updates_to(k)) for k in writer.keys if rows[k] != writer.updates_to(k)}
    assert lost == {}, "counter in the final table vs acknowledged updates"


# 1. DDL on the source ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, ddl, change", [
    ("add", "ALTER TABLE {t} ADD COLUMN extra INT NOT NULL DEFAULT 7",
     "column extra added (int(11) NOT NULL DEFAULT 7)"),
    ("drop", "ALTER TABLE {t} DROP COLUMN legacy", "column legacy dropped"),
    ("trigger", "CREATE TRIGGER {t}_audit BEFORE UPDATE ON {t} FOR EACH ROW SET NEW.note = 'audited'",
     "trigger ddl_trigger_audit added (BEFORE UPDATE #1, definer "),
    # in place, on an index that exists: no key and no table id changes, and its cascades send no row event
    ("foreign_key", "SET STATEMENT foreign_key_checks=0 FOR ALTER TABLE {t} ADD CONSTRAINT fk_cascade "
     f"FOREIGN KEY (k) REFERENCES {DB}.fk_parent (id) ON DELETE CASCADE",
     f"foreign key {DB}.fk_cascade added ({DB}.ddl_foreign_key REFERENCES {DB}.fk_parent ON DELETE CASCADE)"),
    ("referenced", f"SET STATEMENT foreign_key_checks=0 FOR ALTER TABLE {DB}.fk_child ADD CONSTRAINT fk_to_source "
     "FOREIGN KEY (pid) REFERENCES {t} (id)",
     f"foreign key {DB}.fk_to_source added ({DB}.fk_child REFERENCES {DB}.ddl_referenced)"),
])
def test_ddl_on_the_source_during_the_migration_stops_it_with_the_original_untouched(endpoints, conn, kind, ddl,
                                                                                      change):
    table = f"ddl_{kind}"
    query(conn, f"DROP TABLE IF EXISTS {DB}.fk_child")
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=20_000, seed=3)
    query(conn, f"CREATE TABLE IF NOT EXISTS {DB}.fk_parent (id INT NOT NULL PRIMARY KEY)")
    query(conn, f"CREATE TABLE {DB}.fk_child (id INT NOT NULL PRIMARY KEY, pid BIGINT NOT NULL, KEY (pid))")
    run = RunnerThread(endpoints, spec_for(table, "ADD INDEX c_idx (c)", batch_size=100))
    run.start()
    wait_for(lambda: (row := migration_row(conn, DB, table)) is not None and row.stage == "copy"
             and scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND rows_copied > 0",
                        (row.id,)), 180, "the copy under way")
    query(conn, ddl.format(t=f"{DB}.{table}"))
    run.join(300)
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
    query(conn, f"DROP TABLE {DB}.fk_child")


def copying(endpoints, conn, table: str, seed: int) -> RunnerThread:
    """DB.table (20,000 rows, made afresh) with its migration (ADD INDEX c_idx) running in the background, copying."""
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=20_000, seed=seed)
    run = RunnerThread(endpoints, spec_for(table, "ADD INDEX c_idx (c)", batch_size=100))
    run.start()
    wait_for(lambda: (row := migration_row(conn, DB, table)) is not None and row.stage == "copy"
             and scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND rows_copied > 0",
                        (row.id,)), 180, "the copy under way")
    return run


def assert_stopped_unswapped(conn, run: RunnerThread, table: str, says: str) -> None:
    """The migration stopped with SourceChanged saying `says`, shown by `status`, and the index was never added."""
    run.join(300)
    assert not run.is_alive()
    assert isinstance(run.error, SourceChanged), (run.result, run.error)
    assert says in str(run.error)
    assert migration_row(conn, DB, table).error == str(run.error)   # `status` shows why
    assert scalar(conn, "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s AND "
                        "TABLE_NAME=%s AND INDEX_NAME='c_idx'", (DB, table)) == 0


def test_a_truncate_during_the_copy_stops_the_migration_without_a_swap(endpoints, conn):
    table = "truncated_in_copy"
    run = copying(endpoints, conn, table, seed=8)
    query(conn, f"TRUNCATE TABLE {DB}.{table}")
    assert_stopped_unswapped(conn, run, table, f"table {DB}.{table} was replaced during the migration")
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table}") == 0     # as the application left it
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def test_ddl_on_the_source_before_the_lock_is_caught_inside_the_cutover_lock(endpoints, conn):
    table = "ddl_at_lock"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=3_000, seed=4)
    spec = spec_for(table, "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0", cutover="manual")
    waiting_without_coordinator(conn, DB, table, "--alter", spec.alter, "--copy-workers", "1", "--apply-workers", "1",
                                "--chunk-size", "2000", "--batch-size", "200", "--target-batch-time", "0",
                                "--partitions", "2", "--drop-old",
                                "--max-lag", "50", "--quiet")                # in sync, waiting for cutover
    query(conn, f"ALTER TABLE {DB}.{table} ADD COLUMN extra VARCHAR(10) NULL")   # after the last health check
    query(conn, f"UPDATE {DB}.{table} SET extra = 'kept' WHERE id <= 10")
    migration = StateStore(conn, spec.metadata_schema).active(DB, table)
    ctx = run_context(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table))
    with pytest.raises(SourceChanged, match=f"table {DB}.{table} was altered.*column extra added"):
        Cutover(ctx, ServerInfo.read(conn).is_mariadb).attempt(spec.cutover_window_s, "test:coordinator")
    columns = [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                                         "AND TABLE_NAME=%s", (DB, table))]
    assert "extra" in columns and "flag" not in columns                       # not swapped
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table} WHERE extra = 'kept'") == 10
    assert query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                 (DB, spec.old_table)) == []                                  # the sentry is gone
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table}") == 3_000
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


@pytest.fixture
def mixed_binlog(endpoints, conn):
    """Turns the server's binlog_format to MIXED when called, returning an application session connected after
    that (it keeps the format); ROW again however the test ends. MIXED, not STATEMENT: the tool's READ COMMITTED
    sessions still log rows under it, so only the application's changes go uncaptured."""
    sessions = []

    def turn() -> object:
        query(conn, "SET GLOBAL binlog_format = 'MIXED'")
        sessions.append(application_session(endpoints.mysql))   # REPEATABLE READ: it logs statements
        return sessions[-1]
    try:
        yield turn
    finally:
        query(conn, "SET GLOBAL binlog_format = 'ROW'")
        for session in sessions:
            session.close()


@pytest.mark.exclusive   # it sets binlog_format for the whole server: every capture sees it
def test_binlog_format_turned_away_from_row_during_the_copy_stops_the_migration_without_a_swap(
        endpoints, conn, mixed_binlog):
    table = "statement_in_copy"
    run = copying(endpoints, conn, table, seed=9)
    application = mixed_binlog()
    query(application, f"UPDATE {DB}.{table} SET c = 'never captured' WHERE id <= 10")
    assert_stopped_unswapped(conn, run, table, f"binlog_format is MIXED since the migration of {DB}.{table} began")
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table} WHERE c = 'never captured'") == 10
    query(conn, "SET GLOBAL binlog_format = 'ROW'")   # as the message says: set back, then abort
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


@pytest.mark.exclusive   # it sets binlog_format for the whole server: every capture sees it
def test_binlog_format_turned_away_from_row_before_the_lock_is_caught_inside_the_cutover_lock(
        endpoints, conn, mixed_binlog):
    table = "statement_at_lock"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=3_000, seed=7)
    spec = waiting_migration(conn, table, "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0")
    application = mixed_binlog()                                            # after the last health check
    query(application, f"UPDATE {DB}.{table} SET c = 'never captured' WHERE id <= 10")
    store = StateStore(conn, spec.metadata_schema)
    migration = store.active(DB, table)
    assert store.claim_coordinator(migration.id, "test:coordinator", STALE_S, store.coordinator(migration.id))
    ctx = run_context(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table))
    with pytest.raises(SourceChanged, match="binlog_format is MIXED since the migration"):
        Cutover(ctx, ServerInfo.read(conn).is_mariadb).attempt(spec.cutover_window_s, "test:coordinator")
    assert "flag" not in [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                                                    "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (DB, table))]
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table} WHERE c = 'never captured'") == 10   # kept, not swapped
    store.release_coordinator(migration.id, "test:coordinator")
    query(conn, "SET GLOBAL binlog_format = 'ROW'")
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def waiting_migration(conn, table: str, alter: str) -> MigrationSpec:
    """DB.table (3,000 rows) with a migration in sync and waiting for its cutover, its coordinator killed."""
    spec = spec_for(table, alter, cutover="manual")
    waiting_without_coordinator(conn, DB, table, "--alter", spec.alter, "--copy-workers", "1", "--apply-workers", "1",
                                "--chunk-size", "2000", "--batch-size", "200", "--target-batch-time", "0",
                                "--partitions", "2", "--drop-old", "--max-lag", "50", "--quiet")
    return spec


def test_a_truncate_of_the_source_before_the_lock_is_caught_inside_the_cutover_lock(endpoints, conn):
    """TRUNCATE leaves the definition as it was and sends no row event (the connector skips truncates): without
    an identity check the swap would bring back every row the application removed."""
    table = "truncated_at_lock"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=3_000, seed=6)
    spec = waiting_migration(conn, table, "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0")
    query(conn, f"TRUNCATE TABLE {DB}.{table}")                                 # after the last health check
    written = {(i, f"after truncate {i}") for i in range(1, 6)}
    query(conn, f"INSERT INTO {DB}.{table} (id, k, c, updated_at) VALUES " + ", ".join(["(%s, 0, %s, NOW())"] * 5),
          [v for row in sorted(written) for v in row])
    store = StateStore(conn, spec.metadata_schema)
    migration = store.active(DB, table)
    assert store.claim_coordinator(migration.id, "test:coordinator", STALE_S, store.coordinator(migration.id))
    ctx = run_context(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table))
    with pytest.raises(SourceChanged, match=f"table {DB}.{table} was replaced during the migration.*truncated"):
        Cutover(ctx, ServerInfo.read(conn).is_mariadb).attempt(spec.cutover_window_s, "test:coordinator")
    assert set(query(conn, f"SELECT id, c FROM {DB}.{table}")) == written          # exactly the application's rows
    assert "flag" not in [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                                                    "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (DB, table))]
    store.release_coordinator(migration.id, "test:coordinator")   # as a coordinator that stops does: abort need
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0   # not wait STALE_S for the lease to age out
    assert leftovers(endpoints, DB, table) == []


@pytest.mark.parametrize("sentry_dropped", [False, True], ids=["sentry_kept", "sentry_dropped"])
def test_a_truncate_queued_inside_the_cutover_lock_cannot_run_before_the_rename(endpoints, conn, sentry_dropped):
    """On MariaDB the RENAME waits in a second session for the lock session's UNLOCK: a TRUNCATE queued during
    the window, after the lock session's check, could be granted first and empty the original an instant
    before the swap. The attempt rolls back; and if a DROP of the sentry queued first too, the sentry alone
    would not stop the RENAME."""
    table = f"truncated_in_lock_{int(sentry_dropped)}"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=3_000, seed=9)
    spec = waiting_migration(conn, table, "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0")
    store = StateStore(conn, spec.metadata_schema)
    migration = store.active(DB, table)
    assert store.claim_coordinator(migration.id, "test:coordinator", STALE_S, store.coordinator(migration.id))
    ctx = run_context(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table))
    cutover = Cutover(ctx, ServerInfo.read(conn).is_mariadb)
    if not cutover.is_mariadb:
        cutover.close()
        pytest.skip("MySQL renames inside the lock session")
    statements = ([f"DROP TABLE IF EXISTS {DB}.{spec.old_table}"] if sentry_dropped else []) + \
        [f"TRUNCATE TABLE {DB}.{table}"]
    sessions = [application_session(endpoints.mysql) for _ in statements]
    queued = [threading.Thread(target=query, args=(session, sql), daemon=True)
              for session, sql in zip(sessions, statements)]
    carry = cutover._carry_auto_increment

    def carry_then_queue(lock_conn) -> None:   # under the lock, after the source check
        carry(lock_conn)
        for thread in queued:
            thread.start()
        wait_for(lambda: scalar(conn, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE=%s AND "
                                      "(INFO LIKE 'TRUNCATE%%' OR INFO LIKE 'DROP%%')", (TABLE_MDL_WAIT,))
                 == len(statements), 10, "the statements to queue")
    cutover._carry_auto_increment = carry_then_queue
    try:
        result = cutover.attempt(spec.cutover_window_s, "test:coordinator")
    finally:
        cutover.close()
    for thread, session in zip(queued, sessions):
        thread.join(30)
        session.close()
    assert not result.swapped and "TRUNCATE" in result.reason, result
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table}") == 0, "rows the TRUNCATE removed are back"
    written = {(i, f"after truncate {i}") for i in range(1, 6)}
    query(conn, f"INSERT INTO {DB}.{table} (id, k, c, updated_at) VALUES " + ", ".join(["(%s, 0, %s, NOW())"] * 5),
          [v for row in sorted(written) for v in row])
    again = Cutover(ctx, True)
    try:
        with pytest.raises(SourceChanged, match=f"table {DB}.{table} was replaced during the migration"):
            again.attempt(spec.cutover_window_s, "test:coordinator")
    finally:
        again.close()
    assert set(query(conn, f"SELECT id, c FROM {DB}.{table}")) == written          # exactly the application's rows
    assert "flag" not in [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                                                    "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (DB, table))]
    store.release_coordinator(migration.id, "test:coordinator")   # as a coordinator that stops does: abort need
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0   # not wait STALE_S for the lease to age out
    assert leftovers(endpoints, DB, table) == []


def test_a_table_dropped_and_created_again_is_not_resumed_as_the_one_migrated(endpoints, conn):
    """`migrate` with the same ALTER resumes the table's unfinished migration: a table of the same definition
    made in its place meanwhile must be refused, not swapped for a copy of the one dropped."""
    table = "recreated"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=3_000, seed=7)
    spec = waiting_migration(conn, table, "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0")
    definition = query(conn, f"SHOW CREATE TABLE {DB}.{table}")[0][1]
    query(conn, f"DROP TABLE {DB}.{table}")
    query(conn, definition.replace(f"CREATE TABLE `{table}`", f"CREATE TABLE {DB}.`{table}`", 1))
    written = {(i, f"recreated {i}") for i in range(10, 15)}
    query(conn, f"INSERT INTO {DB}.{table} (id, k, c, updated_at) VALUES " + ", ".join(["(%s, 0, %s, NOW())"] * 5),
          [v for row in sorted(written) for v in row])
    run = cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter", spec.alter, "--quiet")
    assert run.returncode == ExitCode.FAILED, (run.returncode, run.stderr)
    assert f"table {DB}.{table} was replaced during the migration" in run.stderr
    assert "dropped and created again" in run.stderr
    assert set(query(conn, f"SELECT id, c FROM {DB}.{table}")) == written
    assert "flag" not in [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                                                    "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (DB, table))]
    assert migration_row(conn, DB, table).error in run.stderr                    # `status` shows why
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


# 2. triggers ---------------------------------------------------------------------------------------
def test_triggers_are_not_left_behind_on_the_old_table(endpoints, conn):
    """They move to the swapped-in table (tests/integration/test_triggers.py holds the oracle) and the old table keeps
    none; an instant change leaves them on the table."""
    table = "with_trigger"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=100, seed=5)
    query(conn, f"CREATE TRIGGER {DB}.{table}_bi BEFORE INSERT ON {DB}.{table} FOR EACH ROW SET NEW.k = NEW.k + 1")
    query(conn, f"CREATE TRIGGER {DB}.{table}_ad AFTER DELETE ON {DB}.{table} FOR EACH ROW SET @deleted = OLD.id")
    result = cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN flag INT NULL",
                 "--quiet")
    assert result.returncode == 0, result.stderr[-3000:]
    on = dict(query(conn, "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
                          "WHERE TRIGGER_SCHEMA=%s AND TRIGGER_NAME LIKE %s", (DB, f"{table}%")))
    assert on == {f"{table}_bi": table, f"{table}_ad": table}
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{helper_table_name(table, 'old')}"]
    query(conn, f"DROP TABLE {DB}.{helper_table_name(table, 'old')}")
    # made instantly, on the table itself: its triggers stay where they are
    result = cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN flag2 INT NULL", "--quiet")
    assert result.returncode == 0, result.stderr[-3000:]
    assert migration_row(conn, DB, table).options.get("path") == "instant"
    assert dict(query(conn, "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
                            "WHERE TRIGGER_SCHEMA=%s AND TRIGGER_NAME LIKE %s", (DB, f"{table}%"))) == on
    assert leftovers(endpoints, DB, table) == []


def test_a_trigger_changed_during_the_migration_stops_it_with_the_original_untouched(endpoints, conn):
    table = "trigger_changed"
    trigger = f"{DB}.{table}_bu"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=20_000, seed=9)
    query(conn, f"CREATE TRIGGER {trigger} BEFORE UPDATE ON {DB}.{table} FOR EACH ROW SET NEW.k = NEW.k + 1")
    earlier = latest_migration_id(conn, DB, table)   # an earlier run's row, aborted at stage copy, is not this one
    run = RunnerThread(endpoints, spec_for(table, "ADD INDEX c_idx (c)", cutover="manual"))   # never swaps
    run.start()
    wait_for(lambda: (row := new_migration_row(conn, DB, table, earlier)) is not None and row.stage == "copy", 180,
             "the copy")
    query(conn, f"DROP TRIGGER {trigger}")   # the same name, timing and event; another body
    query(conn, f"CREATE TRIGGER {trigger} BEFORE UPDATE ON {DB}.{table} FOR EACH ROW SET NEW.k = NEW.k + 2")
    run.join(300)
    assert isinstance(run.error, SourceChanged), (run.result, run.error)
    assert f"trigger {table}_bu changed from BEFORE UPDATE #1" in str(run.error)
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []
    assert scalar(conn, "SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA=%s AND "
                        "TRIGGER_NAME=%s", (DB, f"{table}_bu")) == "SET NEW.k = NEW.k + 2"


# 3. a key of 0 ------------------------------------------------------------------------------------
def test_a_row_whose_auto_increment_key_is_0_survives(endpoints, conn):
    table = "zero_key"
    fresh(conn, table)
    query(conn, "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_AUTO_VALUE_ON_ZERO')")   # 0 stays 0
    counter_table(conn, table, "BIGINT AUTO_INCREMENT", [-3, -1, 0], (1, 2_000))
    assert scalar(conn, f"SELECT COUNT(*) FROM {DB}.{table} WHERE id = 0") == 1
    writer = migrate_under_updates(endpoints, conn, table, [-3, 0, 1, 2_000], seed=3)
    assert_every_row_and_update(conn, table, writer, {-3, -1, 0, *range(1, 2_001)})
    assert leftovers(endpoints, DB, table) == []


# 4. unsigned BIGINT keys up to 2^64-1 ----------------------------------------------------------------
def test_unsigned_bigint_keys_up_to_the_top_survive(endpoints, conn):
    table = "unsigned_key"
    fresh(conn, table)
    top = 2**64 - 1
    edges = [0, 2**63 - 1, 2**63, 2**63 + 1, top - 1, top]
    counter_table(conn, table, "BIGINT UNSIGNED", edges, (1, 2_000))
    writer = migrate_under_updates(endpoints, conn, table, [0, 1, 2**63, top - 1, top], seed=4)
    assert_every_row_and_update(conn, table, writer, {*edges, *range(1, 2_001)})
    assert leftovers(endpoints, DB, table) == []


# 5. AUTO_INCREMENT position ------------------------------------------------------------------------
def test_ids_handed_out_before_the_swap_are_not_handed_out_again(endpoints, conn):
    table = "auto_position"
    fresh(conn, table)
    name = qualified(DB, table)
    query(conn, f"DROP TABLE IF EXISTS {name}")
    query(conn, f"CREATE TABLE {name} (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
    query(conn, f"INSERT INTO {name} (v) SELECT seq FROM {DB}.seq_1_to_1000")
    handed_out = scalar(conn, f"SELECT MAX(id) FROM {name}")
    query(conn, f"DELETE FROM {name} WHERE id > %s", (handed_out - 100,))   # the top ids are gone, not forgotten
    assert Runner(endpoints, spec_for(table, "ADD COLUMN w INT NULL"), Progress(quiet=True)).run() == 0
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {name} (v) VALUES (1)")
        assert cur.lastrowid > handed_out
    assert leftovers(endpoints, DB, table) == []


@pytest.mark.parametrize("position_type", ["BIGINT", "DECIMAL(20,0)"])
def test_a_migration_recorded_by_an_integer_key_version_resumes_where_it_was(conn, position_type):
    """Metadata schemas of earlier versions held integer chunk positions (BIGINT, then DECIMAL(20,0)) and
    names in the server's default collation: they become key positions, covering the same rows, and
    names byte for byte, without losing the running migration."""
    schema = "vanish_meta"
    query(conn, f"DROP DATABASE IF EXISTS {schema}")
    query(conn, f"CREATE DATABASE {schema} CHARACTER SET latin1")
    try:
        query(conn, f"""CREATE TABLE {schema}.migrations (
            id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, db VARCHAR(64) NOT NULL, tbl VARCHAR(64) NOT NULL,
            alter_sql TEXT NOT NULL, stage VARCHAR(16) NOT NULL, status VARCHAR(16) NOT NULL,
            prefix VARCHAR(100) NOT NULL, pk_column VARCHAR(64) NOT NULL,
            min_pk {position_type} NULL, max_pk {position_type} NULL,
            error TEXT NULL, validation_diffs BIGINT NOT NULL DEFAULT 0, cutover_blocked_ms INT NULL,
            cutover_at DOUBLE NULL, options TEXT NOT NULL, active_key VARCHAR(140) NULL,
            created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
            updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
            UNIQUE KEY active_key (active_key)) ENGINE=InnoDB""")
        query(conn, f"""CREATE TABLE {schema}.chunks (
            migration_id BIGINT NOT NULL, chunk_no INT NOT NULL,
            start_pk {position_type} NOT NULL, end_pk {position_type} NOT NULL, next_pk {position_type} NOT NULL,
            rows_copied BIGINT NOT NULL DEFAULT 0, done TINYINT NOT NULL DEFAULT 0,
            PRIMARY KEY (migration_id, chunk_no)) ENGINE=InnoDB""")
        query(conn, f"INSERT INTO {schema}.migrations (id, db, tbl, alter_sql, stage, status, prefix, pk_column, "
                    "min_pk, max_pk, options, active_key) VALUES (1, 'd', 't', 'ADD COLUMN x INT', 'copy', 'running', "
                    "'p', 'id', %s, %s, '{}', 'd.t')", (-2**63, 2**63 - 1))
        query(conn, f"INSERT INTO {schema}.chunks (migration_id, chunk_no, start_pk, end_pk, next_pk, rows_copied) "
                    "VALUES (1, 0, %s, %s, 10, 7), (1, 1, 11, %s, 11, 0)", (-2**63, 10, 2**63 - 1))
        store = StateStore(conn, schema)
        assert store.schema_exists()
        migration = store.active("d", "t")                                    # the running migration resumes
        assert migration is not None and migration.id == 1 and migration.pk_columns == ("id",)
        assert migration.protocol is None, "recorded before protocol stamps"
        assert store.claim_coordinator(1, "upgraded", STALE_S) and store.get(1).protocol == PROTOCOL
        assert store.chunks(1) == [Chunk(0, (-2**63,), (11,), (10,), 7, False),
                                   Chunk(1, (11,), (2**63,), (11,), 0, False)]
        assert set(query(conn, "SELECT COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS WHERE "
                               "TABLE_SCHEMA=%s AND TABLE_NAME='migrations' AND COLUMN_NAME IN ('db', 'tbl')",
                         (schema,))) == {("db", "utf8mb4_bin"), ("tbl", "utf8mb4_bin")}
        store.create("d", "T", "ADD COLUMN x INT", "p2", ("id",), {})         # `T` is another table than `t`
        assert store.active("d", "T").id != store.active("d", "t").id
    finally:
        query(conn, f"DROP DATABASE IF EXISTS {schema}")


# 6. sessions still on statement-based binlog -------------------------------------------------------
@pytest.mark.exclusive   # it sets binlog_format for the whole server: every capture sees it
def test_sessions_that_may_still_write_mixed_binlog_are_pointed_out(endpoints, conn, capsys):
    table = "session_format"
    fresh(conn, table)
    create_sample_table(conn, DB, table, rows=10, seed=6)
    query(conn, "SET GLOBAL binlog_format = 'ROW'")   # a run-time change: older sessions keep their format
    code = main(["--log-level", "INFO", "migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter",
                 "ADD COLUMN flag INT NULL", "--dry-run", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    if ServerInfo.read(conn).is_mariadb:   # it cannot show other sessions' format: the change is pointed out
        assert "binlog_format was set with SET GLOBAL since the server started" in err
    assert leftovers(endpoints, DB, table) == []
