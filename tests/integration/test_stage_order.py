"""StateStore.enter_stage keeps the algorithm's order on the recorded row: an illegal move is refused and
changes nothing."""
from __future__ import annotations

import pytest

from core.stages import IllegalTransition, Stage
from tests.integration.helpers import recorded_migration

pytestmark = pytest.mark.integration

DB = "osc_stage_order"


def test_a_stage_entered_out_of_order_is_refused_and_the_row_is_unchanged(endpoints, conn):
    with recorded_migration(conn, endpoints, DB, "items") as recorded:
        store, migration = recorded.store, recorded.migration
        store.enter_stage(migration.id, Stage.COPY)
        with pytest.raises(IllegalTransition, match="stage copy cannot enter stage cutover"):
            store.enter_stage(migration.id, Stage.CUTOVER, error="not written")
        row = store.get(migration.id)
        assert (row.stage, row.error) == (Stage.COPY, None)
        store.enter_stage(migration.id, Stage.APPLY)
        assert store.get(migration.id).stage == Stage.APPLY
