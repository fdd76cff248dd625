"""Copy yields to the application: while a tiny write of the application kind takes longer than
--max-app-latency, the copy runs one statement at a time (and says so in `status`), then returns to its
workers; every acknowledged write of the unthrottled writers is in the final table."""
from __future__ import annotations

import threading
import time

import pytest

from throttle.app_latency import LatencyProbe
from core.db import STATEMENT_TAG, DatabaseUnreachable, qualified, query
from core.spec import MigrationSpec, helper_table_name
from core.state import LATENCY_PROBES, StateStore
from core.state_records import capture_heartbeat_table
from core.stages import Stage
from throttle.yielding import BUSY_AT, Yielding
from stack.process import free_ports
from tests.integration.helpers import chunk_progress, cli, db_conn, fresh_table, latest_migration_id, leftovers, \
    new_migration_row, scrape, start_cli, status_doc, wait_for
from tests.integration.ledger import Ledger, create_ledger_table

pytestmark = [pytest.mark.integration, pytest.mark.exclusive]   # alone: the latency and activity it judges are global

DB = "yielding"
ROWS = 150_000   # in 100-row statements: a copy that lasts while the test watches it yield
HOLD_S = 0.3     # each hold of the probe row: six times the target below
METADATA = MigrationSpec.metadata_schema


class SlowApplicationWrites:
    """Makes the application's kind of write slow where the tool measures it: every probe row is held by a
    transaction again and again, so each probe write waits up to `hold_s`."""

    def __init__(self, endpoints, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self.conn = db_conn(endpoints)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        query(self.conn, f"CREATE DATABASE IF NOT EXISTS {METADATA}")
        StateStore(self.conn, METADATA).create_latency_probes_table()
        self.table = qualified(METADATA, LATENCY_PROBES)

    def _hold(self) -> None:
        while not self.stop.is_set():
            self.conn.begin()
            query(self.conn, f"SELECT n FROM {self.table} FOR UPDATE")   # the rows of probes started meanwhile too
            self.stop.wait(self.hold_s)
            self.conn.commit()
            self.stop.wait(0.02)

    def __enter__(self) -> "SlowApplicationWrites":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.conn.close()


def copy_statements_at_once(conn, new_table: str, seconds: float = 2.0, every_s: float = 0.02) -> tuple[int, int]:
    """Sample the server's sessions for `seconds`, every `every_s`: (the most sessions seen running a copy
    batch, an INSERT INTO the new table `new_table` over a key range, in one sample, how many samples saw at
    least one). The appliers' re-copies of changed keys (`… WHERE id IN (…)`) go on beside the copy while it
    yields and are not counted."""
    statement = f"{STATEMENT_TAG}INSERT INTO {qualified(DB, new_table)} "
    most = busy = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        running = [info for (info,) in query(conn, "SELECT INFO FROM information_schema.PROCESSLIST WHERE INFO LIKE %s",
                                             (statement.rstrip() + "%",))
                   if info.startswith(statement) and " IN (" not in info]
        most, busy = max(most, len(running)), busy + bool(running)
        time.sleep(every_s)
    return most, busy


def test_copy_runs_one_statement_at_a_time_while_application_writes_are_slow(endpoints, cli_log):
    table = "orders"
    conn = db_conn(endpoints)
    query(conn, f"DROP TABLE IF EXISTS {DB}.{helper_table_name(table, 'old')}")   # kept by an earlier run
    create_ledger_table(conn, DB, table, rows=ROWS, writers=2)
    earlier = latest_migration_id(conn, DB, table)
    with Ledger(endpoints.mysql, DB, table, writers=2, seed=13) as ledger:
        with SlowApplicationWrites(endpoints):
            proc = start_cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter",
                             "ADD COLUMN note INT NULL",
                             "--max-app-latency", "50ms", "--copy-workers", "4", "--chunk-size", "5000",
                             "--batch-size", "100", "--target-batch-time", "0", log=cli_log)
            try:
                wait_for(lambda: latest_migration_id(conn, DB, table) > earlier, 60, "the migration row")
                wait_for(lambda: "1 of 4 workers" in (status_doc(DB, table)["throttle_reason"] or ""), 120,
                         "status to show the copy yielding to the application")
                migration_id = latest_migration_id(conn, DB, table)
                copied_before = chunk_progress(conn, migration_id)[0]
                most, busy = copy_statements_at_once(conn, helper_table_name(table, "new"))
                copied_after = chunk_progress(conn, migration_id)[0]
                assert "1 of 4 workers" in (status_doc(DB, table)["throttle_reason"] or ""), \
                    "the copy stopped yielding while the application's writes were still slow"
                # the rest in full batches: what follows is the ledger's check, not the yield
                released = cli("set", "--table", f"{DB}.{table}", "batch-size=5000")
                assert released.returncode == 0, released.stderr
            except BaseException:
                proc.kill()
                raise
        assert proc.wait(300) == 0, cli_log.read_text()[-3000:]
        ledger.wait_for_writes(50)
    # the effect, not only the words: while yielding, the copy went on, never two statements at once
    assert copied_after > copied_before, (copied_before, copied_after)
    assert most <= 1, f"{most} copy statements ran at once while yielding ({busy} samples saw one running)"
    assert ledger.missing(conn) == []
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{helper_table_name(table, 'old')}"]
    assert "application write latency" in cli_log.read_text()


