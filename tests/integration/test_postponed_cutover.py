"""A postponed cutover stays postponed and in sync: outside its window, or with --cutover manual, the coordinator
waits with its appliers applying, through pause, resume and a crash; `cutover` swaps at once, through the waiting
coordinator when one runs."""
from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from core.db import qualified, query, scalar
from core.spec import MigrationSpec, helper_table_name
from stack.process import free_ports
from tests.integration.helpers import (cli, fresh_ledger_table, latest_migration_id, leftovers, migration_row,
                                       new_migration_row, start_cli, status_doc, table_columns, wait_for,
                                       waiting_for_cutover, waiting_without_coordinator)
from tests.integration.ledger import Ledger
from tests.integration.tcp_relay import TcpRelay

pytestmark = pytest.mark.integration

DB = "cut_window"
WRITERS = 4
WAITING = "waiting for the cutover window"


def closed_window() -> str:
    """A half-hour window twelve hours from now (UTC): closed for the whole test."""
    start = datetime.now(timezone.utc) + timedelta(hours=12)
    return f"{start:%H:%M}-{start + timedelta(minutes=30):%H:%M}"


def test_outside_its_window_a_migration_waits_in_sync_and_keeps_waiting_after_a_crash(endpoints, conn, cli_log):
    table = "scheduled"
    fresh_ledger_table(conn, DB, table, rows=5_000, writers=2)
    proc = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note INT NULL", "--partitions", "4",
                     "--chunk-size", "5000", "--cutover-window-schedule", closed_window(), log=cli_log)
    try:
        wait_for(lambda: WAITING in cli_log.read_text() or proc.poll() is not None, 180,
                 "the migration to wait for its window")
        assert WAITING in cli_log.read_text()
        doc = status_doc(DB, table)
        assert doc["stage"] == "cutover" and "next at" in doc["cutover_window"], doc
        # The appliers keep applying while it waits: a change made now reaches the new table.
        query(conn, f"UPDATE {DB}.{table} SET payload = 'while waiting' WHERE id = 100")
        wait_for(lambda: scalar(conn, f"SELECT payload FROM {DB}.{table}_osc_new WHERE id = 100") == "while waiting",
                 60, "the change applied while waiting")
        proc.kill()   # a crash while waiting; resume, given no schedule, keeps the migration's own
        proc.wait(30)
        proc = start_cli("resume", "--table", f"{DB}.{table}", log=cli_log)
        wait_for(lambda: cli_log.read_text().count(WAITING) == 2, 180, "the resumed migration to wait again")
        assert migration_row(conn, DB, table).stage == "cutover"
    finally:
        proc.kill()
        proc.wait(30)
    result = cli("cutover", "--table", f"{DB}.{table}")   # the operator's word overrides the schedule
    assert result.returncode == 0, result.stderr[-3000:]
    assert migration_row(conn, DB, table).stage == "done"
    assert scalar(conn, f"SELECT payload FROM {DB}.{table} WHERE id = 100") == "while waiting"
    assert "note" in table_columns(conn, DB, table)
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{table}_osc_old"]


LAG_BOUND = 5_000   # events; with its appliers stopped, the lag would grow by every write made while it waits
#                     (each reading follows LAG_BOUND more writes, so a stopped applier always shows)


def apply_lag(table: str) -> int:
    lag = status_doc(DB, table)["apply_lag_events"]
    assert lag is not None, "status shows no apply lag"
    return lag


def group_members(endpoints, group: str) -> tuple[str, set[str]]:
    """(state, member ids) of the applier group."""
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return described.state, {m.member_id for m in described.members}


def applier_group_settled(endpoints, group: str, gone: frozenset[str] = frozenset()) -> bool:
    """The applier group is stable with exactly the live coordinator's appliers, none of them a member of a
    killed process (`gone`): those stay in the group, their partitions unconsumed, until their session times
    out, and then the group rebalances."""
    state, members = group_members(endpoints, group)
    return state == ConsumerGroupState.STABLE and len(members) == MigrationSpec.apply_workers and not members & gone


