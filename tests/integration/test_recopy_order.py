"""Two re-copies of one key (the cutover's catch-up and an applier of `stream-osc worker`, or a validation repair
and an applier): the first reads the key while its row is deleted, which locks nothing under READ COMMITTED; the
row is inserted again and the second re-copy writes it; the first's delete then reaches the new table. The row
the application inserted must still be there when both are done."""
from __future__ import annotations

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
