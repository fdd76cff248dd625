"""Load-based throttling against the real server: --max-load holds the work back while the server's
own status counter is over the limit and postpones the cutover's locks, --critical-load stops the migration
(resumable), also when the load rises just before the swap, and a bad or already-reached threshold is refused
before anything is made."""
from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from cutover import move as move_module
from cutover import swap as swap_module
from cutover.compare import compare_tables
from core.context import STATUS_REREAD_S
from core.db import connect, query
from core.endpoints import MySQLAddress
from throttle.load import CriticalLoad
from core.spec import MigrationSpec, helper_table_name
from migration.runner import Runner
from monitor.progress import Progress
from tests.integration.helpers import (chunk_progress, cli, db_conn, fresh_table, latest_migration_id, leftovers,
                                       migration_row, new_migration_row, start_cli, status_doc, table_columns,
                                       table_is_original, target_schema, wait_for, waiting_for_cutover,
                                       fresh_ledger_table)
from tests.integration.ledger import Ledger

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]   # alone: its SELECT SLEEP sessions are the load

DB = "throttle"
MOVED_DB = "throttle_moved"   # the schema on the target server
ROWS = 60_000
ALTER = "MODIFY k BIGINT NOT NULL DEFAULT 0"
SLEEPERS = 30          # sessions in SELECT SLEEP count in Threads_running
LIMIT = "Threads_running=25"


class Sleepers:
    """SLEEPERS sessions of the server at `address`, each running SELECT SLEEP until stopped: its Threads_running
    rises by that many."""

    def __init__(self, address: MySQLAddress) -> None:
        self.address = address
        self.conns = [connect(address) for _ in range(SLEEPERS)]
        self.threads = [threading.Thread(target=self._sleep, args=(c,), daemon=True) for c in self.conns]

    @staticmethod
    def _sleep(conn) -> None:
        try:
            query(conn, "SELECT SLEEP(600)")
        except Exception:  # noqa: BLE001 - ended by KILL QUERY
            pass

    def __enter__(self) -> "Sleepers":
        for thread in self.threads:
            thread.start()
        killer = connect(self.address)
        wait_for(lambda: int(query(killer, "SHOW GLOBAL STATUS LIKE 'Threads_running'")[0][1]) > SLEEPERS,
                 30, "the sleeping sessions to run")
        killer.close()
        return self

    def __exit__(self, *exc) -> None:
        killer = connect(self.address)
        for conn in self.conns:
            query(killer, f"KILL QUERY {conn.thread_id()}")
        for thread in self.threads:
            thread.join(30)
        for conn in self.conns:
            conn.close()
        killer.close()


def test_max_load_holds_the_copy_back_until_the_load_drops(endpoints, cli_log):
    table = "held"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=ROWS, seed=21)
    earlier = latest_migration_id(conn, DB, table)
    with Sleepers(endpoints.mysql):
        proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, "--max-load", LIMIT,
                         "--copy-workers", "2", "--chunk-size", "10000", "--batch-size", "1000",
                         "--target-batch-time", "0", log=cli_log)
        try:
            migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
            wait_for(lambda: (status_doc(DB, table)["throttle_reason"] or "").startswith("Threads_running="), 60,
                     "status to show the throttle")
            time.sleep(2.0)   # an observation window: nothing may be copied while the load is over the limit
            assert chunk_progress(conn, migration.id)[0] == 0 and migration_row(conn, DB, table).stage == "copy"
        except BaseException:
            proc.kill()
            raise
    try:
        assert proc.wait(300) == 0, cli_log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    log = cli_log.read_text()
    assert "throttled: Threads_running=" in log and "throttle released" in log
    assert migration_row(conn, DB, table).status == "done"
    assert compare_tables(conn, DB, helper_table_name(table, "old"), table).equal


