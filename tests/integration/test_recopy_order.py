"""Two re-copies of one key (the cutover's catch-up and an applier of `stream-osc worker`, or a validation repair
and an applier): the first reads the key while its row is deleted, which locks nothing under READ COMMITTED; the
row is inserted again and the second re-copy writes it; the first's delete then reaches the new table. The row
the application inserted must still be there when both are done."""
from __future__ import annotations

import logging

import pytest

from applier import recopy
from applier.recopy import recopy_keys
from core.db import connect, qualified, query
from core.table import load_pair

pytestmark = pytest.mark.integration

DB = "osc_recopy_order"


def test_a_recopy_that_found_no_row_does_not_delete_a_newer_recopy_of_the_key(endpoints, conn, monkeypatch):
    source, new = qualified(DB, "raced"), qualified(DB, "raced_osc_new")
    for name in (source, new):
        query(conn, f"DROP TABLE IF EXISTS {name}")
        query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)")
    pair = load_pair(conn, DB, "raced", "raced_osc_new")
    first, second = connect(endpoints.mysql), connect(endpoints.mysql)
    locking_reads: list[list] = []

    def read_then_race(session, sql, args=None):
        rows = query(session, sql, args)
        if session is first and "LOCK IN SHARE MODE" in sql:
            locking_reads.append(rows)
            if len(locking_reads) == 1:   # the first re-copy found no row: it is inserted, another re-copy runs
                query(conn, f"INSERT INTO {source} VALUES (7, 1)")
                recopy_keys(second, pair, [(7,)])
        return rows

    monkeypatch.setattr(recopy, "query", read_then_race)
    try:
        recopy_keys(first, pair, [(7,)])
    finally:
        first.close()
        second.close()
    assert locking_reads[0] == [], "the race did not happen as staged"
    assert query(conn, f"SELECT id, v FROM {new}") == [(7, 1)], "the source holds the row; the new table lost it"


def _raced_tables(conn) -> tuple[str, str]:
    source, new = qualified(DB, "churned"), qualified(DB, "churned_osc_new")
    for name in (source, new):
        query(conn, f"DROP TABLE IF EXISTS {name}")
        query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {source} SELECT seq, seq FROM {DB}.seq_1_to_50")
    return source, new


def test_a_recopy_that_lost_a_key_to_a_race_writes_again_only_the_keys_the_tables_disagree_on(endpoints, conn,
                                                                                              monkeypatch):
    source, new = _raced_tables(conn)
    pair = load_pair(conn, DB, "churned", "churned_osc_new")
    first, second = connect(endpoints.mysql), connect(endpoints.mysql)
    locking_reads: list[tuple] = []

    def read_then_race(session, sql, args=None):
        rows = query(session, sql, args)
        if session is first and "LOCK IN SHARE MODE" in sql:
            locking_reads.append(tuple(args))
            if len(locking_reads) == 1:   # key 77 had no row: it is inserted and re-copied by another session
                query(conn, f"INSERT INTO {source} VALUES (77, 1)")
                recopy_keys(second, pair, [(77,)])
        return rows

    monkeypatch.setattr(recopy, "query", read_then_race)
    try:
        recopy_keys(first, pair, [(k,) for k in range(1, 51)] + [(77,)])
    finally:
        first.close()
        second.close()
    assert len(locking_reads[0]) == 51
    assert locking_reads[1:] == [(77,)], "the second round re-copies the one key the race took, nothing else"
    assert query(conn, f"SELECT COUNT(*), SUM(v) FROM {new}") == query(conn, f"SELECT COUNT(*), SUM(v) FROM {source}")


def test_a_key_the_tables_keep_disagreeing_on_is_reported_when_the_rounds_run_out(endpoints, conn, monkeypatch,
                                                                                caplog):
    source, new = _raced_tables(conn)
    pair = load_pair(conn, DB, "churned", "churned_osc_new")
    session = connect(endpoints.mysql)
    locking_reads: list[tuple] = []

    def churn_around_reads(on, sql, args=None):
        """Key 77 vanishes before each locking read and comes back after it (an application that keeps deleting
        and inserting it; each of those writes has its own change, still to be applied)."""
        churning = on is session and "LOCK IN SHARE MODE" in sql
        if churning:
            query(conn, f"DELETE FROM {source} WHERE id = 77")
        rows = query(on, sql, args)
        if churning:
            locking_reads.append(tuple(args))
            query(conn, f"INSERT INTO {source} VALUES (77, 1)")
        return rows

    monkeypatch.setattr(recopy, "query", churn_around_reads)
    try:
        with caplog.at_level(logging.WARNING, logger="stream_osc"):
            recopy_keys(session, pair, [(k,) for k in range(1, 51)] + [(77,)])
    finally:
        session.close()
    assert len(locking_reads) == recopy.CONFIRM_ROUNDS
    assert [r.fields for r in caplog.records if r.getMessage().startswith("keys still present in only one")] == [
        {"keys": 1, "rounds": recopy.CONFIRM_ROUNDS}]
    assert query(conn, f"SELECT COUNT(*) FROM {new}") == [(50,)]   # the 50 settled rows, 77 left to its changes
