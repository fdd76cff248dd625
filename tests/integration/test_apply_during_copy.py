"""Apply during the copy (invariant 3, applier/uncopied.py): a change is left to the copy only when the copy's
later read is sure to see it, and a change waits for a running copy batch only when that batch may be reading
its row.

The interleavings are made with real sessions and locks on the server: a copy batch (applier.copy's own) is
held after its read's snapshot by an uncommitted row that collides with one of its rows under a UNIQUE key,
and an application transaction is held open before its commit.
"""
from __future__ import annotations

import threading

import pytest

import applier.copy as copy_module
from applier.apply import apply_changed_keys
from applier.copy import LeaseLost, _copy_batch, copy_batch, hold_chunk, publish_range
from applier.recopy import recopy_keys
from applier.uncopied import KeySorter, settle_behind_batches
from core.db import connect, query
from core.state import StateStore
from core.table import load_pair
from tests.integration.helpers import BatchPlan, wait_for, waiting_on

pytestmark = pytest.mark.integration

DB = "apply_during_copy"
SCHEMA = "stream_osc"
MIGRATION_ID = 900_001   # chunk rows of their own, never a real migration's


def waiting_for_a_lock(conn, session) -> bool:
    thread_id = session.thread_id()
    return bool(query(conn, "SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id=%s "
                            "AND trx_state='LOCK WAIT'", (thread_id,)))


@pytest.fixture
def plan(conn) -> BatchPlan:
    """Rows 1..100 (v = 1) and an empty new table with UNIQUE (u); one chunk [1, 101), nothing copied."""
    query(conn, f"DROP TABLE IF EXISTS {DB}.t, {DB}.t_osc_new")
    query(conn, f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, u VARCHAR(20) NOT NULL, v INT NOT NULL)")
    query(conn, f"INSERT INTO {DB}.t SELECT seq, CONCAT('u-', seq), 1 FROM {DB}.seq_1_to_100")
    query(conn, f"CREATE TABLE {DB}.t_osc_new (id INT PRIMARY KEY, u VARCHAR(20) NOT NULL, v INT NOT NULL, "
                "UNIQUE KEY u (u))")
    store = StateStore(conn, SCHEMA)
    store.ensure_schema()
    query(conn, f"DELETE FROM {store.t('chunks')} WHERE migration_id=%s", (MIGRATION_ID,))
    store.add_chunks(MIGRATION_ID, [((1,), (101,))])
    yield BatchPlan(load_pair(conn, DB, "t", "t_osc_new"), MIGRATION_ID, (100,))
    query(conn, f"DELETE FROM {store.t('chunks')} WHERE migration_id=%s", (MIGRATION_ID,))


def left_to_copy(session, plan, keys) -> set | None:
    """The keys an applier leaves to the copy: sorted, then those behind an open batch settled after it."""
    sorted_keys = KeySorter().sort(session, plan, keys)
    if sorted_keys is None:
        return None
    return sorted_keys.left | (settle_behind_batches(session, plan, sorted_keys) if sorted_keys.behind else set())


def holding_a_batch(endpoints, conn, plan, hi: int, at: int):
    """A copy batch of [1, hi) started in a thread and held after its read's snapshot, before row `at` is
    written: (blocker session to roll back, copier session, thread, rows copied)."""
    blocker, copier = connect(endpoints.mysql, autocommit=False), connect(endpoints.mysql)
    query(blocker, f"INSERT INTO {DB}.t_osc_new VALUES (0, 'u-{at}', 0)")   # below the batch's range
    batch, copied = in_thread(lambda: _copy_batch(copier, plan, 0, (1,), (hi,), hi == 101, None))
    wait_for(lambda: waiting_for_a_lock(conn, copier), 30, f"the copy batch held at row {at}")
    return blocker, copier, batch, copied


def in_thread(action) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(action()), daemon=True)
    thread.start()
    return thread, out


