"""The tool gives way to the application (invariant 10): a re-copy never waits for an application's row lock while
it holds others, so an application transaction that goes on to lock more rows is never a deadlock's victim."""
from __future__ import annotations

import threading

import pytest
import redis

from applier.apply import bound_lock_waits
from applier.giving_way import LockWaits
from applier.recopy import recopy_keys, with_retry
from core.db import connect, qualified, query
from core.table import load_pair
from tests.integration.helpers import application_session, waiting_on
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

DB = "osc_gives_way"
ROWS = 1200


def _tables(conn, table: str) -> tuple[str, str]:
    source, new = qualified(DB, table), qualified(DB, f"{table}_osc_new")
    for name in (source, new):
        query(conn, f"DROP TABLE IF EXISTS {name}")
        query(conn, f"CREATE TABLE {name} (id INT PRIMARY KEY, v INT NOT NULL)")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {source} VALUES (%s, 0)", [(k,) for k in range(1, ROWS + 1)])
    return source, new


def _rows(conn, name: str) -> list[tuple]:
    return [tuple(r) for r in query(conn, f"SELECT id, v FROM {name} ORDER BY id")]


def test_an_application_transaction_locking_rows_around_a_recopy_is_never_a_deadlock_victim(endpoints, conn):
    """The application holds row 600, then updates rows 10 and 1100 (below and above it, in the same transaction)
    while a re-copy of every row runs. A re-copy holding share locks on rows 1..599 while it waited for row 600 (as
    one locking read of the keys does) closes a cycle with the application's update of row 10, and InnoDB rolls
    back the lighter transaction: the application's. Giving way, the re-copy holds nothing while it waits."""
    source, new = _tables(conn, "hot")
    pair = load_pair(conn, DB, "hot", "hot_osc_new")
    app = application_session(endpoints.mysql)
    tool = connect(endpoints.mysql)
    bound_lock_waits(tool)
    outcome: dict[str, object] = {}
    try:
        query(app, "BEGIN")
        query(app, f"UPDATE {source} SET v = 1 WHERE id = 600")

        def recopy() -> None:
            try:
                outcome["result"] = with_retry(lambda: recopy_keys(tool, pair, [(k,) for k in range(1, ROWS + 1)]))
            except BaseException as exc:   # noqa: BLE001 - shown by the assertion below
                outcome["error"] = exc

        worker = threading.Thread(target=recopy)
        worker.start()
        wait_for(lambda: waiting_on(conn, tool, app), 30, "the re-copy waiting for the application's row 600")
        held = query(conn, "SELECT trx_rows_locked FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id=%s",
                     (tool.thread_id(),))
        assert held and held[0][0] <= 1, f"the re-copy holds {held[0][0]} row locks while it waits for the application"
        query(app, f"UPDATE {source} SET v = 2 WHERE id = 10")     # would close the cycle: the application the victim
        query(app, f"UPDATE {source} SET v = 3 WHERE id = 1100")
        query(app, "COMMIT")
        worker.join(60)
        assert not worker.is_alive(), "the re-copy did not finish once the application committed"
        assert "error" not in outcome, f"the re-copy failed: {outcome.get('error')!r}"
        recopy_keys(tool, pair, [(10,), (1100,)])   # as the application's change events of them will have it
        assert _rows(conn, new) == _rows(conn, source), "the new table does not match the source after the re-copy"
    finally:
        app.close()
        tool.close()


def test_a_key_held_long_by_the_application_is_shown_while_the_others_are_written(endpoints, conn):
    """A key whose row the application holds is waited for alone, after every other key of the batch is written,
    and shown as long-locked while it waits (what `status` and the metrics read)."""
    source, new = _tables(conn, "held")
    pair = load_pair(conn, DB, "held", "held_osc_new")
    app = application_session(endpoints.mysql)
    tool = connect(endpoints.mysql)
    bound_lock_waits(tool, 30)
    client = redis.Redis.from_url(endpoints.redis_url)
    waits = LockWaits(client, migration_id=990_001)
    client.delete(waits.key)
    outcome: dict[str, object] = {}
    try:
        query(app, "BEGIN")
        query(app, f"UPDATE {source} SET v = 7 WHERE id = 77")
        worker = threading.Thread(target=lambda: outcome.update(
            result=recopy_keys(tool, pair, [(k,) for k in range(1, 201)], waits=waits)))
        worker.start()
        wait_for(lambda: waiting_on(conn, tool, app), 30, "the re-copy waiting for row 77")
        others = [r for r in _rows(conn, new) if r[0] != 77]
        assert others == [(k, 0) for k in range(1, 201) if k != 77], "the other keys waited for the held one"
        shown = wait_for(lambda: LockWaits.read(client, 990_001), 10, "the held key shown as long-locked")
        assert [key for key, _ in shown] == ["id=77"], f"shown as waiting: {shown}"
        query(app, "COMMIT")
        worker.join(30)
        assert outcome.get("result") == (200, 0)
        assert _rows(conn, new) == _rows(conn, source)[:200]
        assert LockWaits.read(client, 990_001) == [], "the key is still shown as waiting after its write"
    finally:
        app.close()
        tool.close()
        client.delete(waits.key)