def test_max_load_postpones_the_cutover_until_the_load_drops(endpoints, conn, cli_log, tmp_path):
    """A cutover asked for while the server is over --max-load waits, locking nothing, and swaps once the load
    drops (as gh-ost's throttle postpones its cut-over): its locks would queue the application's writes behind a
    busy server, and the appliers, held back by the same limit, fall behind meanwhile. Writers run throughout;
    every acknowledged write must be in the final table."""
    table = "held_cutover"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=4)
    asked_log = tmp_path / "cutover.log"
    with Ledger(endpoints.mysql, DB, table, writers=4, seed=14) as ledger:
        ledger.wait_for_writes(200)
        coordinator = waiting_for_cutover(conn, DB, table, "--alter", "ADD COLUMN note INT NULL", "--partitions", "4",
                                          "--chunk-size", "2500", "--max-load", LIMIT,
                                          # no wait for the lag: only the throttle may hold the lock back
                                          "--max-lag", "1000000", log=cli_log)
        asked = None
        try:
            with Sleepers(endpoints.mysql):
                asked = start_cli("cutover", "--table", f"{DB}.{table}", log=asked_log)
                wait_for(lambda: "cutover: held while throttled (Threads_running=" in cli_log.read_text()
                         or coordinator.poll() is not None, 120, "the cutover to be held back")
                assert coordinator.poll() is None, cli_log.read_text()[-3000:]
                ledger.wait_for_writes(100)   # writes go on while it is held
                assert "note" not in table_columns(conn, DB, table)   # not swapped while over the limit
                assert asked.poll() is None and migration_row(conn, DB, table).stage == "cutover"
            assert exit_code(asked, asked_log) == 0
            assert exit_code(coordinator, cli_log) == 0
            assert "throttled (Threads_running=" in asked_log.read_text()   # the asking command says why it waits
        finally:
            stop_all(coordinator, asked)
        ledger.wait_for_writes(200)   # writes after the swap count as much as any other
    ledger.assert_kept(conn)
    assert "cutover: throttle released" in cli_log.read_text()
    assert "note" in table_columns(conn, DB, table) and migration_row(conn, DB, table).status == "done"


@contextmanager
def cutover_asked_while_held(endpoints, conn, table: str, log: Path, asked_log: Path,
                             *options: str) -> Iterator[tuple[subprocess.Popen, subprocess.Popen]]:
    """A fresh table's `migrate --cutover manual` (its output in `log`), asked to cut over by `stream-osc cutover`
    (in `asked_log`) while SLEEPERS sessions keep --max-load holding the swap back; yields (coordinator, asking
    command) with the load still there. Whichever still runs afterwards is killed."""
    fresh_ledger_table(conn, DB, table, rows=2_000, writers=2)
    coordinator = waiting_for_cutover(conn, DB, table, "--alter", "ADD COLUMN note INT NULL", "--partitions", "4",
                                      "--max-load", LIMIT, *options, log=log)
    asked = None
    try:
        with Sleepers(endpoints.mysql):
            asked = start_cli("cutover", "--table", f"{DB}.{table}", log=asked_log)
            wait_for(lambda: "cutover: held while throttled" in log.read_text() or coordinator.poll() is not None,
                     120, "the cutover to be held back")
            yield coordinator, asked
    finally:
        stop_all(coordinator, asked)


def said_unswapped(conn, table: str, asked_log: Path) -> str:
    """What the asking command said, checked to show that the table was not swapped, by the coordinator or by
    the asking command itself (the coordinator's stop is its answer: no second try)."""
    said = asked_log.read_text()
    assert "cutting over in this process" not in said
    assert "note" not in table_columns(conn, DB, table)
    assert not table_columns(conn, DB, helper_table_name(table, "old"))
    return said


def test_cutover_asked_of_a_coordinator_that_meets_the_critical_load_exits_as_it_does(endpoints, conn, cli_log,
                                                                                      tmp_path):
    """`stream-osc cutover` asks the waiting coordinator; held back by --max-load, the coordinator then reaches its
    --critical-load and stops unswapped. The asking command must say so with the same exit code (4: resumable
    once the load is gone), not as any other stop, and the original table must be untouched."""
    table, asked_log = "asked_critical", tmp_path / "cutover.log"
    with cutover_asked_while_held(endpoints, conn, table, cli_log, asked_log,
                                  "--critical-load", f"Threads_running={2 * SLEEPERS}") as (coordinator, asked):
        with Sleepers(endpoints.mysql):
            assert exit_code(coordinator, cli_log) == 4
            assert exit_code(asked, asked_log) == 4, asked_log.read_text()[-3000:]
    assert "critical load reached (Threads_running=" in said_unswapped(conn, table, asked_log)
    assert migration_row(conn, DB, table).stage == "cutover"
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0