def lag_stays_small(ledger: Ledger, table: str) -> int:
    """The worst of two apply-lag readings, each after the writers made 0.8 x LAG_BOUND more writes: with its
    appliers stopped, the second reading would be about 1.6 x LAG_BOUND (less the few writes that make no
    change event, such as a delete that finds no row, and the capture's delay)."""
    worst = 0
    for _ in range(2):
        ledger.wait_for_writes(LAG_BOUND * 8 // 10, timeout=120)
        worst = max(worst, apply_lag(table))
    return worst


MARKER_WRITER = WRITERS + 1   # a writer id no ledger writer has: its row is outside the ledger's record


def marker_payload(conn, name: str) -> str | None:
    """The payload of the marker row in the table `name` (qualified), None while it has none."""
    return scalar(conn, f"SELECT payload FROM {name} WHERE writer = %s AND seq = 1", (MARKER_WRITER,))


@pytest.mark.slow   # a crash, a resume and the applier group's settling after each
def test_a_manual_cutover_waits_applying_in_its_own_process_through_pause_and_crash(endpoints, conn, cli_log):
    """`migrate --cutover manual` stays running once in sync, its own appliers keeping the lag small under
    unthrottled writes; pause, resume and a crash leave it waiting (resume keeps manual); `stream-osc cutover`
    is carried out by the waiting coordinator; every acknowledged write is in the final table."""
    table = "manual"
    new_table = qualified(DB, helper_table_name(table, "new"))
    fresh_ledger_table(conn, DB, table, rows=10_000, writers=WRITERS)
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=12) as ledger:
        ledger.wait_for_writes(200)
        coordinator = waiting_for_cutover(conn, DB, table, "--alter", "ADD COLUMN note INT NULL", "--partitions", "4",
                                          "--max-lag", "200", "--chunk-size", "5000", log=cli_log)
        try:
            # the coordinator prints this line just after it commits the status the wait above saw
            wait_for(lambda: "in sync and waiting for cutover" in cli_log.read_text(), 30, "the waiting message")
            doc = status_doc(DB, table)
            assert (doc["stage"], doc["status"], doc["coordinator"] is not None) == ("cutover", "waiting", True), doc
            group = migration_row(conn, DB, table).group_id   # the appliers restarted after validation's snapshot:
            wait_for(lambda: applier_group_settled(endpoints, group), 60, "the applier group to settle")
            waiting_lag = lag_stays_small(ledger, table)
            # the effect, not only the figure: a change made now reaches the new table through its appliers
            query(conn, f"INSERT INTO {DB}.{table} (writer, seq, payload) VALUES (%s, 1, 'while waiting')",
                  (MARKER_WRITER,))
            wait_for(lambda: marker_payload(conn, new_table) == "while waiting", 60,
                     "the waiting coordinator's appliers to apply the marker")

            assert cli("pause", "--table", f"{DB}.{table}").returncode == 0
            wait_for(lambda: status_doc(DB, table)["status"] == "paused", 30, "the pause")
            assert cli("resume", "--table", f"{DB}.{table}").returncode == 0   # un-pauses the live coordinator
            wait_for(lambda: migration_row(conn, DB, table).status == "waiting", 30, "waiting again after resume")
            assert coordinator.poll() is None

            killed_members = frozenset(group_members(endpoints, group)[1])
            coordinator.kill()   # a crash while waiting; resume, given no --cutover, keeps the migration manual
            coordinator.wait(30)
            coordinator = start_cli("resume", "--table", f"{DB}.{table}", log=cli_log)
            wait_for(lambda: cli_log.read_text().count("in sync and waiting for cutover") == 2 or
                     coordinator.poll() is not None, 300, "the resumed migration to wait again")
            assert coordinator.poll() is None and migration_row(conn, DB, table).status == "waiting"
            wait_for(lambda: applier_group_settled(endpoints, group, killed_members), 60,
                     "the applier group to let go of the killed coordinator's appliers")
            wait_for(lambda: apply_lag(table) < LAG_BOUND, 120, "the resumed appliers to catch up")
            resumed_lag = lag_stays_small(ledger, table)
            query(conn, f"UPDATE {DB}.{table} SET payload = 'after the crash' WHERE writer = %s AND seq = 1",
                  (MARKER_WRITER,))
            wait_for(lambda: marker_payload(conn, new_table) == "after the crash", 60,
                     "the resumed coordinator's appliers to apply the marker's change")

            asked = time.monotonic()
            result = cli("cutover", "--table", f"{DB}.{table}")
            cutover_s = time.monotonic() - asked
            assert result.returncode == 0, result.stdout + result.stderr[-3000:]
            said = result.stdout + result.stderr
            assert "asking" in said and "swapped" in said, said
            assert coordinator.wait(120) == 0   # the waiting coordinator did the swap and the cleanup
        finally:
            if coordinator.poll() is None:
                coordinator.kill()
                coordinator.wait(30)
        ledger.wait_for_writes(200)
    print(f"apply lag while waiting: {waiting_lag} events (after the crash: {resumed_lag}); `stream-osc cutover` "
          f"took {cutover_s:.1f} s")
    assert waiting_lag < LAG_BOUND and resumed_lag < LAG_BOUND, "the appliers did not keep applying while waiting"
    migration = migration_row(conn, DB, table)
    assert (migration.stage, migration.status) == ("done", "done")
    assert "note" in table_columns(conn, DB, table)
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    assert marker_payload(conn, qualified(DB, table)) == "after the crash"