AUTO_ROWS = 200_000   # in 20-row statements: a copy that lasts while slow probe writes are judged
AUTO_HOLD_S = 0.05    # ten times the target or more, yet short enough for full seconds of probe samples
JUDGED_SLOW = 3       # seconds judged slow before the copy's workers are looked at
FULL_AGAIN_S = 10     # how long slow writes may last before the copy is at full work (idle) or down to one (busy)


def scraped(port: int, table: str, *names: str) -> list[float | None]:
    """The named metrics of `table` from one scrape of the migration's endpoint (all None while it does not answer)."""
    samples = scrape(port) or {}
    return [samples.get((f"stream_osc_{name}", (("table", table),))) for name in names]


@pytest.mark.parametrize("application_busy", [False, True], ids=["no application", "a busy application"])
def test_auto_yields_to_a_busy_application_and_not_to_the_copy_s_own_latency(endpoints, cli_log, application_busy):
    """With `--max-app-latency auto`, probe writes slower than the target (held, as the copy's own commits hold
    them on an idle server) hold the copy back only while another program runs statements: unthrottled
    writers here. With none, all four workers keep their places and full batches; with them, one statement at a
    time runs."""
    table = "auto_busy" if application_busy else "auto_idle"
    qualified_table = f"{DB}.{table}"
    conn = db_conn(endpoints)
    query(conn, f"DROP TABLE IF EXISTS {DB}.{helper_table_name(table, 'old')}")   # kept by an earlier run
    create_ledger_table(conn, DB, table, rows=AUTO_ROWS, writers=2)
    earlier = latest_migration_id(conn, DB, table)
    port = free_ports(1)[0]
    # no writers without the application: its record is then the rows the table held, each to be in the end
    with Ledger(endpoints.mysql, DB, table, writers=2 if application_busy else 0, seed=29) as ledger:
        proc = start_cli("migrate", "--algorithm", "copy", "--table", qualified_table, "--alter",
                         "ADD COLUMN note INT NULL",
                         "--copy-workers", "4", "--chunk-size", "5000", "--batch-size", "20",
                         "--target-batch-time", "0", "--metrics-port", str(port), log=cli_log)
        try:
            wait_for(lambda: latest_migration_id(conn, DB, table) > earlier, 60, "the migration row")
            migration_id = latest_migration_id(conn, DB, table)
            wait_for(lambda: StateStore(conn, METADATA).get(migration_id).stage == Stage.COPY, 60, "the copy")
            with SlowApplicationWrites(endpoints, hold_s=AUTO_HOLD_S):
                slow: list[float] = []

                def judged_slow() -> bool:
                    [latency] = scraped(port, qualified_table, "app_write_latency_seconds")
                    if latency is not None and latency >= AUTO_HOLD_S / 2 and latency not in slow:
                        slow.append(latency)
                    return len(slow) >= JUDGED_SLOW
                wait_for(judged_slow, 60, f"{JUDGED_SLOW} seconds of slow probe writes judged", every_s=0.2)
                def copy_figures() -> list[float | None]:
                    return scraped(port, qualified_table, "copy_statements_allowed", "copy_batch_time_ratio",
                                   "app_statements_in_flight")
                if application_busy:   # each busy second over the target halves the work: one worker within seconds
                    try:
                        allowed, batch_time, in_flight = wait_for(
                            lambda: (figures := copy_figures())[0] == 1 and figures, FULL_AGAIN_S,
                            "the copy down to one statement", every_s=0.2)
                    except AssertionError:   # told below, with the figures
                        allowed, batch_time, in_flight = copy_figures()
                    # (sampling the sessions this often would itself count as busy)
                    most, busy = copy_statements_at_once(conn, helper_table_name(table, "new"), seconds=1.0)
                else:   # a second judged busy meanwhile (a count not read, or fewer than six, errs that way) is
                    # let pass: the work must be back in full while the writes are still slow
                    try:   # (the figures of the scrape that found the copy at full work)
                        allowed, batch_time, in_flight = wait_for(
                            lambda: (figures := copy_figures())[:2] == [4, 1.0] and figures, FULL_AGAIN_S,
                            "the copy at full work", every_s=0.2)
                    except AssertionError:   # told below, with the figures
                        allowed, batch_time, in_flight = copy_figures()
                stage = StateStore(conn, METADATA).get(migration_id).stage
            # the rest at full speed, in full batches
            released = cli("set", "--table", qualified_table, "max-app-latency=off", "batch-size=5000")
            assert released.returncode == 0, released.stderr
        except BaseException:
            proc.kill()
            raise
        assert proc.wait(300) == 0, cli_log.read_text()[-3000:]
        if application_busy:
            ledger.wait_for_writes(50)
    assert stage == Stage.COPY, f"the copy ended before the slow writes were judged ({stage})"
    if application_busy:
        assert allowed == 1, \
            f"{allowed} copy statements allowed while a busy application's writes were slow ({in_flight} in flight)"
        assert in_flight is not None and in_flight >= BUSY_AT, in_flight
        assert most <= 1, f"{most} copy statements ran at once while yielding ({busy} samples saw one running)"
    else:
        assert (allowed, batch_time) == (4, 1.0), \
            f"the copy yielded ({allowed} of 4 statements, {batch_time} of the batch time) with no application running"
        assert in_flight is not None and 0 <= in_flight < BUSY_AT, in_flight   # (absent: not known, taken as busy)
    assert ledger.missing(conn) == []
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{helper_table_name(table, 'old')}"]