@pytest.mark.parametrize("ending", ["aborted", "source_altered"])
def test_cutover_asked_of_a_coordinator_that_stops_for_good_exits_as_it_does(endpoints, conn, cli_log, tmp_path,
                                                                             ending):
    """`stream-osc cutover` asks the waiting coordinator, whose swap --max-load holds back; the migration is then
    aborted, or its source altered. The coordinator stops with exit 5 (nothing can continue it), and so must the
    asking command: not 3, which tells a scheduler that `stream-osc resume` would continue it."""
    table, asked_log = f"asked_{ending}", tmp_path / "cutover.log"
    with cutover_asked_while_held(endpoints, conn, table, cli_log, asked_log) as (coordinator, asked):
        if ending == "aborted":
            aborted = cli("abort", "--table", f"{DB}.{table}")
            assert aborted.returncode == 0, aborted.stdout + aborted.stderr
        else:
            query(conn, f"ALTER TABLE {DB}.{table} ADD COLUMN added_meanwhile INT NULL")
        assert exit_code(coordinator, cli_log) == 5
        assert exit_code(asked, asked_log) == 5, asked_log.read_text()[-3000:]
    said = said_unswapped(conn, table, asked_log)
    assert ("was aborted" if ending == "aborted" else "was altered during the migration") in said, said[-3000:]
    if ending == "source_altered":
        assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def holds_still(read: Callable[[], object], for_s: float) -> Callable[[], bool]:
    """A condition true once read() has returned the same value for `for_s` seconds."""
    last: list = [read(), time.monotonic()]

    def still() -> bool:
        now = read()
        if now != last[0]:
            last[:] = [now, time.monotonic()]
        return time.monotonic() - last[1] >= for_s
    return still


