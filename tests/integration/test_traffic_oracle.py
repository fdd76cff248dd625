"""The acknowledged-writes check of the seeded load (migration/traffic.py) holds on an untouched table,
accepts either state of a write whose connection broke, and fails when one acknowledged write is undone."""
from __future__ import annotations

import pytest

from core.db import kill_connection, query
from demo.traffic import Traffic, create_sample_table
from tests.integration.deadlocks import ConflictWatch, assert_no_tool_deadlock, traffic_refusals
from tests.integration.helpers import db_conn

pytestmark = pytest.mark.integration

DB = "oracle"


def run_load(endpoints, table: str, conn, kill_sessions: int = 0) -> Traffic:
    """2,000 seeded rows, four unthrottled writers; `kill_sessions` times, their connections are cut."""
    original = create_sample_table(conn, DB, table, rows=2_000, seed=5)
    traffic = Traffic(endpoints.mysql, DB, table, original, seed=5, writers=4, rate=None)
    watch = ConflictWatch(endpoints.mysql, [DB], f"the load alone on {DB}.{table}")
    traffic.start()
    try:
        traffic.wait_for_writes(500)
        for _ in range(kill_sessions):
            for (thread_id,) in query(conn, "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s "
                                            "AND ID <> CONNECTION_ID()", (DB,)):
                kill_connection(conn, thread_id)   # False if it ended since the listing
            traffic.wait_for_writes(300)
    finally:
        stats = traffic.stop()
    assert stats.failures == [], stats.failures[:5]
    assert_no_tool_deadlock(watch, traffic_refusals(stats.refused))   # the load's own deadlocks: reported
    return traffic


def test_check_holds_without_migration_and_through_broken_connections(endpoints):
    conn = db_conn(endpoints)
    traffic = run_load(endpoints, "broken_sessions", conn, kill_sessions=3)
    result = traffic.check(conn)
    assert result.mismatches == []
    assert result.uncertain > 0 and traffic.stats.uncertain == result.uncertain
    assert result.keys_written > 300 and result.rows > 1_500


def test_check_fails_when_one_acknowledged_write_is_undone(endpoints):
    conn = db_conn(endpoints)
    traffic = run_load(endpoints, "undone", conn)
    assert traffic.check(conn).mismatches == []
    name = f"`{DB}`.`undone`"
    inserted = query(conn, f"SELECT MAX(id) FROM {name} WHERE note = 'ins' AND id < 1000000")[0][0]
    updated = query(conn, f"SELECT MIN(id) FROM {name} WHERE c LIKE 'w %%' AND note = 'latin'")[0][0]
    untouched = query(conn, f"SELECT MIN(id) FROM {name} WHERE c LIKE 'row %%'")[0][0]
    query(conn, f"DELETE FROM {name} WHERE id = %s", (inserted,))
    query(conn, f"UPDATE {name} SET k = k - 1 WHERE id = %s", (updated,))          # one increment lost
    query(conn, f"UPDATE {name} SET note = 'changed' WHERE id = %s", (untouched,))  # a row nobody wrote
    query(conn, f"INSERT INTO {name} (k, c, updated_at) VALUES (1, 'never acknowledged', NOW(6))")
    mismatches = traffic.check(conn).mismatches
    assert len(mismatches) == 4, mismatches
    assert mismatches[-1].startswith(f"key {inserted}: missing")
    assert any(m.startswith(f"key {updated}: holds") for m in mismatches)
    assert any(m.startswith(f"key {untouched}: holds") for m in mismatches)
    assert any("never acknowledged" in m for m in mismatches)
