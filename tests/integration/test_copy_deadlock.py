"""A copy batch that loses a deadlock is written again by its worker: the run is not restarted for it.

Under heavy writes a copy batch and an applier each hold rows of the new table the other's insert must check,
and the server rolls one back. A run restart for each would wait 2, 4, 8 … s and stop the migration after
eight in a row, so a busy table could not be migrated at all.
"""
from __future__ import annotations

import logging
import threading

import pymysql
import pytest

from applier import copy as copy_module
from core.db import query
from core.spec import MigrationSpec
from migration.runner import Runner
from monitor.progress import Progress
from tests.integration.helpers import abort_leftover, db_conn, migration_row, wait_for, waiting_on

pytestmark = pytest.mark.integration

DB = "copydeadlock"
ROWS = 40


def test_a_copy_batch_that_loses_a_deadlock_is_written_again_without_restarting_the_run(endpoints, conn, caplog,
                                                                                       monkeypatch):
    """A session holding a row in the first batch's range of the new table (uncommitted) and many undo entries
    waits for that batch's chunk row while the batch waits for its row: the server rolls the lighter
    transaction, the batch, back (with the server's deadlock detection on, its default). The batch must be
    written again and the migration complete, with no transient-failure restart and every row in place."""
    abort_leftover(conn, DB, "t")   # a run killed midway leaves its migration (in a process of its own:
    # the command sets up logging anew, which would take the test's log capture away)
    for name in ("t", "t_osc_new", "t_osc_old", "weight"):
        query(conn, f"DROP TABLE IF EXISTS {DB}.{name}")
    query(conn, f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"CREATE TABLE {DB}.weight (id INT PRIMARY KEY)")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {DB}.t VALUES (%s, %s)", [(i, i * 10) for i in range(1, ROWS + 1)])
    holder, watcher = db_conn(endpoints), db_conn(endpoints)
    copy_errors: list[int] = []
    started = threading.Event()
    holding: list[threading.Thread] = []
    original = copy_module.copy_batch

    def hold_then_wait_for_the_chunk(copier, chunks: str, migration_id: int, chunk_no: int) -> None:
        holder.begin()
        try:
            with holder.cursor() as cur:   # weight: the server rolls back the transaction that wrote less
                cur.executemany(f"INSERT INTO {DB}.weight VALUES (%s)", [(i,) for i in range(2_000)])
            query(holder, f"INSERT INTO {DB}.t_osc_new (id, v) VALUES (1, -1)")
            started.set()
            wait_for(lambda: waiting_on(watcher, copier, holder), timeout=30, what="the batch to wait for row 1")
            query(holder, f"SELECT 1 FROM {chunks} WHERE migration_id = %s AND chunk_no = %s FOR UPDATE",
                  (migration_id, chunk_no))
        finally:
            holder.rollback()   # whatever happened: the batch must not wait on this session

    def copy_meeting_a_deadlock(c, ctx, chunk_no, lo, hi, last, target=None):
        if lo is None and not started.is_set():
            holding.append(threading.Thread(target=hold_then_wait_for_the_chunk, args=(
                c, ctx.store(c).t("chunks"), ctx.migration.id, chunk_no)))
            holding[0].start()
            started.wait(30)
        try:
            return original(c, ctx, chunk_no, lo, hi, last, target)
        except pymysql.err.OperationalError as exc:
            copy_errors.append(exc.args[0])
            raise

    monkeypatch.setattr(copy_module, "copy_batch", copy_meeting_a_deadlock)
    spec = MigrationSpec(algorithm="copy", database=DB, table="t", alter="ADD COLUMN w INT NOT NULL DEFAULT 7",
                         copy_workers=1, apply_workers=1, chunk_size=10, batch_size=10, partitions=1).validate()
    try:
        with caplog.at_level(logging.WARNING, logger="stream_osc"):
            assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
    finally:
        for thread in holding:
            thread.join(30)
        holder.close()
        watcher.close()
        query(conn, f"DROP TABLE {DB}.weight")
    assert copy_errors == [1213]   # the batch did lose the deadlock
    assert [r.getMessage() for r in caplog.records if r.getMessage() == "transient failure"] == []
    assert [tuple(r) for r in query(conn, f"SELECT id, v, w FROM {DB}.t ORDER BY id")] == \
           [(i, i * 10, 7) for i in range(1, ROWS + 1)]
    assert migration_row(conn, DB, "t").status == "done"
