"""Every write the application was told committed is in the final table, through repeated swaps.

The oracle is the writers' own record (tests/integration/ledger.py), never the tool's notion of
when the swap happened. Writers run unthrottled across three back-to-back migrations, for a
lowercase name (its helper tables must not sort before it in the server's metadata-lock order), an
uppercase one and one of 64 characters (no suffix fits: the helper names must still sort after it).
"""
from __future__ import annotations

import pytest

from core.db import query
from migration.runner import Runner
from core.spec import MigrationSpec
from monitor.progress import Progress
from tests.integration.helpers import db_conn, leftovers
from tests.integration.ledger import Ledger, create_ledger_table

pytestmark = pytest.mark.integration

NAMES = {"lowercase": "orders", "uppercase": "Orders", "64_characters": "o" * 60 + "rder"}
ALTERS = ("ADD COLUMN extra1 INT NULL", "ADD INDEX payload_idx (payload)",
          "MODIFY payload VARCHAR(80) NOT NULL DEFAULT ''")


@pytest.mark.parametrize("kind", list(NAMES))
def test_no_acknowledged_write_is_lost_through_repeated_swaps(endpoints, kind):
    table, db = NAMES[kind], f"acked_{kind}"
    conn = db_conn(endpoints)
    create_ledger_table(conn, db, table, rows=20_000, writers=8)
    with Ledger(endpoints.mysql, db, table, writers=8, seed=len(table)) as ledger:
        for number, alter in enumerate(ALTERS, 1):
            ledger.wait_for_writes(200)
            spec = MigrationSpec(algorithm="copy", database=db, table=table, alter=alter, copy_workers=2,
                                 apply_workers=2, chunk_size=5_000, batch_size=1_000, partitions=4, keep_old=False,
                                 max_lag_events=200).validate()
            assert Runner(endpoints, spec, Progress(quiet=True)).run() == 0, f"migration {number}"
        ledger.wait_for_writes(200)   # writes after the last swap count as much as any other
    assert ledger.errors() == []
    assert ledger.missing(conn) == []
    columns = [r[0] for r in query(conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
                                         "AND TABLE_NAME=%s", (db, table))]
    assert "extra1" in columns
    assert leftovers(endpoints, db, table) == []
