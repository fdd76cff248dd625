"""A session holding the table's metadata lock neither stalls the application behind the tool's locks nor loses writes.

The hazard (docs/cutover.md, "Look before locking"): a lock request queued behind a long
transaction blocks every later statement on the table. These tests hold the table with an open
transaction, as an application or a forgotten console would, while unthrottled writers run, and
check that the tool looks before it locks, queues only briefly when it does lock, waits (or, when
asked, kills) and still keeps every acknowledged write.
"""
from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable

import pymysql
import pytest

from core.db import connect, qualified, query
from core.endpoints import Endpoints
from core.spec import MigrationSpec
from cutover.blockers import Detection, find_blockers
from cutover.short_lock import LockNotTaken, lock_tables_briefly
from cutover.swap import Cutover, CutoverAborted
from core.state import StateStore
from core.table import load_pair
from migration.runner import Runner
from monitor.progress import Progress
from tests.integration.helpers import (cli, db_conn, fresh_ledger_table, leftovers, migration_row, run_context,
                                       wait_for, waiting_without_coordinator)
from tests.integration.ledger import Ledger, create_ledger_table

pytestmark = pytest.mark.integration

DB = "mdl_guard"
WRITERS = 8
LOOSE_WRITE_BOUND_S = 2.0   # the old behaviour held writes for the whole 3 s window, each time


class HeldTransaction(threading.Thread):
    """An application session that opens a transaction on the table, runs `statement` and keeps it open
    until `release()` says so or `end()` is called (at most `hold_s`); `outcome` is "committed" or the
    error its COMMIT got."""

    def __init__(self, endpoints: Endpoints, table: str, statement: str,
                 release: Callable[["HeldTransaction"], bool] = lambda held: False, hold_s: float = 120.0) -> None:
        super().__init__(daemon=True)
        self.conn = connect(endpoints.mysql, database=DB)
        self.connection_id = self.conn.thread_id()
        self.statement = statement.format(table=qualified(DB, table))
        self.release, self.hold_s = release, hold_s
        self.opened_at = self.closed_at = 0.0
        self.outcome = ""
        self.ended = threading.Event()
        query(self.conn, "BEGIN")
        query(self.conn, self.statement)
        self.opened_at = time.time()

    def end(self) -> None:
        self.ended.set()

    def run(self) -> None:
        deadline = time.monotonic() + self.hold_s
        while time.monotonic() < deadline and not self.ended.is_set() and not self.release(self):
            self.ended.wait(0.2)
        try:
            query(self.conn, "COMMIT")
            self.outcome = "committed"
        except pymysql.err.MySQLError as exc:
            self.outcome = f"{type(exc).__name__}: {exc}"
        finally:
            self.closed_at = time.time()
            self.conn.close()


def shown_as_blocker(table: str, since: list[float]) -> Callable[[HeldTransaction], bool]:
    """Release condition: `status --json` has listed the session among the blockers for 2 s."""
    def seen(held: HeldTransaction) -> bool:
        if not since:
            done = cli("status", "--table", f"{DB}.{table}", "--json")
            doc = json.loads(done.stdout) if done.returncode == 0 else {}
            if any(b.get("connection_id") == held.connection_id for b in doc.get("blockers") or []):
                since.append(time.monotonic())
        return bool(since) and time.monotonic() - since[0] >= 2.0
    return seen


def said(out: io.StringIO, text: str) -> Callable[[HeldTransaction], bool]:
    """Release condition: the migration's progress output has said `text` (then 2 s more)."""
    seen: list[float] = []

    def check(_: HeldTransaction) -> bool:
        if not seen and text in out.getvalue():
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= 2.0
    return check


def spec_for(table: str, **options) -> MigrationSpec:
    return MigrationSpec(algorithm="copy", database=DB, table=table, alter="ADD COLUMN note INT NULL", copy_workers=2,
                         apply_workers=2,
                         chunk_size=5_000, batch_size=1_000, partitions=4, keep_old=False, max_lag_events=200,
                         **options).validate()