def test_a_change_behind_a_running_batchs_snapshot_is_applied_after_the_batch_not_left_to_it(endpoints, conn, plan):
    # the batch stops at row 60, after its snapshot was taken and row 50 written from it
    blocker, copier, batch, copied = holding_a_batch(endpoints, conn, plan, 101, at=60)
    app, applier = connect(endpoints.mysql), connect(endpoints.mysql)
    try:
        query(app, f"UPDATE {DB}.t SET v = 2 WHERE id = 50")   # committed; the batch's snapshot has v = 1
        check, left = in_thread(lambda: left_to_copy(applier, plan, [(50,)]))
        wait_for(lambda: waiting_for_a_lock(conn, applier), 30, "the applier's check waiting for the batch")
        query(blocker, "ROLLBACK")
        batch.join(30)
        check.join(30)
        assert copied == [100]
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 50") == [(1,)]   # the stale row is in
        assert left == [set()]                        # the batch read it: re-copied, not left to the copy
        recopy_keys(applier, plan.pair, [(50,)])
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 50") == [(2,)]
    finally:
        for session in (blocker, copier, app, applier):
            session.close()


def test_a_change_outside_the_running_batchs_range_is_sorted_without_waiting_for_the_batch(endpoints, conn, plan):
    """Only a row inside an open batch's range waits for it: 70 lies past the batch [1, 51), 500 past the copy."""
    blocker, copier, batch, copied = holding_a_batch(endpoints, conn, plan, 51, at=45)
    applier = connect(endpoints.mysql)
    try:
        query(conn, f"INSERT INTO {DB}.t VALUES (500, 'u-500', 1)")
        query(conn, f"UPDATE {DB}.t SET v = 7 WHERE id IN (30, 70)")
        query(applier, "SET SESSION innodb_lock_wait_timeout = 1")   # a wait for the batch fails the sort
        sorted_keys = KeySorter().sort(applier, plan, [(30,), (70,), (500,)])
        assert (sorted_keys.now, sorted_keys.left, sorted_keys.behind) == ({(500,)}, {(70,)}, {(30,)})
        query(blocker, "ROLLBACK")
        batch.join(30)
        assert copied == [50]
        assert settle_behind_batches(applier, plan, sorted_keys) == set()   # the batch read 30: re-copied
        recopy_keys(applier, plan.pair, [(30,), (500,)])
        assert _copy_batch(copier, plan, 0, (51,), (101,), True, None) == 50
        assert query(conn, f"SELECT id, v FROM {DB}.t_osc_new WHERE id IN (30, 70, 500) ORDER BY id") == \
            [(30, 7), (70, 7), (500, 1)]
    finally:
        for session in (blocker, copier, applier):
            session.close()


def test_the_writer_of_a_row_the_copy_has_passed_does_not_hold_up_the_sort(endpoints, conn, plan):
    """Only keys that may be left to the copy are share-locked by the sort: 30 was copied before the last
    sort read the chunks, so its writer's open transaction is the re-copy's to wait for, not the sort's."""
    copier, app, applier = (connect(endpoints.mysql, autocommit=a) for a in (True, False, True))
    try:
        assert _copy_batch(copier, plan, 0, (1,), (51,), False, None) == 50
        sorter = KeySorter()
        assert sorter.sort(applier, plan, [(70,)]).left == {(70,)}
        query(app, f"UPDATE {DB}.t SET v = 9 WHERE id = 30")   # not committed
        query(applier, "SET SESSION innodb_lock_wait_timeout = 1")   # a wait for the writer fails the sort
        sorted_keys = sorter.sort(applier, plan, [(30,)])
        assert (sorted_keys.now, sorted_keys.left, sorted_keys.behind) == ({(30,)}, set(), set())
        query(app, "COMMIT")
        recopy_keys(applier, plan.pair, [(30,)])
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 30") == [(9,)]
    finally:
        for session in (copier, app, applier):
            session.close()


def test_a_row_deleted_behind_a_running_batchs_snapshot_is_not_written_back_by_the_batch(endpoints, conn, plan):
    """A key without a row cannot be placed in a range: it waits for every open batch, whose snapshot may
    still hold the row (48 here, not yet written when the batch is held at 45)."""
    blocker, copier, batch, copied = holding_a_batch(endpoints, conn, plan, 51, at=45)
    applier = connect(endpoints.mysql)
    try:
        query(conn, f"DELETE FROM {DB}.t WHERE id = 48")
        apply, outcome = in_thread(lambda: apply_changed_keys(applier, plan, {(48,)}, None, KeySorter()))
        wait_for(lambda: waiting_on(conn, applier, copier), 30, "the applier waiting for the batch")
        query(blocker, "ROLLBACK")
        batch.join(30)
        apply.join(30)
        assert copied == [50] and outcome == [1]
        assert query(conn, f"SELECT COUNT(*) FROM {DB}.t_osc_new WHERE id = 48") == [(0,)]
    finally:
        for session in (blocker, copier, applier):
            session.close()


