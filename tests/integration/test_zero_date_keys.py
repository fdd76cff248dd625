"""A change key holding what Debezium sends for a zero date stands for every row it may be (applier/zero_dates.py).

Zero dates ('0000-00-00', a zero year, month or day) have no Java date: a change to any of them comes keyed by the
epoch (or the key column's DEFAULT). The lookup must find each such row in either table, and must wait for a
writer whose change reached the binlog before its row became visible to a plain read (real MariaDB).
"""
from __future__ import annotations

import threading
from datetime import date

import pytest

from applier.zero_dates import with_zero_date_rows
from core.db import query, scalar
from core.table import TablePair, load_pair
from tests.integration.helpers import application_session, db_conn, wait_for

pytestmark = pytest.mark.integration

DB = "zero_date_keys"
EPOCH = date(1970, 1, 1)


@pytest.fixture
def app(endpoints):
    """An application's session whose sql_mode lets it write zero dates."""
    session = application_session(endpoints.mysql, sql_mode="")
    yield session
    session.close()


def fresh_pair(conn, app, table: str, columns: str) -> TablePair:
    """`table` and `<table>_new`, both empty with `columns`, as an application whose sql_mode allows zero dates."""
    query(app, f"CREATE DATABASE IF NOT EXISTS {DB}")
    for name in (table, f"{table}_new"):
        query(app, f"DROP TABLE IF EXISTS {DB}.{name}")
        query(app, f"CREATE TABLE {DB}.{name} ({columns})")
    return load_pair(conn, DB, table, f"{table}_new")


@pytest.fixture
def pair(conn, app):
    return fresh_pair(conn, app, "t", "d DATE NOT NULL, n INT NOT NULL, PRIMARY KEY (d, n)")


def test_every_zero_date_row_of_either_table_is_found_for_the_epoch_and_no_other_row(conn, app, pair):
    query(app, f"INSERT INTO {DB}.t VALUES ('0000-00-00', 1), ('2024-00-10', 1), ('0000-05-10', 1), "
               "('1970-01-01', 1), ('2024-05-01', 1), ('0000-00-00', 2)")
    query(app, f"INSERT INTO {DB}.t_new VALUES ('2024-05-00', 1)")            # a row deleted from the source
    found = with_zero_date_rows(conn, pair, {(EPOCH, 1)})
    assert found == {(EPOCH, 1), ("0000-00-00", 1), ("2024-00-10", 1), ("0000-05-10", 1), ("2024-05-00", 1)}
    assert with_zero_date_rows(conn, pair, {(date(2024, 5, 1), 1)}) == {(date(2024, 5, 1), 1)}


def test_the_lookup_waits_for_a_writer_whose_row_is_not_yet_visible(endpoints, conn, app, pair):
    """The writer's change is what the applier is applying: its row must be found once the writer commits."""
    app.begin()
    query(app, f"INSERT INTO {DB}.t VALUES ('0000-00-00', 3)")                 # written, not yet committed
    result: dict[str, set] = {}
    looker = db_conn(endpoints)
    query(looker, "SET SESSION innodb_lock_wait_timeout = 300")   # waits for as long as a busy machine takes to see it

    def look() -> None:
        result["found"] = with_zero_date_rows(looker, pair, {(EPOCH, 3)})
    lookup = threading.Thread(target=look, daemon=True)
    lookup.start()
    try:   # the looker's own transaction, by its session: not by its statement's text, which the view may not show yet
        wait_for(lambda: scalar(conn, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = "
                                      "'LOCK WAIT' AND trx_mysql_thread_id = %s", (looker.thread_id(),)),
                 60, "the lookup waiting for the writer")
        assert lookup.is_alive()
        app.commit()
        lookup.join(30)
    finally:
        looker.close()
    assert result["found"] == {(EPOCH, 3), ("0000-00-00", 3)}


def test_a_key_whose_date_column_comes_later_reads_only_its_leading_values_rows(conn, app):
    """With the date after the leading column, the lookup reads the index range of the key's leading values,
    not the table: under the cutover's lock a scan of a large table would hold writes for its length."""
    pair = fresh_pair(conn, app, "late", "n INT NOT NULL, d DATE NOT NULL, PRIMARY KEY (n, d)")
    query(app, f"INSERT INTO {DB}.late SELECT seq, '2024-01-01' FROM {DB}.seq_1_to_20000")
    query(app, f"INSERT INTO {DB}.late VALUES (7, '0000-00-00'), (7, '2024-00-10'), (8, '0000-00-00')")
    reads = ("SELECT SUM(VARIABLE_VALUE) FROM information_schema.SESSION_STATUS "
             "WHERE VARIABLE_NAME LIKE 'HANDLER_READ%%'")
    before = int(scalar(conn, reads))
    found = with_zero_date_rows(conn, pair, {(7, EPOCH)})
    rows_read = int(scalar(conn, reads)) - before
    assert found == {(7, EPOCH), (7, "0000-00-00"), (7, "2024-00-10")}
    assert rows_read < 100, f"the lookup read {rows_read} index entries of a 20,003-row table"
