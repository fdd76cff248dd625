"""The tool's locking reads of the original table take their row locks in primary-key order, whatever plan the
server would pick, so they never close a lock cycle with the application's writes.

Two plans read a long key list in another order: MariaDB turns an IN list of 1,000 values or more into a
derived table and reads the rows in the list's order (a re-copy's keys come from a set), and a list covering
much of a table is read by a full scan of the smallest covering index, a secondary one. A locking read that
takes share locks in such an order, while another holds locks in key order and application writes wait on
rows between them (a share-lock request queues behind a waiting exclusive one), closes a cycle, and the
server rolls back the lightest transaction in it: the application's single-row UPDATE. Each test first
checks that the server would pick the plan it attacks, so that it cannot pass for want of it.
"""
from __future__ import annotations

import random
import threading

import pymysql
import pytest

from applier.recopy import recopy_keys, with_retry
from core.db import connect, qualified, query, scalar
from core.endpoints import MySQLAddress
from core.keys import Key
from core.table import TablePair, load_pair
from tests.integration.helpers import wait_for
from tests.integration.ledger import AcknowledgedWriter

pytestmark = pytest.mark.integration

DB = "osc_lock_order"
PLANS = {
    # rows, keys read, secondary index, what EXPLAIN shows of the plan without the tool's settings
    "value_list_read_in_list_order": (50_000, 1_200, False, "<subquery2>"),
    "full_scan_of_a_secondary_index": (20_000, 12_000, True, "grp"),
}


def make_tables(conn: pymysql.connections.Connection, table: str, rows: int,
                secondary: bool) -> tuple[str, TablePair]:
    """`table` (id, grp, counter) with `rows` rows, grp in no relation to id; its new table; the pair."""
    source, new = qualified(DB, table), qualified(DB, f"{table}_osc_new")
    index = ", KEY grp (grp)" if secondary else ""
    for name in (source, new):
        query(conn, f"DROP TABLE IF EXISTS {name}")
        query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, grp INT NOT NULL, counter INT NOT NULL DEFAULT 0"
                    f"{index}) ENGINE=InnoDB")
    query(conn, f"INSERT INTO {source} (id, grp) SELECT seq, (seq * 7919) % 1000 FROM {DB}.seq_1_to_{rows}")
    query(conn, f"ANALYZE TABLE {source}")
    return source, load_pair(conn, DB, table, f"{table}_osc_new")


def plan_left_to_the_server(conn: pymysql.connections.Connection, source: str, keys: list[Key]) -> str:
    """EXPLAIN of the locking read by `keys` as the server plans it for a session without the tool's settings."""
    query(conn, "SET SESSION in_predicate_conversion_threshold = DEFAULT")
    try:
        rows = query(conn, f"EXPLAIN SELECT id FROM {source} WHERE id IN ({', '.join(['%s'] * len(keys))}) "
                           "LOCK IN SHARE MODE", [k[0] for k in keys])
    finally:
        query(conn, "SET SESSION in_predicate_conversion_threshold = 0")
    return " ".join(str(value) for row in rows for value in row)


