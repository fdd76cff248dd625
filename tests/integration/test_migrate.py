"""End to end: online schema change under unthrottled seeded write traffic, for several kinds of ALTER.

The data check is the application's own record of acknowledged writes (Traffic.check): every key
ever written, before, during or after the swap, and every seeded key; nothing is left out.
"""
import time
import zlib

import pytest

from core.db import query
from migration.runner import Runner
from core.spec import MigrationSpec, helper_table_name
from core.state import StateStore
from demo.traffic import Traffic, create_sample_table
from tests.integration.deadlocks import ConflictWatch, assert_no_tool_deadlock, traffic_refusals
from monitor.progress import Progress
from tests.integration.helpers import db_conn, leftovers

pytestmark = pytest.mark.integration

ALTERS = {
    "add_column_with_default": ("ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'new'",
                                lambda cols: cols["status"] == "varchar"),
    "drop_column": ("DROP COLUMN legacy", lambda cols: "legacy" not in cols),
    "widen_type": ("MODIFY k BIGINT NOT NULL DEFAULT 0", lambda cols: cols["k"] == "bigint"),
    "add_index": ("ADD INDEX idx_c (c)", lambda cols: True),
    "change_charset": ("MODIFY note VARCHAR(60) CHARACTER SET utf8mb4 NOT NULL DEFAULT ''",
                       lambda cols: True),
}


# these kinds also run with --validate-ahead: its checks must not cost a write either
VALIDATED_AHEAD = {"drop_column", "change_charset"}


def column_types(conn, db, table):
    return dict(query(conn, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
                            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table)))


@pytest.mark.parametrize("kind", list(ALTERS))
def test_migration_under_traffic_keeps_every_acknowledged_write(endpoints, kind):
    alter, schema_ok = ALTERS[kind]
    db, table = "e2e", f"t_{kind}"
    conn = db_conn(endpoints)
    query(conn, f"DROP TABLE IF EXISTS {db}.{helper_table_name(table, 'old')}")   # kept by an earlier run of this test
    original = create_sample_table(conn, db, table, rows=20_000, seed=11)
    traffic = Traffic(endpoints.mysql, db, table, original, seed=zlib.crc32(kind.encode()) % 1000, writers=4,
                      rate=None)
    watch = ConflictWatch(endpoints.mysql, [db], f"traffic on {db}.{table}")
    traffic.start()
    spec = MigrationSpec(algorithm="copy", database=db, table=table, alter=alter, copy_workers=2, apply_workers=2,
                         chunk_size=4_000, batch_size=1_000, partitions=4,
                         validate_ahead=kind in VALIDATED_AHEAD).validate()
    migration_window = (0.0, 0.0)
    try:
        traffic.wait_for_writes(200)
        started = time.monotonic()
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        migration_window = (started, time.monotonic())
        traffic.wait_for_writes(500)   # writes after the swap count as much as any other
    finally:
        stats = traffic.stop()

    migration = StateStore(conn, spec.metadata_schema).latest(db, table)
    assert (migration.stage, migration.status) == ("done", "done")
    assert migration.cutover_blocked_ms is not None and migration.cutover_blocked_ms >= 0
    # validated in one consistent snapshot: writes in flight during validation are not differences
    assert migration.validation_diffs == 0
    assert stats.failures == [], stats.failures[:5]
    assert_no_tool_deadlock(watch, traffic_refusals(stats.refused), migration_window)
    assert schema_ok(column_types(conn, db, table))
    assert column_types(conn, db, spec.old_table)["k"] == "int"    # the original keeps its schema
    result = traffic.check(conn)
    assert result.mismatches == [], (len(result.mismatches), result.mismatches[:5])
    assert result.rows > 15_000 and result.keys_written > 1_000
    assert leftovers(endpoints, db, table) == [f"table {db}.{spec.old_table}"]
