"""A re-copy that writes rows in place (applier/recopy.py: _write_upserting) keeps what the delete-and-insert kept:
it never waits for an application's row lock while holding others (invariant 10), a column the ALTER adds with a
DEFAULT computed from the row ends as the ALTER makes it (invariant 9), and a key the ALTER narrows is refused, not
merged (invariant 6). Where writing in place could differ, the re-copy deletes and inserts."""
from __future__ import annotations

import pymysql
import pytest

from applier import recopy
from applier.conflicts import ConstraintViolated
from applier.recopy import recopy_keys
from core.db import connect, qualified, query
from core.table import load_pair

pytestmark = pytest.mark.integration

DB = "osc_recopy_in_place"


def _tables(conn, name: str, source_ddl: str, new_ddl: str) -> tuple[str, str]:
    source, new = qualified(DB, name), qualified(DB, f"{name}_osc_new")
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {source}, {new}")
    query(conn, f"CREATE TABLE {source} ({source_ddl})")
    query(conn, f"CREATE TABLE {new} ({new_ddl})")
    return source, new


def test_a_key_the_application_inserts_again_meanwhile_is_not_waited_for_while_the_found_rows_are_held(
        endpoints, conn, monkeypatch):
    """The new table holds a stale row 20 the source no longer has. The re-copy's locking read finds 1-5 (and holds
    them) and not 20; the application then inserts 20 again and keeps its transaction open. Deleting the stale row
    must not read the source (a DELETE's read of another table takes share locks, which would wait for the
    application's row while holding 1-5)."""
    plain = "id INT PRIMARY KEY, v INT NOT NULL"
    source, new = _tables(conn, "reinserted", plain, plain)
    query(conn, f"INSERT INTO {source} SELECT seq, seq FROM {DB}.seq_1_to_5")
    query(conn, f"INSERT INTO {new} SELECT seq, seq FROM {DB}.seq_1_to_5")
    query(conn, f"INSERT INTO {new} VALUES (20, 20)")
    pair = load_pair(conn, DB, "reinserted", "reinserted_osc_new")
    assert pair.upsert
    tool, application = connect(endpoints.mysql), connect(endpoints.mysql)
    query(tool, "SET SESSION innodb_lock_wait_timeout = 2")   # a wait would end the re-copy with 1205
    inserted: list[bool] = []

    def then_the_application_inserts(session, sql, args=None):
        rows = query(session, sql, args)
        if session is tool and "LOCK IN SHARE MODE" in sql and not inserted:
            application.begin()
            query(application, f"INSERT INTO {source} VALUES (20, 1)")
            inserted.append(True)
        return rows

    monkeypatch.setattr(recopy, "query", then_the_application_inserts)
    try:
        recopy_keys(tool, pair, [(k,) for k in (1, 2, 3, 4, 5, 20)])
        query(application, f"UPDATE {source} SET v = v + 1 WHERE id = 3")   # a row the re-copy held
        application.commit()
    finally:
        tool.close()
        application.close()
    assert inserted, "the race did not happen as staged"
    assert query(conn, f"SELECT id, v FROM {new} ORDER BY id") == [(k, k) for k in range(1, 6)]
    # (20 is the application's insert: its own change re-copies it)


def test_a_column_added_with_a_default_computed_from_the_row_is_computed_again_when_the_row_changes(endpoints, conn):
    source, new = _tables(conn, "computed", "id INT PRIMARY KEY, v INT NOT NULL",
                          "id INT PRIMARY KEY, v INT NOT NULL, c INT DEFAULT (v * 2)")
    query(conn, f"INSERT INTO {source} VALUES (1, 10)")
    query(conn, f"INSERT INTO {new} (id, v) VALUES (1, 10)")   # as the copy wrote it
    query(conn, f"UPDATE {source} SET v = 11 WHERE id = 1")
    pair = load_pair(conn, DB, "computed", "computed_osc_new", "ADD COLUMN c INT DEFAULT (v * 2)")
    assert not pair.upsert
    session = connect(endpoints.mysql)
    try:
        recopy_keys(session, pair, [(1,)])
    finally:
        session.close()
    assert query(conn, f"SELECT id, v, c FROM {new}") == [(1, 11, 22)], "the ALTER would give c = v * 2"


def test_a_key_the_alter_narrows_to_a_prefix_refuses_the_colliding_row_and_overwrites_none(endpoints, conn):
    source, new = _tables(conn, "narrowed", "k VARCHAR(20) NOT NULL PRIMARY KEY, v INT NOT NULL",
                          "k VARCHAR(20) NOT NULL, v INT NOT NULL, PRIMARY KEY (k(3))")
    query(conn, f"INSERT INTO {source} VALUES ('abcd', 1)")
    query(conn, f"INSERT INTO {new} VALUES ('abcd', 1)")   # as the copy wrote it
    query(conn, f"INSERT INTO {source} VALUES ('abce', 2)")   # the application's, after the copy
    pair = load_pair(conn, DB, "narrowed", "narrowed_osc_new", "DROP PRIMARY KEY, ADD PRIMARY KEY (k(3))")
    assert not pair.upsert
    session = connect(endpoints.mysql)
    try:
        with pytest.raises((ConstraintViolated, pymysql.err.IntegrityError)):
            recopy_keys(session, pair, [("abce",)])
    finally:
        session.close()
    assert query(conn, f"SELECT k, v FROM {new}") == [("abcd", 1)]