MOMENT_S = 0.005   # how often a moment of init (tenths of a second long) is looked for


def test_the_latency_baseline_is_taken_before_the_capture_adds_its_load(endpoints, cli_log):
    """`--max-app-latency auto` yields against twice the application's latency without the tool's work, and the
    connector's start (Connect reading the binlog, the broker) is that work. The probe's writes are made slow
    from the capture's first statement on (its heartbeat table's CREATE): a baseline that takes a sample after
    it holds that slowness (measured under a heavy load: 12–45 ms beside the start against the application's
    own 4–6 ms), and so would excuse the tool from yielding."""
    table = "baseline_first"
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=2_000, seed=17)
    earlier = latest_migration_id(conn, DB, table)
    proc = start_cli("migrate", "--algorithm", "copy", "--table", f"{DB}.{table}", "--alter",
                     "ADD COLUMN flag INT NULL", log=cli_log)

    def running(condition):
        assert proc.poll() is None, cli_log.read_text()[-3000:]
        return condition()
    try:
        migration = wait_for(lambda: running(lambda: new_migration_row(conn, DB, table, earlier)), 60,
                             "the migration row", every_s=MOMENT_S)
        heartbeat = capture_heartbeat_table(migration.id)
        wait_for(lambda: running(lambda: query(conn, "SELECT 1 FROM information_schema.TABLES WHERE "
                                                     "TABLE_SCHEMA=%s AND TABLE_NAME=%s", (METADATA, heartbeat))),
                 60, "the capture's first table", every_s=MOMENT_S)
        with SlowApplicationWrites(endpoints):
            wait_for(lambda: running(lambda: StateStore(conn, METADATA).get(migration.id).stage != Stage.INIT), 60,
                     "the copy's start")
        assert proc.wait(300) == 0, cli_log.read_text()[-3000:]
        assert "no application latency baseline yet" not in cli_log.read_text(), "the probe could not write in time"
        baseline_ms = StateStore(conn, METADATA).get(migration.id).app_latency_baseline_ms
        assert baseline_ms is not None and baseline_ms < HOLD_S * 1000 / 3, \
            f"baseline {baseline_ms} ms: taken while the capture started"
        assert leftovers(endpoints, DB, table) == [f"table {DB}.{helper_table_name(table, 'old')}"]
    except BaseException:
        proc.kill()
        proc.wait(30)
        raise
    finally:
        conn.close()


class CountingYielding(Yielding):
    """A Yielding that counts the samples it is given."""

    def __init__(self) -> None:
        super().__init__(1, None)
        self.samples = 0

    def sample(self, latency_ms: float, now: float | None = None) -> float | None:
        self.samples += 1
        return super().sample(latency_ms, now)


def test_latency_probe_keeps_sampling_after_the_database_was_unreachable(endpoints):
    """A database outage (connections refused, as while a link is down) only pauses the probe: once the server
    answers again it samples again. The probe thread must not end on the refused reconnect, or copy and
    validation would keep a stale pace for the rest of the process."""
    conn = db_conn(endpoints)
    StateStore(conn, METADATA).ensure_schema()
    refusals = [DatabaseUnreachable("cannot connect (error 2003)")] * 2

    def connect_after_outage():
        if refusals:
            raise refusals.pop()
        return db_conn(endpoints)
    yielding = CountingYielding()
    probe = LatencyProbe(connect_after_outage, METADATA, 2**31 - 1, yielding).start()
    try:
        wait_for(lambda: yielding.samples > 0 or not probe.thread.is_alive(), 30, "a sample or the probe's end")
        assert probe.thread.is_alive() and yielding.samples > 0 and not refusals
    finally:
        probe.stop()
        StateStore(conn, METADATA).remove_latency_probes(2**31 - 1)
        conn.close()