@pytest.mark.parametrize("plan", list(PLANS))
def test_an_application_transaction_locking_in_key_order_never_deadlocks_with_a_recopy(endpoints, conn, plan):
    """The application locks a low key, the re-copy then waits for it; the application's next lock, on a
    higher key the re-copy was given earlier in its list, must be granted: a re-copy locking in key order
    holds nothing above the key it waits for. Neither side retries: a deadlock fails whichever it rolls back."""
    rows, count, secondary, shown = PLANS[plan]
    source, pair = make_tables(conn, f"ordered_{plan[:20]}", rows, secondary)
    low, high = 50, rows - 50
    rng = random.Random(7)
    others = [(k,) for k in rng.sample(range(low + 1, high), count - 2)]
    keys = [(high,), *others, (low,)]   # the list's order puts the high key first
    assert shown in plan_left_to_the_server(conn, source, keys), "the server no longer picks the plan attacked here"
    app = connect(endpoints.mysql)
    tool = connect(endpoints.mysql)
    outcome: list[object] = []

    def recopy() -> None:
        try:
            outcome.append(recopy_keys(tool, pair, keys))
        except pymysql.err.MySQLError as exc:
            outcome.append(exc)
    thread = threading.Thread(target=recopy)
    try:
        query(app, "SET SESSION innodb_lock_wait_timeout = 20")
        app.begin()
        query(app, f"UPDATE {source} SET counter = counter + 1 WHERE id = %s", (low,))
        thread.start()
        wait_for(lambda: scalar(conn, "SELECT trx_state FROM information_schema.INNODB_TRX "
                                      "WHERE trx_mysql_thread_id = %s", (tool.thread_id(),)) == "LOCK WAIT",
                 timeout=10, what="the re-copy's locking read to wait for the row the application holds (a read "
                                  "through a secondary index locks its index entries, not the row)")
        query(app, f"UPDATE {source} SET counter = counter + 1 WHERE id = %s", (high,))
        app.commit()
    finally:
        app.close()   # ends the application's transaction whatever happened, so the re-copy can finish
        if thread.ident is not None:
            thread.join()
        tool.close()
    assert outcome == [(count, 0)], "the re-copy was refused or did not re-copy every key"


class CounterWriter(AcknowledgedWriter):
    """An application session bumping counters of the hot rows as fast as it can; a refused write is an error."""

    def __init__(self, addr: MySQLAddress, source: str, hot: list[int], seed: int) -> None:
        super().__init__(addr, name=f"counter-writer-{seed}")
        self.source, self.hot, self.rng = source, hot, random.Random(seed)

    def write(self, conn: pymysql.connections.Connection) -> None:
        row = self.rng.choice(self.hot)
        self.doing = f"increment id {row}"
        query(conn, f"UPDATE {self.source} SET counter = counter + 1 WHERE id = %s", (row,))


def test_concurrent_recopies_of_overlapping_keys_never_make_an_application_write_a_deadlock_victim(endpoints, conn):
    """Two re-copies at once (an applier and a validation repair, or the cutover's catch-up) of long, overlapping
    key lists in orders of their own, with unthrottled single-row writes on the rows they share."""
    rows, count, _, shown = PLANS["value_list_read_in_list_order"]
    source, pair = make_tables(conn, "hot", rows, secondary=False)
    hot = list(range(1, 201))
    rounds = 30
    assert shown in plan_left_to_the_server(conn, source, [(k,) for k in range(count, 0, -1)]), \
        "the server no longer picks the plan attacked here"
    writers = [CounterWriter(endpoints.mysql, source, hot, seed) for seed in range(8)]
    finished: list[int] = []
    failures: list[BaseException] = []

    def recopies(seed: int) -> None:
        rng = random.Random(seed)
        session = connect(endpoints.mysql)
        try:
            for _ in range(rounds):
                keys = [(k,) for k in {*rng.sample(range(1, rows + 1), count), *hot}]
                rng.shuffle(keys)   # each re-copy's keys in an order of its own, as sets of other sizes give them
                with_retry(lambda keys=keys: recopy_keys(session, pair, keys))
            finished.append(seed)
        except BaseException as exc:   # reported by the test, not lost with the thread
            failures.append(exc)
        finally:
            session.close()
    tools = [threading.Thread(target=recopies, args=(seed,)) for seed in (101, 102)]
    for thread in writers:
        thread.start()
    writes_before = sum(w.writes for w in writers)
    for thread in tools:
        thread.start()
    for thread in tools:
        thread.join()
    writes_during = sum(w.writes for w in writers) - writes_before
    for writer in writers:
        writer.stop_event.set()
        writer.join()
    assert failures == [] and sorted(finished) == [101, 102], f"re-copies failed: {failures}"
    assert writes_during > 0, "the application did not write while the re-copies ran"
    assert [e for w in writers for e in w.errors] == []