def test_a_row_inserted_but_not_yet_visible_past_the_copy_is_written_once_its_writer_commits(endpoints, conn, plan):
    """500 lies past the copy, so the sort does not lock it, and its plain read cannot see the insert still
    committing: the key counts as having no row, waits for the open batch, and its re-copy's locking read
    waits for the writer."""
    blocker, copier, batch, copied = holding_a_batch(endpoints, conn, plan, 51, at=45)
    app, applier = connect(endpoints.mysql, autocommit=False), connect(endpoints.mysql)
    try:
        sorter = KeySorter()
        assert sorter.sort(applier, plan, [(70,)]).left == {(70,)}   # the chunks as they are read once
        query(app, f"INSERT INTO {DB}.t VALUES (500, 'u-500', 5)")   # not committed
        apply, outcome = in_thread(lambda: apply_changed_keys(applier, plan, {(500,)}, None, sorter))
        wait_for(lambda: waiting_on(conn, applier, copier), 30, "the applier waiting for the batch")
        query(blocker, "ROLLBACK")
        batch.join(30)
        wait_for(lambda: waiting_on(conn, applier, app), 30, "the re-copy waiting for the writer")
        query(app, "COMMIT")
        apply.join(30)
        assert copied == [50] and outcome == [1]
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 500") == [(5,)]
    finally:
        for session in (blocker, copier, app, applier):
            session.close()


def test_a_batch_that_starts_while_the_sort_waits_for_the_writer_is_waited_for(endpoints, conn, plan):
    """The chunks are read after the locking read: a batch that opened while the sort waited for the writer's
    commit read the row from before it (its snapshot is older than the commit) and must be waited for."""
    app, applier = connect(endpoints.mysql, autocommit=False), connect(endpoints.mysql)
    blocker = copier = None
    try:
        query(app, f"UPDATE {DB}.t SET v = 8 WHERE id = 70")   # not committed yet
        apply, outcome = in_thread(lambda: apply_changed_keys(applier, plan, {(70,)}, None, KeySorter()))
        wait_for(lambda: waiting_for_a_lock(conn, applier), 30, "the sort waiting for the application's commit")
        blocker, copier, batch, copied = holding_a_batch(endpoints, conn, plan, 101, at=80)   # read 70 with v = 1
        query(app, "COMMIT")
        wait_for(lambda: waiting_on(conn, applier, copier), 30, "the applier waiting for the batch")
        query(blocker, "ROLLBACK")
        batch.join(30)
        apply.join(30)
        assert copied == [100] and outcome == [1]
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 70") == [(8,)]
    finally:
        for session in (app, applier, blocker, copier):
            if session is not None:
                session.close()


def test_a_batch_whose_published_range_another_worker_replaced_gives_up_before_reading(
        endpoints, conn, plan, monkeypatch):
    """An applier that read the other worker's range [1, 51) would leave 70 to the copy without waiting: a
    batch of [1, 101) must then not read at all."""
    copier, other = connect(endpoints.mysql), connect(endpoints.mysql)
    published: list[str] = []

    def query_then_publish_over(session, sql, args=None):
        rows = query(session, sql, args)
        if sql.startswith("UPDATE") and "batch_open=1" in sql and not published:
            published.append(sql)
            publish_range(other, plan, 0, (1,), (51,))
        return rows

    monkeypatch.setattr(copy_module, "query", query_then_publish_over)
    try:
        with pytest.raises(LeaseLost):
            _copy_batch(copier, plan, 0, (1,), (101,), True, None)
        assert published
        assert query(conn, f"SELECT COUNT(*) FROM {DB}.t_osc_new") == [(0,)]
    finally:
        copier.close()
        other.close()


