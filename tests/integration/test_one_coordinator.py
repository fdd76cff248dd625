"""Two coordinators never both run a cutover: the one that renames proves its lease in the lock session.

A second coordinator takes the lease over (the first one's heartbeat made to look stale, as after a long
pause) while the first is inside its cutover attempt. Taken over before the lock, the first must not
rename; taken over while the lock is held, the takeover waits for the unlock and the first renames.
Either way the final table holds every write the application was told committed.
"""
from __future__ import annotations

import threading

import pytest

import cutover.swap as swap_module
from core.db import qualified, query
from core.spec import MigrationSpec
from core.state import StateStore
from core.state import STALE_S
from migration.lease import CoordinatorLease
from migration.coordination import MigrationStopped
from migration.runner import Runner
from migration.teardown import tables_swapped
from monitor.progress import Progress
from tests.integration.helpers import db_conn, leftovers, migration_row, wait_for
from tests.integration.ledger import Ledger, create_ledger_table

pytestmark = pytest.mark.integration

DB = "one_coordinator"
WRITERS = 4
SECOND = "elsewhere:1:second"   # the coordinator that takes over


def spec_for(table: str) -> MigrationSpec:
    return MigrationSpec(algorithm="copy", database=DB, table=table, alter="ADD COLUMN note INT NULL", copy_workers=2,
                         apply_workers=2,
                         chunk_size=5_000, batch_size=1_000, partitions=4, keep_old=False, max_lag_events=200,
                         lock_tries=20).validate()


def take_over(endpoints, migration_id: int) -> None:
    """What a second coordinator does once the first one's heartbeat is stale: claim the lease."""
    conn = db_conn(endpoints)
    store = StateStore(conn, "stream_osc")
    lease = CoordinatorLease(endpoints.mysql, "stream_osc", SECOND)

    def stale_then_claimed() -> bool:
        query(conn, "UPDATE stream_osc.migrations SET heartbeat_at = NOW(6) - INTERVAL %s SECOND "
                    "WHERE id = %s AND coordinator <> %s", (STALE_S * 2, migration_id, SECOND))
        return lease.claim(store, migration_id)
    try:
        wait_for(stale_then_claimed, timeout=30, what="the second coordinator's claim")
    finally:
        conn.close()


def on_cutover_lock(monkeypatch, before=None, after=None) -> None:
    """Run `before`/`after` around the cutover attempt's LOCK TABLES (the one that also locks the
    migrations table; validation's snapshot lock does not)."""
    real = swap_module.lock_tables_briefly

    def wrapped(conn, tables, is_mariadb, wait_s, tries, blockers_now, read_tables=()):
        cutover = any(t.endswith("`migrations`") for t in read_tables)
        if cutover and before:
            before()
        taken = real(conn, tables, is_mariadb, wait_s, tries, blockers_now, read_tables)
        if cutover and after:
            after()
        return taken
    monkeypatch.setattr(swap_module, "lock_tables_briefly", wrapped)


def new_column_in_place(conn, table: str) -> bool:
    return bool(query(conn, "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                            "AND COLUMN_NAME='note'", (DB, table)))


def test_a_coordinator_whose_lease_was_taken_over_during_its_cutover_does_not_rename(endpoints, conn, monkeypatch):
    table = "taken_before_lock"
    create_ledger_table(conn, DB, table, rows=20_000, writers=WRITERS)
    spec = spec_for(table)
    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=21) as ledger:
        ledger.wait_for_writes(200)
        on_cutover_lock(monkeypatch, before=lambda: take_over(endpoints, migration_row(conn, DB, table).id))
        with pytest.raises(MigrationStopped, match=f"{SECOND} holds the coordinator lease.*not renamed"):
            Runner(endpoints, spec, Progress(quiet=True)).run()
        monkeypatch.undo()
        migration = migration_row(conn, DB, table)
        assert (migration.stage, migration.status) == ("cutover", "running")
        assert not new_column_in_place(conn, table) and not tables_swapped(conn, spec), \
            "the replaced coordinator renamed the tables"
        assert query(conn, "SELECT coordinator FROM stream_osc.migrations WHERE id=%s", (migration.id,)) \
            == [(SECOND,)]
        ledger.wait_for_writes(200)
        # The second coordinator gives the migration up; a fresh run finishes it.
        StateStore(conn, "stream_osc").release_coordinator(migration.id, SECOND)
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        ledger.wait_for_writes(200)
    assert new_column_in_place(conn, table)
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    assert leftovers(endpoints, DB, table) == []


def test_a_takeover_during_the_cutover_lock_waits_for_the_unlock_and_the_holder_renames(endpoints, conn, monkeypatch):
    table = "taken_under_lock"
    create_ledger_table(conn, DB, table, rows=20_000, writers=WRITERS)
    spec = spec_for(table)
    claims: list[bool] = []
    watcher = db_conn(endpoints)

    def claim_in_background() -> None:
        """Start the takeover once the lock is held; return when its claim is seen waiting on the lock."""
        migration_id = migration_row(conn, DB, table).id
        claimer = db_conn(endpoints)
        claimer_id = claimer.thread_id()

        def claim() -> None:
            query(claimer, "UPDATE stream_osc.migrations SET heartbeat_at = NOW(6) - INTERVAL %s SECOND "
                           "WHERE id = %s", (STALE_S * 2, migration_id))
            claims.append(StateStore(claimer, "stream_osc").claim_coordinator(migration_id, SECOND, STALE_S))
            claimer.close()
        threading.Thread(target=claim, daemon=True).start()
        wait_for(lambda: query(watcher, "SELECT 1 FROM information_schema.PROCESSLIST WHERE ID=%s AND STATE="
                                        "'Waiting for table metadata lock'", (claimer_id,)),
                 timeout=10, what="the takeover waiting on the cutover's lock")

    with Ledger(endpoints.mysql, DB, table, writers=WRITERS, seed=22) as ledger:
        ledger.wait_for_writes(200)
        on_cutover_lock(monkeypatch, after=claim_in_background)
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        monkeypatch.undo()
        ledger.wait_for_writes(200)
    watcher.close()
    # The claim waited on the lock (seen above) and the first coordinator renamed: it could not be taken
    # over between its proof and the rename. (Whether the claim then won depends on who wrote the
    # heartbeat first after the unlock: both outcomes are legitimate.)
    wait_for(lambda: claims, timeout=30, what="the takeover's claim to return")
    assert new_column_in_place(conn, table)
    assert query(conn, f"SELECT COUNT(*) FROM {qualified(DB, table)}")[0][0] > 0
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    assert leftovers(endpoints, DB, table) == []
