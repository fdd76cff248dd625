"""The bulk copy stops at the largest key read at init (invariant 3): keys written later, such as rows the
application keeps moving to new keys above the top, arrive as changes and never race the copy's last
chunk (whose plan is open-ended) into refusing a row under a UNIQUE key."""
from __future__ import annotations

import pytest

import applier.copy as copy_module
from core.db import query
from core.spec import MigrationSpec
from migration.runner import Runner
from monitor.progress import Progress
from tests.integration.helpers import db_conn

pytestmark = pytest.mark.integration

DB = "copy_bound"


def test_rows_moved_above_the_top_during_the_copy_are_applied_not_copied(endpoints, conn, monkeypatch):
    query(conn, f"DROP TABLE IF EXISTS {DB}.moved, {DB}.moved_osc_new, {DB}.moved_osc_old")
    query(conn, f"CREATE TABLE {DB}.moved (id INT PRIMARY KEY, u VARCHAR(20) NOT NULL, UNIQUE KEY u (u))")
    query(conn, f"INSERT INTO {DB}.moved SELECT seq, CONCAT('u-', seq) FROM {DB}.seq_1_to_1000")
    app = db_conn(endpoints)
    moves: list[int] = []
    original = copy_module.copy_batch

    def move_while_copying(c, ctx, chunk_no, lo, hi, last, target=None):
        if lo is not None and lo[0] > 500 and not moves:   # rows below 500 are copied by now
            for old in range(1, 21):
                query(app, f"UPDATE {DB}.moved SET id = %s WHERE id = %s", (5000 + old, old))
                moves.append(old)
        return original(c, ctx, chunk_no, lo, hi, last, target)

    monkeypatch.setattr(copy_module, "copy_batch", move_while_copying)
    spec = MigrationSpec(algorithm="copy", database=DB, table="moved", alter="ADD COLUMN n INT NULL", copy_workers=1,
                         apply_workers=1, chunk_size=100, batch_size=50, partitions=2, keep_old=False).validate()
    try:
        assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0
    finally:
        app.close()
    assert len(moves) == 20
    assert query(conn, "SELECT COALESCE(SUM(rows_copied), 0) FROM stream_osc.chunks c JOIN stream_osc.migrations m "
                       "ON m.id = c.migration_id WHERE m.db = %s AND m.tbl = 'moved' AND m.id = "
                       "(SELECT MAX(id) FROM stream_osc.migrations WHERE db = %s AND tbl = 'moved')",
                 (DB, DB))[0][0] == 1000   # nothing above the top at init was copied
    rows = dict(query(conn, f"SELECT id, u FROM {DB}.moved"))
    assert rows == {**{i: f"u-{i}" for i in range(21, 1001)}, **{5000 + i: f"u-{i}" for i in range(1, 21)}}
