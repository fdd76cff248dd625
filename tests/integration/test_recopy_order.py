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
# A second UNIQUE key makes a re-copy delete the keys' rows and insert them again; without one it writes them in place
# and deletes only the keys without a source row (applier/recopy.py: _write_upserting).
IN_PLACE, DELETE_INSERT = "", ", u INT NULL UNIQUE"


def raced_recopy(endpoints, conn, monkeypatch, table: str, keys: list[tuple], raced: int) -> list[tuple]:
    """Re-copy `keys` of DB.table into DB.table_osc_new in one session while its first locking read finds key `raced`
    without a row: the application then inserts that row and a second session re-copies it, before the first's delete
    reaches the new table. Returns each locking read of the first session as (rows found, keys asked)."""
    source = qualified(DB, table)
    pair = load_pair(conn, DB, table, f"{table}_osc_new")
    first, second = connect(endpoints.mysql), connect(endpoints.mysql)
    locking_reads: list[tuple] = []

    def read_then_race(session, sql, args=None):
        rows = query(session, sql, args)
        if session is first and "LOCK IN SHARE MODE" in sql:
            locking_reads.append((rows, tuple(args)))
            if len(locking_reads) == 1:
                query(conn, f"INSERT INTO {source} (id, v) VALUES (%s, 1)", (raced,))
                recopy_keys(second, pair, [(raced,)])
        return rows

    monkeypatch.setattr(recopy, "query", read_then_race)
    try:
        recopy_keys(first, pair, keys)
    finally:
        first.close()
        second.close()
    return locking_reads


@pytest.mark.parametrize("unique", [IN_PLACE, DELETE_INSERT], ids=["in-place", "delete-insert"])
def test_a_recopy_that_found_no_row_does_not_delete_a_newer_recopy_of_the_key(endpoints, conn, monkeypatch, unique):
    source, new = qualified(DB, "raced"), qualified(DB, "raced_osc_new")
    for name in (source, new):
        query(conn, f"DROP TABLE IF EXISTS {name}")
        query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL{unique})")
    locking_reads = raced_recopy(endpoints, conn, monkeypatch, "raced", [(7,)], 7)
    assert locking_reads[0][0] == [], "the race did not happen as staged"
    assert query(conn, f"SELECT id, v FROM {new}") == [(7, 1)], "the source holds the row; the new table lost it"
    assert load_pair(conn, DB, "raced", "raced_osc_new").upsert is (unique == IN_PLACE)


def _raced_tables(conn, unique: str = DELETE_INSERT) -> tuple[str, str]:
    source, new = qualified(DB, "churned"), qualified(DB, "churned_osc_new")
    for name in (source, new):
        query(conn, f"DROP TABLE IF EXISTS {name}")
        query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL{unique})")
    query(conn, f"INSERT INTO {source} (id, v) SELECT seq, seq FROM {DB}.seq_1_to_50")
    return source, new


@pytest.mark.parametrize("unique", [IN_PLACE, DELETE_INSERT], ids=["in-place", "delete-insert"])
def test_a_recopy_that_lost_a_key_to_a_race_writes_again_only_the_keys_the_tables_disagree_on(endpoints, conn,
                                                                                              monkeypatch, unique):
    source, new = _raced_tables(conn, unique)
    locking_reads = raced_recopy(endpoints, conn, monkeypatch, "churned", [(k,) for k in range(1, 51)] + [(77,)], 77)
    assert [asked for _, asked in locking_reads] == [tuple(range(1, 51)) + (77,), (77,)], \
        "the second round re-copies the one key the race took, nothing else"
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
            query(conn, f"INSERT INTO {source} (id, v) VALUES (77, 1)")
        return rows

    monkeypatch.setattr(recopy, "query", churn_around_reads)
    try:
        with caplog.at_level(logging.WARNING, logger="stream_osc"):
            recopy_keys(session, pair, [(k,) for k in range(1, 51)] + [(77,)])
    finally:
        session.close()
    assert len(locking_reads) == recopy.CONFIRM_ROUNDS
    assert [r.fields for r in caplog.records if r.getMessage().startswith("keys still present in only one")] == [
        {"keys": 1, "rounds": recopy.CONFIRM_ROUNDS, "first": "id=77"}]
    assert query(conn, f"SELECT COUNT(*) FROM {new}") == [(50,)]   # the 50 settled rows, 77 left to its changes


def test_a_key_the_two_tables_spell_differently_is_one_row_to_the_confirming_check(endpoints, conn, monkeypatch,
                                                                                   caplog):
    """A VARCHAR key the ALTER made CHAR: the source holds 'a ', the new table 'a' (CHAR drops trailing spaces), one
    row under the PAD SPACE collation. A re-copy that also meets a key without a row must see them agree."""
    source, new = qualified(DB, "spelled"), qualified(DB, "spelled_osc_new")
    query(conn, f"DROP TABLE IF EXISTS {source}, {new}")
    query(conn, f"CREATE TABLE {source} (id VARCHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"CREATE TABLE {new} (id CHAR(10) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {source} VALUES ('a ', 1)")
    pair = load_pair(conn, DB, "spelled", "spelled_osc_new", "MODIFY id CHAR(10) COLLATE utf8mb4_general_ci")
    session = connect(endpoints.mysql)
    locking_reads: list[tuple] = []

    def counted(on, sql, args=None):
        if on is session and "LOCK IN SHARE MODE" in sql:
            locking_reads.append(tuple(args))
        return query(on, sql, args)

    monkeypatch.setattr(recopy, "query", counted)
    try:
        with caplog.at_level(logging.WARNING, logger="stream_osc"):
            recopy_keys(session, pair, [("a ",), ("gone",)])
    finally:
        session.close()
    assert query(conn, f"SELECT id, v FROM {new}") == [("a", 1)]
    assert len(locking_reads) == 1, "the two spellings of one row were taken for two keys, re-copied round after round"
    assert not [r for r in caplog.records if r.getMessage().startswith("keys still present in only one")]


@pytest.mark.parametrize("unique", [IN_PLACE, DELETE_INSERT], ids=["in-place", "delete-insert"])
def test_the_cutovers_recopy_under_lock_tables_checks_a_key_without_a_row(endpoints, conn, unique):
    """The cutover's drain re-copies in the session holding LOCK TABLES, where a statement may name only the locked
    tables, each once and by the name it was locked under; a key without a row makes it run the confirming check."""
    source, new = _raced_tables(conn, unique)
    query(conn, f"DELETE FROM {source} WHERE id = 50")
    pair = load_pair(conn, DB, "churned", "churned_osc_new")
    session = connect(endpoints.mysql)
    try:
        query(session, f"LOCK TABLES {source} WRITE, {new} WRITE")
        assert recopy_keys(session, pair, [(1,), (50,)], in_transaction=False) == (1, 0)
        query(session, "UNLOCK TABLES")
    finally:
        session.close()
    assert query(conn, f"SELECT id, v FROM {new}") == [(1, 1)]
