"""Init reads the copy's key ranges on a session of its own while the capture starts (migration/init_stage.py:
plan_copy_while_capture_starts): the two overlap, the ranges still cover every key, and a failed start does not
wait for the walk."""
from __future__ import annotations

import threading
import time

import pytest

from applier import chunks
from applier.chunks import key_ranges
from core.db import qualified, query
from core.keys import primary_key
from migration import init_stage
from migration.init_stage import plan_copy_while_capture_starts
from tests.integration.helpers import db_conn, wait_for

pytestmark = pytest.mark.integration

DB = "copy_plan"
SOURCE = qualified(DB, "plan")


class StartFailed(Exception):
    """The capture's start, failing."""


def plan_waiting_on(conn, table: str) -> bool:
    """Is a session walking `table`'s key index (the plan's bound read) waiting for the table's metadata lock?"""
    return bool(query(conn, "SELECT 1 FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata "
                            "lock' AND INFO LIKE %s", (f"%FROM {qualified(DB, table)}%OFFSET%",)))


def end_session(endpoints, thread_id: int) -> None:
    """KILL a session (and with it the locks it holds)."""
    killer = db_conn(endpoints)
    try:
        query(killer, f"KILL {thread_id}")
    finally:
        killer.close()


@pytest.fixture
def planned_table(conn):
    query(conn, f"DROP TABLE IF EXISTS {DB}.plan")
    query(conn, f"CREATE TABLE {DB}.plan (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {DB}.plan SELECT seq, seq FROM {DB}.seq_1_to_1000")
    return primary_key(conn, DB, "plan")


def test_the_plan_is_read_while_the_capture_starts_and_covers_every_key(endpoints, conn, planned_table):
    holder = db_conn(endpoints)
    query(holder, f"LOCK TABLES {DB}.plan WRITE")   # the plan's first bound read waits here

    def start() -> None:
        """The capture's start: returns only once the plan's read is seen waiting beside it."""
        try:
            wait_for(lambda: plan_waiting_on(conn, "plan"), timeout=10, what="the plan's read, beside the start")
        finally:
            query(holder, "UNLOCK TABLES")

    try:
        ranges = plan_copy_while_capture_starts(start, endpoints, SOURCE, planned_table, 300)
    finally:
        holder.close()
    assert ranges[0][0] is None and ranges[-1][1] is None
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))   # contiguous: every key in exactly one range
    assert ranges == key_ranges(conn, SOURCE, planned_table, None, None, 300)


def test_a_failed_capture_start_stops_the_plan_at_its_next_bound(endpoints, conn, planned_table, monkeypatch):
    bounds_read: list[object] = []
    walk = chunks.next_boundary

    def counted(*args, **kwargs):
        bounds_read.append(args[3])
        return walk(*args, **kwargs)

    monkeypatch.setattr(chunks, "next_boundary", counted)
    monkeypatch.setattr(init_stage, "_end_plan", lambda *args: None)   # the walk's own stop, without the kill
    holder = db_conn(endpoints)
    query(holder, f"LOCK TABLES {DB}.plan WRITE")

    def start() -> None:
        try:
            wait_for(lambda: plan_waiting_on(conn, "plan"), timeout=10, what="the plan's read, beside the start")
        finally:
            query(holder, "UNLOCK TABLES")
        raise StartFailed("connector failed")

    try:
        with pytest.raises(StartFailed):
            # a thousand bounds, if walked on
            plan_copy_while_capture_starts(start, endpoints, SOURCE, planned_table, 1)
    finally:
        holder.close()
    assert 1 <= len(bounds_read) < 100   # it returned once the walk had stopped, after a few bounds


def test_a_failed_capture_start_does_not_wait_for_a_plan_read_queued_behind_a_lock(endpoints, conn, planned_table):
    holder = db_conn(endpoints)
    query(holder, f"LOCK TABLES {DB}.plan WRITE")   # held throughout: the plan's read would wait for it for days
    safety = threading.Timer(30, lambda: end_session(endpoints, holder.thread_id()))
    safety.start()   # a plan left waiting ends when the lock does, so a broken kill fails below instead of hanging

    def start() -> None:
        wait_for(lambda: plan_waiting_on(conn, "plan"), timeout=10, what="the plan's read, beside the start")
        raise StartFailed("connector failed")

    began = time.monotonic()
    try:
        with pytest.raises(StartFailed):
            plan_copy_while_capture_starts(start, endpoints, SOURCE, planned_table, 300)
        waited_s = time.monotonic() - began
        assert not plan_waiting_on(conn, "plan")
    finally:
        safety.cancel()
        holder.close()
    assert waited_s < 15, "init's undo waited for the plan's read until the lock was released"
