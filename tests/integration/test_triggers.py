"""A table's triggers come through the migration: on the swapped-in table, with their definer, sql_mode and order,
none left on the old table, and each acknowledged write fired them exactly once (core/triggers.py).

The oracle is the writers' own record (tests/integration/ledger.py), extended to the rows their triggers write: each
acknowledged insert, increment and delete has exactly its audit rows, not zero (a write ran without the triggers) and
not two; no audit row is written for anything else (the copy's and the appliers' writes into the new table must fire
nothing). The coordinator is also killed (SIGKILL, from inside the process at a named step of the trigger move) and
the migration resumed or aborted: the live table ends with exactly one complete set, and meanwhile a write fails
loudly rather than run without its triggers.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pymysql
import pytest

from core.db import connect, qualified, query, scalar
from core.spec import MigrationSpec, helper_table_name
from core.triggers import GUARD_PREFIX, create_trigger, read_triggers
from cutover.outcome import CutoverAborted
from cutover.swap import Cutover
from migration.checks import PreflightError
from migration.runner import Runner
from migration.trigger_checks import check_triggers_movable
from monitor.progress import Progress
from tests.integration.helpers import abort_leftover, cli, db_conn, leftovers
from tests.integration.ledger import Ledger, create_ledger_table

pytestmark = pytest.mark.integration

DB = "triggers_kept"
NAMES = {"lowercase": "orders", "uppercase": "Orders", "64_characters": "o" * 60 + "rder"}
DEFINER = "osc_trigger_definer"
SQL_MODE = "PIPES_AS_CONCAT,ANSI_QUOTES"   # the note below is 'i' || seq only under PIPES_AS_CONCAT
OPTIONS = ("--copy-workers", "2", "--apply-workers", "2", "--chunk-size", "5000", "--batch-size", "1000",
           "--partitions", "4", "--max-lag", "200")
# The coordinator of `migrate`, SIGKILLed by itself when the trigger move reaches step argv[1]
KILLED_AT = ("import os, signal, sys\n"
             "import core.triggers\n"
             "def reached(step):\n"
             "    if step == sys.argv[1]:\n"
             "        os.kill(os.getpid(), signal.SIGKILL)\n"
             "core.triggers.reached = reached\n"
             "from cli.main import main\n"
             "sys.exit(main(sys.argv[2:]))\n")


def audited_table(conn, db: str, table: str, rows: int) -> None:
    """The ledger's table, with four triggers writing an audit row for each row change: two AFTER INSERT (their order
    matters), one made under SQL_MODE, one by another definer."""
    query(conn, f"DROP DATABASE IF EXISTS `{db}`")
    create_ledger_table(conn, db, table, rows=rows, writers=8)
    audit, name = qualified(db, "audit"), qualified(db, table)
    query(conn, f"CREATE TABLE {audit} (id BIGINT AUTO_INCREMENT PRIMARY KEY, "   # 'i' and 'I' are two ops
                "op CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, row_id BIGINT NOT NULL, "
                "note VARCHAR(100) NOT NULL DEFAULT '', KEY (op, row_id))")
    query(conn, f"CREATE USER IF NOT EXISTS '{DEFINER}'@'%'")
    query(conn, f"GRANT SELECT, INSERT, TRIGGER ON `{db}`.* TO '{DEFINER}'@'%'")
    query(conn, f"SET SESSION sql_mode = '{SQL_MODE}'")
    query(conn, f"CREATE TRIGGER {qualified(db, 'trg_ai')} AFTER INSERT ON {name} FOR EACH ROW "
                f"INSERT INTO {audit} (op, row_id, note) VALUES ('i', NEW.id, 'i' || NEW.seq)")
    query(conn, "SET SESSION sql_mode = DEFAULT")
    query(conn, f"CREATE DEFINER='{DEFINER}'@'%' TRIGGER {qualified(db, 'trg_ai2')} AFTER INSERT ON {name} "
                f"FOR EACH ROW INSERT INTO {audit} (op, row_id, note) VALUES "
                f"('I', NEW.id, (SELECT COUNT(*) FROM {audit} WHERE op = 'i' AND row_id = NEW.id))")
    query(conn, f"CREATE TRIGGER {qualified(db, 'trg_au')} AFTER UPDATE ON {name} FOR EACH ROW "
                f"INSERT INTO {audit} (op, row_id) VALUES ('u', NEW.id)")
    query(conn, f"CREATE TRIGGER {qualified(db, 'trg_ad')} AFTER DELETE ON {name} FOR EACH ROW "
                f"INSERT INTO {audit} (op, row_id) VALUES ('d', OLD.id)")


def triggers_of(conn, db: str, table: str) -> list[tuple]:
    """What must come through: name, timing, event, order, body, definer, sql_mode, character set and collation."""
    return query(conn, "SELECT TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER, ACTION_STATEMENT, "
                       "DEFINER, SQL_MODE, CHARACTER_SET_CLIENT, COLLATION_CONNECTION FROM information_schema.TRIGGERS "
                       "WHERE EVENT_OBJECT_SCHEMA=%s AND EVENT_OBJECT_TABLE=%s "
                       "ORDER BY EVENT_MANIPULATION, ACTION_TIMING, ACTION_ORDER", (db, table))


def guards(conn, db: str) -> list[str]:
    return [r[0] for r in query(conn, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA=%s "
                                      "AND TRIGGER_NAME LIKE %s", (db, GUARD_PREFIX + "%"))]


def audit_problems(conn, db: str, ledger: Ledger) -> list[str]:
    """Every acknowledged write's audit rows, exactly once each, and no other audit row."""
    counts = {(op, int(row_id)): int(n) for op, row_id, n in
              query(conn, f"SELECT op, row_id, COUNT(*) FROM {qualified(db, 'audit')} GROUP BY op, row_id")}
    notes = {int(row_id): note for row_id, note in
             query(conn, f"SELECT row_id, note FROM {qualified(db, 'audit')} WHERE op = 'i'")}
    expected: dict[tuple[str, int], int] = {}
    problems = []
    for w in ledger.writers:
        rec = w.record
        for pk, seq in rec.inserted.items():
            expected[("i", pk)] = expected[("I", pk)] = 1
            if pk in rec.deleted:
                expected[("d", pk)] = 1
            if notes.get(pk) != f"i{seq}":
                problems.append(f"row {pk}: insert audited with note {notes.get(pk)!r}, not 'i{seq}' (sql_mode lost?)")
        updates = counts.get(("u", w.writer), 0)
        if not rec.increments <= updates <= rec.increments + rec.uncertain_increments:
            problems.append(f"writer {w.writer}: {updates} update audit rows, acknowledged increments "
                            f"{rec.increments} (+{rec.uncertain_increments} uncertain)")
        expected[("u", w.writer)] = updates
    problems += [f"audit {op} of row {pk}: {counts.get((op, pk), 0)} rows, expected {n}"
                 for (op, pk), n in sorted(expected.items()) if counts.get((op, pk), 0) != n]
    extra = sorted(key for key in counts if key not in expected)
    if extra:
        problems.append(f"{len(extra)} audit rows no acknowledged write explains (the tool's own writes fired a "
                        f"trigger?): {extra[:5]}")
    order = query(conn, f"SELECT COUNT(*) FROM {qualified(db, 'audit')} WHERE op = 'I' AND note <> '1'")[0][0]
    if order:
        problems.append(f"{order} second AFTER INSERT triggers ran before the first (order lost)")
    return problems


