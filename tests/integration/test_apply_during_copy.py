"""Apply during the copy (invariant 3, applier/uncopied.py): a change is left to the copy only when the copy's
later read is sure to see it.

The interleavings are made with real sessions and locks on the server: a copy batch (applier.copy's own) is
held after its read's snapshot by an uncommitted row that collides with one of its rows under a UNIQUE key,
and an application transaction is held open before its commit.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

import applier.copy as copy_module
from applier.copy import _copy_batch, copy_batch
from applier.recopy import recopy_keys
from applier.uncopied import keys_left_to_copy
from core.db import connect, query
from core.keys import Key
from core.state import StateStore
from core.table import TablePair, load_pair
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

DB = "apply_during_copy"
SCHEMA = "stream_osc"
MIGRATION_ID = 900_001   # chunk rows of their own, never a real migration's


@dataclass
class Plan:
    """What the copy batch and the check read of a RunContext: the pair, the store, the migration's id and top."""

    pair: TablePair
    id: int = MIGRATION_ID
    copy_until: Key | None = (100,)

    @property
    def migration(self) -> "Plan":
        return self

    def store(self, conn) -> StateStore:
        return StateStore(conn, SCHEMA)


def waiting_for_a_lock(conn, session) -> bool:
    thread_id = session.thread_id()
    return bool(query(conn, "SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id=%s "
                            "AND trx_state='LOCK WAIT'", (thread_id,)))


@pytest.fixture
def plan(conn) -> Plan:
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
    yield Plan(load_pair(conn, DB, "t", "t_osc_new"))
    query(conn, f"DELETE FROM {store.t('chunks')} WHERE migration_id=%s", (MIGRATION_ID,))


def in_thread(action) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(action()), daemon=True)
    thread.start()
    return thread, out


def test_a_change_behind_a_running_batchs_snapshot_is_applied_after_the_batch_not_left_to_it(endpoints, conn, plan):
    blocker, copier, app, applier = (connect(endpoints.mysql, autocommit=a) for a in (False, True, True, True))
    try:
        # the batch will stop at row 60, after its snapshot was taken and row 50 written from it
        query(blocker, f"INSERT INTO {DB}.t_osc_new VALUES (0, 'u-60', 0)")   # below the batch's range
        batch, copied = in_thread(lambda: _copy_batch(copier, plan, 0, (1,), (101,), True, None))
        wait_for(lambda: waiting_for_a_lock(conn, copier), 30, "the copy batch held at row 60")
        query(app, f"UPDATE {DB}.t SET v = 2 WHERE id = 50")   # committed; the batch's snapshot has v = 1
        check, left = in_thread(lambda: keys_left_to_copy(applier, plan, [(50,)]))
        wait_for(lambda: waiting_for_a_lock(conn, applier), 30, "the applier's check waiting for the batch")
        query(blocker, "ROLLBACK")
        batch.join(30)
        check.join(30)
        assert copied == [100]
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 50") == [(1,)]   # the stale row is in
        assert left == [None]                         # the chunk is done: nothing is left to the copy
        recopy_keys(applier, plan.pair, [(50,)])
        assert query(conn, f"SELECT v FROM {DB}.t_osc_new WHERE id = 50") == [(2,)]
    finally:
        for session in (blocker, copier, app, applier):
            session.close()


def test_a_key_the_copy_has_yet_to_read_is_left_to_it_once_its_writer_committed(endpoints, conn, plan):
    app, copier, applier = (connect(endpoints.mysql, autocommit=a) for a in (False, True, True))
    try:
        query(conn, f"INSERT INTO {DB}.t VALUES (500, 'u-500', 1)")   # above the copy's top: a change, never copied
        query(app, f"UPDATE {DB}.t SET v = 3 WHERE id = 70")   # not committed yet
        check, left = in_thread(lambda: keys_left_to_copy(applier, plan, [(70,), (100,), (500,)]))
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
        assert keys_left_to_copy(applier, plan, [(40,)]) == set()
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