@pytest.mark.parametrize("method", [Detection.METADATA_LOCK_INFO, Detection.TRANSACTIONS])
def test_a_transaction_idle_on_the_table_is_found_without_locking(endpoints, conn, method):
    create_ledger_table(conn, DB, "held", rows=100, writers=1)
    query(conn, "CREATE DATABASE IF NOT EXISTS mdl_elsewhere")
    query(conn, "CREATE TABLE IF NOT EXISTS mdl_elsewhere.other (id INT PRIMARY KEY)")
    elsewhere = connect(endpoints.mysql, database="mdl_elsewhere")
    query(elsewhere, "BEGIN")
    query(elsewhere, "SELECT * FROM mdl_elsewhere.other")
    held = HeldTransaction(endpoints, "held", "SELECT * FROM {table} LIMIT 3")
    try:
        found = wait_for(lambda: find_blockers(conn, DB, "held", True, method), timeout=20,
                         what=f"the open transaction to be found through {method}")
        assert [b.connection_id for b in found] == [held.connection_id]
        blocker = found[0]
        assert (blocker.user, blocker.statement, blocker.rows_modified) == (endpoints.mysql.user, None, 0)
        assert blocker.seconds >= 1.0 and blocker.host
    finally:
        held.end()
        held.start()
        held.join()
        elsewhere.close()
    assert held.outcome == "committed"
    # InnoDB answers INNODB_TRX from a copy it refreshes only when not read for 100 ms, and the look above read it.
    wait_for(lambda: find_blockers(conn, DB, "held", True, method) == [], timeout=2,
             what=f"the committed transaction to leave the blockers found through {method}")


def test_a_lock_request_queues_in_front_of_writers_only_briefly(endpoints, conn):
    table = "briefly"
    create_ledger_table(conn, DB, table, rows=1_000, writers=4)
    held = HeldTransaction(endpoints, table, "SELECT * FROM {table} LIMIT 3")
    lock_conn = db_conn(endpoints)
    with Ledger(endpoints.mysql, DB, table, writers=4, seed=3) as ledger:
        ledger.wait_for_writes(100)
        # Undetected holder: every try queues, and gives up after the short wait.
        started = time.time()
        with pytest.raises(LockNotTaken) as undetected:
            lock_tables_briefly(lock_conn, [qualified(DB, table)], True, 0.3, 2, lambda: [])
        assert undetected.value.blockers == ()
        ledger.wait_for_writes(100)
        queued_worst = ledger.worst_latency(started, time.time())
        # Detected holder: no lock is requested at all, however long a try could wait.
        wait_for(lambda: find_blockers(lock_conn, DB, table, True), timeout=20, what="the holder to be found")
        started = time.time()
        with pytest.raises(LockNotTaken) as detected:
            lock_tables_briefly(lock_conn, [qualified(DB, table)], True, 5.0, 1,
                                lambda: find_blockers(lock_conn, DB, table, True))
        checked_s = time.time() - started
        ledger.wait_for_writes(100)
        looked_worst = ledger.worst_latency(started, time.time())
        held.end()
        held.start()
        held.join()
        wait_for(lambda: find_blockers(lock_conn, DB, table, True) == [], timeout=2,
                 what="the committed holder to leave the blockers")
        assert lock_tables_briefly(lock_conn, [qualified(DB, table)], True, 0.3, 5,
                                   lambda: find_blockers(lock_conn, DB, table, True)) >= 1
        query(lock_conn, "UNLOCK TABLES")
    lock_conn.close()
    print(f"writers' worst latency: {queued_worst:.3f} s behind 0.3 s tries, {looked_worst:.3f} s while looking")
    assert queued_worst < 1.0, f"a 0.3 s try held writes for {queued_worst:.2f} s"
    assert [b.connection_id for b in detected.value.blockers] == [held.connection_id]
    assert checked_s < 1.0 and looked_worst < 1.0, "a lock was queued although the holder was known"
    assert ledger.errors() == [] and ledger.missing(conn) == []


def test_a_transaction_holding_the_table_stalls_no_write_and_loses_none(endpoints, conn):
    """The seed scenario: a transaction reads a few rows and stays open while the table migrates under
    writes; another one takes hold of the table at the cutover. The migration waits for each, writes
    are never queued behind the tool for long, and every acknowledged write is in the final table."""
    table = "orders"
    create_ledger_table(conn, DB, table, rows=20_000, writers=WRITERS)
    out = io.StringIO()
    at_validate = HeldTransaction(endpoints, table, "SELECT * FROM {table} WHERE id > 100 LIMIT 3",
                                  release=shown_as_blocker(table, []))
    at_cutover: list[HeldTransaction] = []

    def hold_at_cutover() -> None:
        watch = db_conn(endpoints)
        wait_for(lambda: getattr(migration_row(watch, DB, table), "stage", "") == "cutover", timeout=300,
                 what="the cutover stage")
        watch.close()
        held = HeldTransaction(endpoints, table, "SELECT * FROM {table} WHERE id > 200 LIMIT 3",
                               release=said(out, "cutover: waiting for connection"), hold_s=60)
        at_cutover.append(held)
        held.run()

    cutover_holder = threading.Thread(target=hold_at_cutover, daemon=True)
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=11) as ledger:
        ledger.wait_for_writes(200)
        at_validate.start()
        cutover_holder.start()
        try:
            assert Runner(endpoints, spec_for(table), Progress(stream=out)).run() == 0
        finally:
            for held in (at_validate, *at_cutover):
                held.end()
        ledger.wait_for_writes(200)
        finished = time.time()
    at_validate.join()
    cutover_holder.join()
    progress = out.getvalue()
    # While a session held the table; the tool's own lock, taken after it ended, is bounded by the window.
    worst = max(ledger.worst_latency(held.opened_at, held.closed_at) for held in (at_validate, *at_cutover))
    print(f"writers' worst latency while the table was held: {worst:.3f} s; during the whole migration: "
          f"{ledger.worst_latency(at_validate.opened_at, finished):.3f} s\n{progress}")
    assert at_validate.outcome == "committed" and at_cutover and at_cutover[0].outcome == "committed"
    assert f"validate: waiting for connection {at_validate.connection_id}" in progress
    assert f"cutover: waiting for connection {at_cutover[0].connection_id}" in progress
    migration = migration_row(conn, DB, table)
    assert migration.cutover_at >= at_cutover[0].closed_at - 1.0, "swapped while the table was held"
    assert worst < LOOSE_WRITE_BOUND_S, f"a write waited {worst:.2f} s behind the tool's lock"
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    assert leftovers(endpoints, DB, table) == []


