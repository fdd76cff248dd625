"""The new table means what the ALTER means: a renamed column carries its data, generated columns are
recomputed by the server (invariant 9). Whole migrations, with writes to the renamed column meanwhile."""
from __future__ import annotations

import random

import pymysql
import pytest

from cutover.compare import compare_tables
from core.db import query
from core.endpoints import Endpoints
from migration.runner import Runner
from core.spec import MigrationSpec
from core.state import StateStore
from monitor.progress import Progress
from tests.integration.helpers import abort_leftover, db_conn, fresh_table, leftovers
from tests.integration.ledger import AcknowledgedWriter

pytestmark = pytest.mark.integration

DB = "colmap"
ROWS = 3_000


class NoteWriter(AcknowledgedWriter):
    """Updates `note` of random rows (seeded) until stopped or until `note` no longer exists (the swap);
    remembers the last acknowledged value per key."""

    def __init__(self, endpoints: Endpoints, table: str, seed: int) -> None:
        super().__init__(endpoints.mysql, name=f"note-writer-{table}")
        self.table, self.rng = table, random.Random(seed)
        self.acknowledged: dict[int, str] = {}
        self.n = 0

    @property
    def error(self) -> str | None:
        """The first write refused, if any."""
        return self.errors[0] if self.errors else None

    def write(self, conn: pymysql.connections.Connection) -> bool:
        key, self.n = self.rng.randint(1, ROWS), self.n + 1
        value = f"w{self.n}" + self.rng.choice(["", "é", " ,#", "ü"])
        try:
            query(conn, f"UPDATE {DB}.{self.table} SET note = %s WHERE id = %s", (value, key))
        except pymysql.err.OperationalError as exc:
            if exc.args[0] == 1054:   # unknown column: the table is the new one now
                return False
            raise
        self.acknowledged[key] = value
        self.stop_event.wait(0.002)
        return True


def run_migration(endpoints: Endpoints, table: str, alter: str) -> None:
    spec = MigrationSpec(algorithm="copy", database=DB, table=table, alter=alter, copy_workers=2, apply_workers=1,
                         chunk_size=1_000, batch_size=500, partitions=2).validate()
    assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0


@pytest.mark.parametrize("alter", [
    "RENAME COLUMN note TO remark",
    "CHANGE COLUMN `note` `remark` VARCHAR(80) CHARACTER SET utf8mb4 NOT NULL DEFAULT '', MODIFY amount DECIMAL(14,4)",
], ids=["rename_column", "change_widening"])
def test_a_renamed_column_carries_every_value(endpoints, alter):
    table = "renamed_" + ("change" if alter.startswith("CHANGE") else "rename")
    conn = db_conn(endpoints)
    fresh_table(conn, DB, table, rows=ROWS, seed=3)
    query(conn, f"UPDATE {DB}.{table} SET note = CASE id % 4 WHEN 0 THEN '' WHEN 1 THEN CONCAT('n', id, 'é') "
                f"ELSE CONCAT('n, #', id) END")
    before = dict(query(conn, f"SELECT id, note FROM {DB}.{table}"))
    writer = NoteWriter(endpoints, table, seed=41)
    writer.start()
    try:
        run_migration(endpoints, table, alter)
    finally:
        writer.stop_event.set()
        writer.join(30)
    assert writer.error is None, writer.error
    assert writer.acknowledged, "no write reached the table during the migration"

    expected = {**before, **writer.acknowledged}
    assert dict(query(conn, f"SELECT id, remark FROM {DB}.{table}")) == expected
    assert "note" not in {r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
                                                    "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (DB, table))}
    migration = StateStore(conn, "stream_osc").latest(DB, table)
    assert (migration.stage, migration.validation_diffs) == ("done", 0)
    old = MigrationSpec(DB, table, alter).old_table
    # no write reached the old table after the swap (`note` is gone from the name's table), so the
    # original and the new table hold the same rows, compared under the renamed names in the new types
    comparison = compare_tables(conn, DB, old, table, alter=alter)
    assert comparison.equal and comparison.compared == ROWS
    assert leftovers(endpoints, DB, table) == [f"table {DB}.{old}"]


def test_generated_columns_come_through_recomputed(endpoints):
    table = "generated"
    conn = db_conn(endpoints)
    abort_leftover(conn, DB, table)
    spec = MigrationSpec(DB, table, "MODIFY a BIGINT NOT NULL, ADD COLUMN h BIGINT AS (a * 3) STORED")
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {DB}.{spec.old_table}")
    query(conn, f"DROP TABLE IF EXISTS {DB}.{table}")
    query(conn, f"CREATE TABLE {DB}.{table} (id BIGINT PRIMARY KEY, a INT NOT NULL, g INT AS (a * 2) STORED, "
                "v INT AS (a + 1) VIRTUAL, KEY g (g)) ENGINE=InnoDB")
    rng = random.Random(17)
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {DB}.{table} (id, a) VALUES (%s, %s)",
                        [(i, rng.randint(-10 ** 6, 10 ** 6)) for i in range(1, 2_001)])
    run_migration(endpoints, table, spec.alter)

    rows = query(conn, f"SELECT COUNT(*), SUM(g = a * 2), SUM(v = a + 1), SUM(h = a * 3) FROM {DB}.{table}")[0]
    assert tuple(int(x) for x in rows) == (2_000,) * 4
    assert query(conn, f"SELECT COUNT(*) FROM {DB}.{table} n JOIN {DB}.{spec.old_table} o USING (id) "
                       "WHERE n.a = o.a")[0][0] == 2_000
    assert compare_tables(conn, DB, spec.old_table, table, alter=spec.alter).equal