def test_critical_load_stops_the_migration_and_resume_keeps_the_limit_unless_given_another(endpoints, cli_log):
    table = "critical"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=ROWS, seed=22)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, "--critical-load", LIMIT,
                     "--copy-workers", "2", "--chunk-size", "10000", "--batch-size", "300",
                     "--target-batch-time", "0", log=cli_log)
    try:
        migration = wait_for(lambda: new_migration_row(conn, DB, table, earlier), 60, "the migration row")
        wait_for(lambda: chunk_progress(conn, migration.id)[0] > 0, 60, "the copy to start")
        assert cli("pause", "--table", f"{DB}.{table}").returncode == 0
        # every worker holds once its status is re-read and its batch is done: not before, or one that still saw
        # "running" would meet the load below while paused and stop the migration before `resume` un-pauses it
        wait_for(holds_still(lambda: chunk_progress(conn, migration.id), 2 * STATUS_REREAD_S), 60, "the pause")
        with Sleepers(endpoints.mysql):
            assert cli("resume", "--table", f"{DB}.{table}").returncode == 0
            assert exit_code(proc, cli_log) == 4   # stopped by --critical-load, resumable
            again = cli("resume", "--table", f"{DB}.{table}", "--quiet")   # the limit is kept with the migration
            assert again.returncode == 4 and "critical load reached" in again.stderr, again.stderr[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "critical load reached (Threads_running=" in cli_log.read_text()
    assert table_is_original(conn, DB, table)
    stopped = migration_row(conn, DB, table)
    # stopped before the swap: a copy this small can end before the pause lands, and the check then
    # stops the migration in validation or in cutover, before its lock
    assert stopped.id == migration.id and stopped.stage in ("copy", "apply", "validate", "cutover")

    assert cli("set", "--table", f"{DB}.{table}", "critical-load=Threads_running=26").returncode == 0
    with Sleepers(endpoints.mysql):   # over the stored limit and the set one: only the limit given now lets it finish
        resumed = cli("resume", "--table", f"{DB}.{table}", "--critical-load", "Threads_running=1000")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "critical_load='Threads_running=1000' as given" in resumed.stdout + resumed.stderr
    assert migration_row(conn, DB, table).status == "done"
    assert compare_tables(conn, DB, helper_table_name(table, "old"), table).equal


def stop_all(*procs: subprocess.Popen | None) -> None:
    """Kill whichever of `procs` still runs, and reap it."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(30)


def exit_code(proc: subprocess.Popen, log, timeout: float = 120) -> int:
    """The process's exit code; a failure showing the end of its log if it has not exited within `timeout`."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout:.0f} s; its log ends:\n{log.read_text()[-3000:]}")


# The move variant runs with the slow set: an in-process migration whose applier close meets librdkafka's close
# hang (streams/closing.py) freezes the whole test process, and with it `make test`, where a CLI subprocess would
# only fail its test; seen once here, in this variant.
@pytest.mark.parametrize("move", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["swap", "move_loaded_on_the_target_server"])
def test_critical_load_reached_while_no_worker_reads_it_stops_the_migration_before_the_lock(endpoints, conn,
                                                                                            monkeypatch, move):
    """Workers read the load between their batches, and none runs while a swap is attempted (the appliers are
    stopped for it): a load that rises then must still stop the migration before the lock, and the migration,
    resumed once the load is gone, must lose no acknowledged write. (The validation snapshot's lock goes
    through the same `Cutover._lock`.)"""
    table = f"critical_at_swap_{int(move)}"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=4)
    cutover_class = move_module.MoveCutover if move else swap_module.Cutover
    load = ExitStack()
    attempts: list[str] = []
    attempt_now = cutover_class.attempt

    def attempt_under_load(self, *args):
        attempts.append("attempt")
        if len(attempts) == 1:   # the appliers are stopped by now: only the attempt itself can see the load
            load.enter_context(Sleepers(endpoints.target() if move else endpoints.mysql))
        return attempt_now(self, *args)

    monkeypatch.setattr(cutover_class, "attempt", attempt_under_load)
    if move:
        monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)
    spec = MigrationSpec(algorithm="copy", database=DB, table=table, alter="ADD COLUMN note INT NULL", copy_workers=2,
                         apply_workers=2, chunk_size=2_500, partitions=4, critical_load=LIMIT, target_server=move,
                         target_table=f"{MOVED_DB}.{table}" if move else "").validate()
    with target_schema(endpoints, move, MOVED_DB) as target:
        with Ledger(endpoints.mysql, DB, table, writers=4, seed=13) as ledger:
            ledger.wait_for_writes(200)
            with load, pytest.raises(CriticalLoad, match="critical load reached \\(Threads_running="):
                Runner(endpoints, spec, Progress(quiet=True)).run()
            assert attempts == ["attempt"]
            original = table_columns(conn, DB, table)
            assert original and "note" not in original   # the original, in place
            assert not table_columns(conn, DB, helper_table_name(table, "old"))   # nothing renamed
            stopped = migration_row(conn, DB, table)
            assert stopped.status == "running" and "critical load reached" in (stopped.error or "")
            assert stopped.stage == "cutover"
            monkeypatch.undo()
            if move:
                monkeypatch.setenv("STREAM_OSC_TARGET_DSN", endpoints.target_dsn)
            done = cli("resume", "--table", f"{DB}.{table}")
            assert done.returncode == 0, done.stderr[-3000:]
            if not move:   # a moved table's source is renamed away: later writes to it fail, as they must
                ledger.wait_for_writes(200)   # writes after the swap count as much as any other
        ledger.assert_kept(conn, (target, (MOVED_DB, table)) if target is not None else None)
        assert migration_row(conn, DB, table).status == "done"


def migrate_under_writers(endpoints, conn, spec: MigrationSpec, load: ExitStack, seed: int) -> None:
    """Run `spec` (ALTER adding `note`) to its end in this process under 4 unthrottled ledger writers, `load`
    released however it ends; every acknowledged write, those after the swap included, must be in the final
    table."""
    with Ledger(endpoints.mysql, DB, spec.table, writers=4, seed=seed) as ledger:
        ledger.wait_for_writes(200)
        try:
            assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        finally:
            load.close()
        ledger.wait_for_writes(200)   # writes after the swap count as much as any other
    ledger.assert_kept(conn)
    assert "note" in table_columns(conn, DB, spec.table) and migration_row(conn, DB, spec.table).status == "done"