def test_chunk_positions_differing_only_in_letter_case_are_different_positions(endpoints, conn, plan):
    """Under a binary collation `B` and `b` are two boundaries: a batch of [b, B) must not take a chunk at
    `B` for its own, nor a range published to `b` for one to `B`."""
    store = plan.store(conn)
    query(conn, f"UPDATE {store.t('chunks')} SET next_key=%s WHERE migration_id=%s", ('["B"]', MIGRATION_ID))
    copier = connect(endpoints.mysql)
    try:
        publish_range(copier, plan, 0, ("b",), ("c",))
        assert query(conn, f"SELECT batch_open FROM {store.t('chunks')} WHERE migration_id=%s",
                     (MIGRATION_ID,)) == [(0,)]
        publish_range(copier, plan, 0, ("B",), ("c",))
        for lo, hi in ((("b",), ("c",)), (("B",), ("C",))):
            copier.begin()
            with pytest.raises(LeaseLost):
                hold_chunk(copier, plan, 0, lo, hi)
            copier.rollback()
    finally:
        copier.close()


def test_a_key_the_copy_has_yet_to_read_is_left_to_it_once_its_writer_committed(endpoints, conn, plan):
    app, copier, applier = (connect(endpoints.mysql, autocommit=a) for a in (False, True, True))
    try:
        query(conn, f"INSERT INTO {DB}.t VALUES (500, 'u-500', 1)")   # above the copy's top: a change, never copied
        query(app, f"UPDATE {DB}.t SET v = 3 WHERE id = 70")   # not committed yet
        check, left = in_thread(lambda: left_to_copy(applier, plan, [(70,), (100,), (500,)]))
        wait_for(lambda: waiting_for_a_lock(conn, applier), 30, "the check waiting for the application's commit")
        query(app, "COMMIT")
        check.join(30)
        assert left == [{(70,), (100,)}]             # 500 is always applied
        assert _copy_batch(copier, plan, 0, (1,), (101,), True, None) == 100
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 70") == [(3,)]
    finally:
        for session in (app, copier, applier):
            session.close()


def test_a_row_an_applier_wrote_where_the_copy_has_yet_to_read_gives_way_to_the_batch(endpoints, conn, plan):
    """A key found without a row is re-copied, not left to the copy; its row came back before the re-copy read."""
    copier, applier = connect(endpoints.mysql), connect(endpoints.mysql)
    try:
        query(conn, f"DELETE FROM {DB}.t WHERE id = 40")
        assert left_to_copy(applier, plan, [(40,)]) == set()
        query(conn, f"INSERT INTO {DB}.t VALUES (40, 'u-40', 4)")
        recopy_keys(applier, plan.pair, [(40,)])
        query(conn, f"UPDATE {DB}.t SET v = 5 WHERE id = 40")
        assert _copy_batch(copier, plan, 0, (1,), (101,), True, None) == 100   # no duplicate refused
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 40") == [(5,)]
        assert query(conn, f"SELECT COUNT(*) FROM {DB}.t_osc_new") == [(100,)]
    finally:
        copier.close()
        applier.close()


def test_a_key_an_applier_writes_between_the_batchs_delete_and_insert_makes_the_batch_write_again(
        endpoints, conn, plan, monkeypatch):
    """The change key differs from the row's only by collation, or the row came back after the check: the
    re-copy writes into the range the batch is copying, after the batch's DELETE and before its INSERT."""
    copier, applier = connect(endpoints.mysql), connect(endpoints.mysql)
    deletes: list[str] = []

    def query_then_recopy(session, sql, args=None):
        rows = query(session, sql, args)
        if sql.startswith(f"DELETE FROM {plan.pair.target_name}") and not deletes:
            deletes.append(sql)
            query(conn, f"UPDATE {DB}.t SET v = 6 WHERE id = 30")
            recopy_keys(applier, plan.pair, [(30,)])   # committed: the batch's INSERT meets it
        return rows

    monkeypatch.setattr(copy_module, "query", query_then_recopy)
    try:
        assert copy_batch(copier, plan, 0, (1,), (101,), True) == 100
        assert len(deletes) == 1
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 30") == [(6,)]
        assert query(conn, f"SELECT COUNT(*) FROM {DB}.t_osc_new") == [(100,)]
    finally:
        copier.close()
        applier.close()