@pytest.mark.parametrize("kind", list(NAMES))
def test_triggers_move_with_the_table_and_every_acknowledged_write_fired_them_once(endpoints, kind):
    table, db = NAMES[kind], f"trig_{kind}"
    conn = db_conn(endpoints)
    audited_table(conn, db, table, rows=10_000)
    before = triggers_of(conn, db, table)
    with Ledger(endpoints.mysql, db, table, writers=8, seed=len(table)) as ledger:
        ledger.wait_for_writes(200)
        spec = MigrationSpec(algorithm="copy", database=db, table=table, alter="ADD COLUMN extra1 INT NULL",
                             copy_workers=2, apply_workers=2, chunk_size=5_000, batch_size=1_000, partitions=4,
                             max_lag_events=200).validate()
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        ledger.wait_for_writes(200)   # writes after the swap fire the moved triggers
    assert ledger.errors() == []
    ledger.assert_kept(conn)
    assert audit_problems(conn, db, ledger) == []
    assert triggers_of(conn, db, table) == before
    old = helper_table_name(table, "old")
    assert triggers_of(conn, db, old) == [] and guards(conn, db) == []
    query(conn, f"DROP TABLE {qualified(db, old)}")
    assert leftovers(endpoints, db, table) == []


def start_killed_at(step: str, db: str, table: str, log: Path) -> subprocess.Popen:
    """`stream-osc migrate` of db.table, killed (SIGKILL) by itself at `step` of the trigger move."""
    out = open(log, "ab")
    try:
        return subprocess.Popen([sys.executable, "-c", KILLED_AT, step, "migrate", "--algorithm", "copy", "--table",
                                 f"{db}.{table}", "--alter", "ADD COLUMN extra1 INT NULL", "--quiet", *OPTIONS],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
    finally:
        out.close()


def guard_refused(error: str) -> bool:
    return "(1644, " in error and "is moving the triggers of" in error


def kill_then(endpoints, tmp_path: Path, step: str, then: str) -> None:
    """Writers on an audited table; its migration killed at `step`; a write then fails on the guards; `then`
    (resume or abort) ends with exactly one complete set on the live table."""
    db, table = f"trig_kill_{re.sub('[^a-z0-9]', '_', step)}_{then}", "orders"
    conn = db_conn(endpoints)
    abort_leftover(conn, db, table)
    audited_table(conn, db, table, rows=5_000)
    before = triggers_of(conn, db, table)
    with Ledger(endpoints.mysql, db, table, writers=8, seed=7) as ledger:
        ledger.wait_for_writes(200)
        proc = start_killed_at(step, db, table, tmp_path / "migrate.log")
        assert proc.wait(300) == -9, (tmp_path / "migrate.log").read_text()[-3000:]
        probe = connect(endpoints.mysql, tagged=False)   # the guards were made first: no write runs without them
        with pytest.raises(pymysql.err.MySQLError, match="is moving the triggers of"):
            query(probe, f"DELETE FROM {qualified(db, table)} WHERE id = 1")
        probe.close()
        done = cli(then, "--table", f"{db}.{table}")
        assert done.returncode == 0, done.stderr[-3000:]
        ledger.wait_for_writes(200)
    assert [e for e in ledger.errors() if not guard_refused(e)] == []
    assert ledger.missing(conn) == []
    assert audit_problems(conn, db, ledger) == []
    assert triggers_of(conn, db, table) == before
    assert triggers_of(conn, db, helper_table_name(table, "old")) == [] and guards(conn, db) == []
    assert triggers_of(conn, db, helper_table_name(table, "new")) == []
    columns = scalar(conn, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                           "AND COLUMN_NAME='extra1'", (db, table))
    assert columns == (1 if then == "resume" else 0)
    query(conn, f"DROP DATABASE `{db}`")


# the move's steps: guards made; originals dropped (DELETE's first, then INSERT's two, UPDATE's); created on the new
# table in the same order; the last one's creation is the moment before the RENAME is queued
STEPS = ["guarded", "dropped trg_ad", "dropped trg_ai2", "created trg_ad", "created trg_ai", "created trg_au"]


@pytest.mark.parametrize("step, then", [
    ("dropped trg_ai", "resume"), ("created trg_ai2", "abort"),
    *[pytest.param(step, "resume", marks=pytest.mark.slow) for step in STEPS],
    *[pytest.param(step, "abort", marks=pytest.mark.slow) for step in STEPS[::2]],
])
def test_a_kill_in_the_trigger_move_leaves_one_complete_set_on_the_live_table(endpoints, tmp_path, step, then):
    kill_then(endpoints, tmp_path, step, then)



def test_an_attempt_rolled_back_after_the_move_puts_the_triggers_back_before_the_unlock(endpoints, monkeypatch):
    """The first attempt gives up once the triggers are on the new table (as when the RENAME does not queue within
    the window): they go back to the original under the lock, so no write runs without them, and the next attempt
    swaps."""
    table, db = "orders", "trig_rolled_back"
    conn = db_conn(endpoints)
    audited_table(conn, db, table, rows=5_000)
    before = triggers_of(conn, db, table)
    real_queue = Cutover._queue_rename
    given_up: list[list[tuple]] = []

    def give_up_once(self, renamer, deadline):
        if not given_up:
            given_up.append(triggers_of(conn, db, helper_table_name(table, "new")))
            raise CutoverAborted("the RENAME session did not queue within the window")
        return real_queue(self, renamer, deadline)
    monkeypatch.setattr(Cutover, "_queue_rename", give_up_once)
    with Ledger(endpoints.mysql, db, table, writers=8, seed=11) as ledger:
        ledger.wait_for_writes(200)
        spec = MigrationSpec(algorithm="copy", database=db, table=table, alter="ADD COLUMN extra1 INT NULL",
                             copy_workers=2, apply_workers=2, chunk_size=5_000, batch_size=1_000, partitions=4,
                             max_lag_events=200).validate()
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        ledger.wait_for_writes(200)
    assert [name for name, *_ in given_up[0]] == [name for name, *_ in before], "the first attempt moved them"
    ledger.assert_kept(conn)
    assert audit_problems(conn, db, ledger) == []
    assert triggers_of(conn, db, table) == before and guards(conn, db) == []
    query(conn, f"DROP DATABASE `{db}`")


def one_trigger_table(conn, db: str) -> None:
    query(conn, f"DROP DATABASE IF EXISTS `{db}`")
    query(conn, f"CREATE DATABASE `{db}`")
    query(conn, f"CREATE TABLE `{db}`.orders (id INT PRIMARY KEY, note VARCHAR(20) NOT NULL DEFAULT '')")
    query(conn, f"CREATE TRIGGER `{db}`.orders_bi BEFORE INSERT ON `{db}`.orders FOR EACH ROW SET NEW.note = 'x'")


def test_a_table_with_triggers_is_refused_for_a_move_naming_why(endpoints):
    conn = db_conn(endpoints)
    one_trigger_table(conn, "trig_move")
    spec = MigrationSpec(database="trig_move", table="orders", alter="", target_server=True)
    with pytest.raises(PreflightError, match=r"table trig_move.orders has triggers \(orders_bi\): a move to another "
                                             "server does not carry triggers"):
        check_triggers_movable(conn, spec)
    query(conn, "DROP DATABASE trig_move")


@pytest.mark.exclusive   # it sets log_bin_trust_function_creators, which every session of the server reads
def test_a_trigger_of_another_definer_needs_a_privilege_to_set_it(endpoints):
    """With SUPER out of the way (log_bin_trust_function_creators on), creating a trigger as another user needs SET
    USER: named before anything is made."""
    conn = db_conn(endpoints)
    one_trigger_table(conn, "trig_definer")   # defined by the tool's own user, not the one below
    query(conn, "CREATE USER IF NOT EXISTS 'osc_no_set_user'@'%' IDENTIFIED BY 'x'")
    query(conn, "GRANT SELECT, TRIGGER ON `trig_definer`.* TO 'osc_no_set_user'@'%'")
    trusted = scalar(conn, "SELECT @@GLOBAL.log_bin_trust_function_creators")
    query(conn, "SET GLOBAL log_bin_trust_function_creators = ON")
    try:
        limited = connect(dataclasses.replace(endpoints.mysql, user="osc_no_set_user", password="x"))
        spec = MigrationSpec(database="trig_definer", table="orders", alter="ADD COLUMN extra INT NULL")
        with pytest.raises(PreflightError, match=r"as their definers \(osc@%\): creating a trigger for another "
                                                 "definer needs SET USER"):
            check_triggers_movable(limited, spec)
        limited.close()
    finally:
        query(conn, f"SET GLOBAL log_bin_trust_function_creators = {int(trusted)}")
        query(conn, "DROP USER 'osc_no_set_user'@'%'")
        query(conn, "DROP DATABASE trig_definer")


def test_a_trigger_made_in_another_character_set_is_created_again_in_it(endpoints):
    """Its body is sent in its character_set_client under its collation_connection: a latin1 'é' stays one
    character (LENGTH 1, as in latin1; 2 in utf8mb4) and the value written is the same."""
    conn = db_conn(endpoints)
    one_trigger_table(conn, "trig_charset")
    query(conn, "DROP TRIGGER trig_charset.orders_bi")
    latin1 = pymysql.connect(host=endpoints.mysql.host, port=endpoints.mysql.port, user=endpoints.mysql.user,
                             password=endpoints.mysql.password, charset="latin1", autocommit=True)
    with latin1.cursor() as cur:
        cur.execute("CREATE TRIGGER trig_charset.orders_bi BEFORE INSERT ON trig_charset.orders FOR EACH ROW "
                    "SET NEW.note = CONCAT('caf', 'é', LENGTH('é'))".encode("latin1"))
    latin1.close()
    query(conn, "CREATE TABLE trig_charset.copy LIKE trig_charset.orders")
    original = read_triggers(conn, "trig_charset", "orders")[0]
    create_trigger(conn, original, "trig_charset", "copy", "copy_bi")
    again = read_triggers(conn, "trig_charset", "copy")[0]
    assert dataclasses.replace(again, name=original.name) == original
    query(conn, "INSERT INTO trig_charset.orders (id) VALUES (1)")
    query(conn, "INSERT INTO trig_charset.copy (id) VALUES (1)")
    assert query(conn, "SELECT note FROM trig_charset.orders") == query(conn, "SELECT note FROM trig_charset.copy") \
        == [("café1",)]
    query(conn, "DROP DATABASE trig_charset")


def test_a_dry_run_tries_the_triggers_on_the_altered_table_and_leaves_nothing(endpoints):
    conn = db_conn(endpoints)
    one_trigger_table(conn, "trig_dry")
    result = cli("migrate", "--table", "trig_dry.orders", "--alter", "ADD COLUMN extra INT NULL", "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dry run: triggers orders_bi fit the altered table" in result.stderr   # where progress goes
    assert [r[0] for r in query(conn, "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS "
                                      "WHERE TRIGGER_SCHEMA='trig_dry'")] == ["orders_bi"]
    tables = query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA='trig_dry'")
    assert tables == [("orders",)]
    broken = cli("migrate", "--table", "trig_dry.orders", "--alter", "DROP COLUMN note", "--dry-run")
    assert broken.returncode == 2 and "trigger orders_bi of trig_dry.orders cannot be created" in broken.stderr
    query(conn, "DROP DATABASE trig_dry")