# With the slow set (`make test-slow`): a load injected inside an attempt, in process, as the move variant above;
# `make test` keeps the CLI test of the hold before an attempt within its time.
@pytest.mark.slow
def test_max_load_reached_during_the_attempts_catch_up_postpones_its_lock(endpoints, conn, monkeypatch):
    """The coordinator looks at the throttle before an attempt, but the attempt then catches up for seconds with
    the appliers stopped: a load that rises meanwhile must still keep its lock from being requested, without
    counting as a failed attempt (one is allowed here), and the migration must swap once the load drops, losing
    no acknowledged write."""
    table = "max_load_at_swap"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=4)
    load = ExitStack()
    results: list[swap_module.CutoverResult] = []
    attempt_now = swap_module.Cutover.attempt

    def attempt_under_load(self, *args):
        if not results:   # the coordinator has just found the load below the limit
            load.enter_context(Sleepers(endpoints.mysql))
        result = attempt_now(self, *args)
        results.append(result)
        load.close()   # the load drops once the attempt has answered
        return result

    monkeypatch.setattr(swap_module.Cutover, "attempt", attempt_under_load)
    spec = MigrationSpec(algorithm="copy", database=DB, table=table, alter="ADD COLUMN note INT NULL", copy_workers=2,
                         apply_workers=2, chunk_size=2_500, partitions=4, max_load=LIMIT, cutover_attempts=1).validate()
    migrate_under_writers(endpoints, conn, spec, load, seed=15)
    first = results[0]
    assert first.throttled and not first.swapped and first.blocked_ms == 0, first   # no lock was requested
    assert "Threads_running=" in first.reason
    assert [r.swapped for r in results[1:]] == [True]


@pytest.mark.slow
def test_max_load_reached_before_the_validation_snapshots_lock_postpones_it(endpoints, conn, monkeypatch):
    """The validation snapshot takes a lock as a swap does, after a catch-up of its own: a load that rises during
    it must keep that lock from being requested too. Validation must then take its snapshot once the load drops
    (not fall back to comparing the live tables), and the migration finish losing no acknowledged write."""
    table = "max_load_at_snapshot"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=4)
    load = ExitStack()
    tries: list[str] = []
    snapshots_now = swap_module.Cutover.consistent_snapshots

    def snapshots_under_load(self, *args):
        if not tries:   # the coordinator has just found the load below the limit
            load.enter_context(Sleepers(endpoints.mysql))
        try:
            blocked = snapshots_now(self, *args)
            tries.append("taken")
            return blocked
        except swap_module.CutoverAborted as exc:
            tries.append("throttled" if exc.throttled else f"aborted: {exc}")
            raise
        finally:
            load.close()   # the load drops once the try has answered

    monkeypatch.setattr(swap_module.Cutover, "consistent_snapshots", snapshots_under_load)
    spec = MigrationSpec(algorithm="copy", database=DB, table=table, alter="ADD COLUMN note INT NULL", copy_workers=2,
                         apply_workers=2, chunk_size=2_500, partitions=4, max_load=LIMIT).validate()
    migrate_under_writers(endpoints, conn, spec, load, seed=16)
    assert tries == ["throttled", "taken"]


@pytest.mark.parametrize("option, value, message", [
    ("--max-load", "Threads_running", "is not STATUS_VARIABLE=NUMBER"),
    ("--max-load", "No_such_counter=5", "no numeric global status variable No_such_counter"),
    ("--critical-load", "Uptime=1", "--critical-load is already reached (Uptime="),
])
def test_bad_or_reached_thresholds_are_refused_and_change_nothing(endpoints, option, value, message):
    table = "refused"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=1_000, seed=23)
    result = cli("migrate", "--table", f"{DB}.{table}", "--alter", ALTER, option, value, "--quiet")
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert leftovers(endpoints, DB, table) == []
