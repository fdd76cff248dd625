"""The tool's locking reads of the original table take their row locks in primary-key order, whatever plan the
server picks, so they never close a lock cycle with the application's writes.

Two plans read a long key list in another order: MariaDB turns an IN list of 1,000 values or more into a
derived table and reads the rows in the list's order (a re-copy's keys come from a set), and a list covering
much of a table is read by a full scan of the smallest covering index, a secondary one. A locking read that
takes share locks in such an order, while another holds locks in key order and application writes wait on
rows between them (a share-lock request queues behind a waiting exclusive one), closes a cycle, and the
server rolls back the lightest transaction in it: the application's single-row UPDATE.
"""
from __future__ import annotations

import random
import threading
import time

import pymysql
import pytest

from applier.recopy import recopy_keys, with_retry
from core.db import connect, qualified, query, scalar
from core.table import load_pair
from tests.integration.helpers import wait_for
from tests.integration.ledger import AcknowledgedWriter

pytestmark = pytest.mark.integration

DB = "osc_lock_order"
PLANS = {
    # rows, keys read, secondary index: each makes the server read the keys in another order than the key's
    "value_list_read_in_list_order": (50_000, 1_200, False),
    "full_scan_of_a_secondary_index": (20_000, 12_000, True),
}


def make_tables(conn: pymysql.connections.Connection, table: str, rows: int, secondary: bool):
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


def deadlocks(conn: pymysql.connections.Connection) -> int:
    return int(query(conn, "SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")[0][1])


@pytest.mark.parametrize("plan", list(PLANS))
def test_an_application_transaction_locking_in_key_order_never_deadlocks_with_a_recopy(endpoints, conn, plan):
    """The application locks a low key, the re-copy then waits for it; the application's next lock, on a
    higher key the re-copy was given earlier in its list, must be granted: a re-copy locking in key order
    holds nothing above the key it waits for."""
    rows, count, secondary = PLANS[plan]
    source, pair = make_tables(conn, f"ordered_{plan[:20]}", rows, secondary)
    low, high = 50, rows - 50
    rng = random.Random(7)
    others = [(k,) for k in rng.sample(range(low + 1, high), count - 2)]
    keys = [(high,), *others, (low,)]   # the list's order puts the high key first
    app, tool = connect(endpoints.mysql), connect(endpoints.mysql)
    before = deadlocks(conn)
    query(app, "SET SESSION innodb_lock_wait_timeout = 20")
    app.begin()
    query(app, f"UPDATE {source} SET counter = counter + 1 WHERE id = %s", (low,))
    outcome: list[object] = []
    recopy = threading.Thread(target=lambda: outcome.append(with_retry(lambda: recopy_keys(tool, pair, keys))))
    recopy.start()
    try:
        wait_for(lambda: scalar(conn, "SELECT trx_state FROM information_schema.INNODB_TRX "
                                      "WHERE trx_mysql_thread_id = %s", (tool.thread_id(),)) == "LOCK WAIT",
                 timeout=10, what="the re-copy's locking read to wait for the row the application holds (a read "
                                  "through a secondary index locks its index entries, not the row)")
        query(app, f"UPDATE {source} SET counter = counter + 1 WHERE id = %s", (high,))
        app.commit()
    finally:
        recopy.join(timeout=60)
        app.close()
        tool.close()
    assert deadlocks(conn) == before, "the re-copy locked a higher key before the lower one"
    assert outcome and outcome[0][0] == count, "the re-copy did not finish"


class CounterWriter(AcknowledgedWriter):
    """An application session bumping counters of the hot rows as fast as it can; a refused write is an error."""

    def __init__(self, addr, source: str, hot: list[int], seed: int) -> None:
        super().__init__(addr, name=f"counter-writer-{seed}")
        self.source, self.hot, self.rng = source, hot, random.Random(seed)

    def write(self, conn: pymysql.connections.Connection) -> None:
        row = self.rng.choice(self.hot)
        self.doing = f"increment id {row}"
        query(conn, f"UPDATE {self.source} SET counter = counter + 1 WHERE id = %s", (row,))


def test_concurrent_recopies_of_overlapping_keys_never_make_an_application_write_a_deadlock_victim(endpoints, conn):
    """Two re-copies at once (an applier and a validation repair, or the cutover's catch-up) of long, overlapping
    key lists in orders of their own, with unthrottled single-row writes on the rows they share."""
    rows, count, _ = PLANS["value_list_read_in_list_order"]
    source, pair = make_tables(conn, "hot", rows, secondary=False)
    hot = list(range(1, 201))
    writers = [CounterWriter(endpoints.mysql, source, hot, seed) for seed in range(8)]

    def recopies(seed: int) -> None:
        rng = random.Random(seed)
        session = connect(endpoints.mysql)
        try:
            for _ in range(30):
                keys = [(k,) for k in {*rng.sample(range(1, rows + 1), count), *hot}]
                rng.shuffle(keys)   # each re-copy's keys in an order of its own, as sets of other sizes give them
                with_retry(lambda keys=keys: recopy_keys(session, pair, keys))
        finally:
            session.close()
    tools = [threading.Thread(target=recopies, args=(seed,)) for seed in (101, 102)]
    for thread in writers + tools:
        thread.start()
    started = time.monotonic()
    for thread in tools:
        thread.join(timeout=300)
    for writer in writers:
        writer.stop_event.set()
        writer.join()
    assert not any(t.is_alive() for t in tools), f"re-copies still running after {time.monotonic() - started:.0f} s"
    assert sum(w.writes for w in writers) > 0
    assert [e for w in writers for e in w.errors] == []