def test_a_joined_worker_stays_joined_and_applies_while_a_manual_cutover_waits(endpoints, conn, cli_log):
    table = "joined"
    fresh_ledger_table(conn, DB, table, rows=2_000, writers=2)
    waiting_without_coordinator(conn, DB, table, "--alter", "ADD COLUMN note INT NULL", "--quiet")
    worker = start_cli("--log-level", "INFO", "worker", "--table", f"{DB}.{table}", log=cli_log)
    try:
        query(conn, f"UPDATE {DB}.{table} SET payload = 'while waiting' WHERE id = 100")
        wait_for(lambda: scalar(conn, f"SELECT payload FROM {DB}.{table}_osc_new WHERE id = 100") == "while waiting",
                 60, "the worker's appliers to apply the change")
        assert cli_log.read_text().count("workers joined") == 1, "the worker left and re-joined the applier group"
        assert migration_row(conn, DB, table).status == "waiting"
        result = cli("cutover", "--table", f"{DB}.{table}", "--quiet")
        assert result.returncode == 0, result.stderr[-3000:]
        assert worker.wait(60) == 0   # it leaves once the tables are swapped
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)
    assert scalar(conn, f"SELECT payload FROM {DB}.{table} WHERE id = 100") == "while waiting"


def test_a_passing_failure_retried_successfully_leaves_no_error_to_stop_the_cutover_command(endpoints, conn, cli_log):
    """A coordinator whose link to Kafka Connect is cut records the failure, retries and goes on: the error is
    cleared as the work continues. Asked by `stream-osc cutover` (paused, so it holds the request) and then
    killed, it leaves no error behind, and the asking command cuts over itself instead of stopping with the
    stale one."""
    table = "recovered"
    fresh_ledger_table(conn, DB, table, rows=2_000, writers=2)
    connect_url = urlsplit(endpoints.connect_url)
    relay = TcpRelay(free_ports(1)[0], (connect_url.hostname, connect_url.port))
    relay.restore()
    env = {**os.environ, "STREAM_OSC_CONNECT_URL": f"http://127.0.0.1:{relay.port}",
           "STREAM_OSC_CONNECTOR_SECRETS_DIR": endpoints.connector_secrets_dir}
    earlier = latest_migration_id(conn, DB, table)
    coordinator = start_cli("migrate", "--table", f"{DB}.{table}", "--alter", "ADD COLUMN note INT NULL",
                            "--cutover", "manual", "--partitions", "2", env=env, log=cli_log)
    asking = None
    try:
        wait_for(lambda: coordinator.poll() is not None or getattr(new_migration_row(conn, DB, table, earlier),
                                                                   "status", "") == "waiting", 300,
                 "the migration to wait for its cutover")
        assert cli("pause", "--table", f"{DB}.{table}").returncode == 0
        wait_for(lambda: "paused: no writes" in cli_log.read_text(), 30, "the coordinator to hold, paused")
        asking = start_cli("cutover", "--table", f"{DB}.{table}", log=cli_log)
        migration_id = migration_row(conn, DB, table).id
        wait_for(lambda: scalar(conn, "SELECT cutover_requested_at FROM stream_osc.migrations WHERE id = %s",
                                (migration_id,)) is not None, 30, "the request")
        relay.cut()   # the coordinator's next health check cannot reach Connect: a passing failure, recorded
        wait_for(lambda: migration_row(conn, DB, table).error is not None, 30, "the failure to be recorded")
        wait_for(lambda: "transient failure" in cli_log.read_text(), 30, "the retry to be announced")
        relay.restore()
        wait_for(lambda: cli_log.read_text().count("paused: no writes") == 2, 60, "the coordinator to go on")
        assert coordinator.poll() is None
        assert migration_row(conn, DB, table).error is None, "the error of a failure retried successfully stayed"
        coordinator.kill()   # gone without a word: the asking command takes over
        coordinator.wait(30)
        assert asking.wait(300) == 0, cli_log.read_text()[-3000:]
    finally:
        relay.cut()
        for proc in (coordinator, asking):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)
    assert "cutting over in this process" in cli_log.read_text()
    assert migration_row(conn, DB, table).stage == "done"
    assert "note" in table_columns(conn, DB, table)
