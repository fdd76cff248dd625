"""End to end: online schema change under seeded write traffic, for several kinds of ALTER."""
import pytest

from cutover.compare import compare_tables
from migration.db import query
from migration.runner import Runner
from migration.spec import MigrationSpec
from migration.state import StateStore
from migration.traffic import Traffic, create_sample_table
from monitor.progress import Progress
from tests.integration.helpers import db_conn, leftovers
from migration.spec import helper_table_name

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


def column_types(conn, db, table):
    return dict(query(conn, "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS "
                            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table)))


@pytest.mark.parametrize("kind", list(ALTERS))
def test_migration_under_traffic_keeps_every_row(endpoints, kind):
    alter, schema_ok = ALTERS[kind]
    db, table = "e2e", f"t_{kind}"
    conn = db_conn(endpoints)
    query(conn, f"DROP TABLE IF EXISTS {db}.{helper_table_name(table, 'old')}")   # kept by an earlier run of this test
    create_sample_table(conn, db, table, rows=20_000, seed=11)
    traffic = Traffic(endpoints.mysql, db, table, seed=hash(kind) % 1000, rate=150)
    traffic.start()
    spec = MigrationSpec(database=db, table=table, alter=alter, copy_workers=2, apply_workers=2,
                         chunk_size=4_000, batch_size=1_000, partitions=4).validate()
    try:
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
        # Keep writing a moment after the swap: those writes must land in the new table.
        after = traffic.stats.writes
        while traffic.stats.writes < after + 20:
            traffic.join(0.05)
    finally:
        stats = traffic.stop()

    migration = StateStore(conn, spec.metadata_schema).latest(db, table)
    assert (migration.stage, migration.status) == ("done", "done")
    assert migration.cutover_blocked_ms is not None and migration.cutover_blocked_ms >= 0
    # validated in one consistent snapshot: writes in flight during validation are not differences
    assert migration.validation_diffs == 0
    assert stats.failures == [], stats.failures[:5]
    assert stats.writes > 100
    assert schema_ok(column_types(conn, db, table))
    assert column_types(conn, db, spec.old_table)["k"] == "int"    # the original keeps its schema
    since_swap = stats.keys_written_since(migration.cutover_at)
    result = compare_tables(conn, db, spec.old_table, table, "id", since_swap)
    assert result.compared > 15_000
    assert result.equal, (result.only_left[:5], result.only_right[:5], result.different[:5])
    assert leftovers(endpoints, db, table) == [f"table {db}.{spec.old_table}"]