def test_force_kill_ends_a_blocker_but_spares_a_transaction_with_many_changes(endpoints, conn):
    table = "killed"
    create_ledger_table(conn, DB, table, rows=20_000, writers=WRITERS)
    out = io.StringIO()
    idle = HeldTransaction(endpoints, table, "SELECT * FROM {table} WHERE id > 100 LIMIT 3")
    changed = HeldTransaction(endpoints, table, "UPDATE {table} SET payload = 'kept' WHERE id BETWEEN 1001 AND 1003",
                              release=said(out, "not killing connection"), hold_s=60)
    spec = spec_for(table, force_kill_blockers_after_s=2.0, force_kill_max_rows=2)
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=5) as ledger:
        ledger.wait_for_writes(200)
        idle.start()
        changed.start()
        try:
            assert Runner(endpoints, spec, Progress(stream=out)).run() == 0
        finally:
            idle.end()
            changed.end()
        ledger.wait_for_writes(200)
    idle.join()
    changed.join()
    progress = out.getvalue()
    print(progress)
    assert f"killed connection {idle.connection_id}" in progress
    assert idle.outcome != "committed", "the idle transaction was not killed"
    assert f"not killing connection {changed.connection_id}" in progress
    assert changed.outcome == "committed", f"a transaction that changed 3 rows (limit 2) was killed: {changed.outcome}"
    assert [r[0] for r in query(conn, f"SELECT payload FROM {qualified(DB, table)} WHERE id BETWEEN 1001 AND 1003")] \
        == ["kept"] * 3
    assert ledger.errors() == []
    ledger.filler_rewritten(range(1001, 1004), "kept")   # the spared transaction's acknowledged update
    assert ledger.missing(conn) == []


def server_counters(conn) -> dict[str, int]:
    """Statements of the kinds an attempt prepares with: the sentry (CREATE TABLE), the lock, the fence."""
    return {name: int(value) for name, value in query(conn, "SHOW GLOBAL STATUS WHERE Variable_name IN "
                                                            "('Com_create_table', 'Com_lock_tables', 'Com_update')")}


@pytest.mark.exclusive   # the server's statement counters are its measure
def test_while_a_session_holds_the_table_an_attempt_prepares_nothing_and_requests_no_lock(endpoints, conn):
    """A cutover attempt and a validation snapshot look for holders first: with one there, no sentry is made,
    no catch-up fence written, no lock requested; the holder is named so that the wait (and its kill clock)
    goes on."""
    table = "unprepared"
    fresh_ledger_table(conn, DB, table, rows=2_000, writers=1)
    spec = spec_for(table, cutover="manual")
    waiting_without_coordinator(conn, DB, table, "--alter", spec.alter, "--partitions", "4", "--chunk-size", "5000",
                                "--quiet")
    held = HeldTransaction(endpoints, table, "SELECT * FROM {table} LIMIT 3")
    try:
        wait_for(lambda: find_blockers(conn, DB, table, True), timeout=20, what="the holder to be found")
        migration = StateStore(conn, spec.metadata_schema).active(DB, table)
        cutover = Cutover(run_context(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table)), True)
        before = server_counters(conn)
        try:
            result = cutover.attempt(spec.cutover_window_s, "test:coordinator")
            with pytest.raises(CutoverAborted) as snapshot:
                cutover.consistent_snapshots(spec.cutover_window_s, [])
        finally:
            cutover.close()
        after = server_counters(conn)
    finally:
        held.end()
        held.start()
        held.join()
    assert not result.swapped
    assert [b.connection_id for b in result.blockers] == [held.connection_id]
    assert [b.connection_id for b in snapshot.value.blockers] == [held.connection_id]
    assert after == before, "a sentry, a fence or a lock request was made although the holder was known"
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []
