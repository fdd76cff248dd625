"""Validation ahead (cutover/validate_ahead.py): chunks checked during the copy are not compared whole at the end,
and what changed in them since must be.

Each test leaves a migration in sync and waiting for its cutover with its coordinator gone (no applier runs),
so a source change stays unapplied: only validation can bring it to the new table.
"""
from __future__ import annotations

import time

import pytest

from core.context import RunContext
from core.db import query, scalar
from core.spec import MigrationSpec, helper_table_name
from core.state import StateStore
from core.table import load_pair
from cutover import validate_ahead as ahead_module
from cutover.validate import validate
from cutover.validate_ahead import reusable_checks, validate_ahead
from demo.traffic import create_sample_table
from streams.topics import TopicNames, end_offsets, group_reader
from tests.integration.helpers import cli, leftovers, wait_for, waiting_without_coordinator

pytestmark = pytest.mark.integration

DB = "ahead"
ROWS = 6_000
ALTER = "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0"
SETTINGS = {"copy_workers": 1, "apply_workers": 1, "chunk_size": 1_000, "batch_size": 200, "partitions": 2,
            "keep_old": False, "max_lag_events": 50}


def waiting_migration(endpoints, conn, table: str) -> RunContext:
    """db.table migrated up to its manual cutover, coordinator killed; the context of that migration."""
    cli("abort", "--table", f"{DB}.{table}")
    for role in ("new", "old"):
        query(conn, f"DROP TABLE IF EXISTS {DB}.{helper_table_name(table, role)}")
    create_sample_table(conn, DB, table, rows=ROWS, seed=7)
    waiting_without_coordinator(conn, DB, table, "--alter", ALTER, "--copy-workers", "1", "--apply-workers", "1",
                                "--chunk-size", "1000", "--batch-size", "200", "--target-batch-time", "0",
                                "--partitions", "2", "--drop-old", "--max-lag", "50", "--cutover", "manual",
                                "--quiet")
    spec = MigrationSpec(database=DB, table=table, alter=ALTER, cutover="manual", **SETTINGS).validate()
    migration = StateStore(conn, spec.metadata_schema).active(DB, table)
    return RunContext(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table))


def topic_ends(ctx: RunContext) -> dict[int, int]:
    reader = group_reader(ctx.endpoints.kafka, ctx.migration.group_id)
    try:
        return end_offsets(reader, TopicNames(ctx.migration.prefix, DB, ctx.spec.table).changes, ctx.spec.partitions)
    finally:
        reader.close()


def wait_until_captured(ctx: RunContext, before: dict[int, int]) -> None:
    """Until the change topic holds an event more than at `before` (the change just made is captured)."""
    wait_for(lambda: sum(topic_ends(ctx).values()) > sum(before.values()), 30, "the change to be captured")


def new_table_flag(conn, table: str, key: int) -> tuple:
    return query(conn, f"SELECT k, c FROM {DB}.{helper_table_name(table, 'new')} WHERE id=%s", (key,))[0]


def test_validation_after_checks_ahead_compares_the_keys_changed_since_and_not_the_checked_ranges(endpoints, conn):
    table = "reuse"
    ctx = waiting_migration(endpoints, conn, table)
    validate_ahead(ctx, 0)   # as during the copy (a table this small is copied before a check could start)
    checked = scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND checked_from IS NOT NULL",
                     (ctx.migration.id,))
    chunks = scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND end_key IS NOT NULL",
                    (ctx.migration.id,))
    assert checked == chunks > 0, "every bounded chunk is checked"
    new = f"{DB}.{helper_table_name(table, 'new')}"
    # a row of a checked chunk changed in the source (an event, not applied: no applier runs) ...
    before = topic_ends(ctx)
    query(conn, f"UPDATE {DB}.{table} SET k = k + 1000000 WHERE id = 2500")
    wait_until_captured(ctx, before)
    # ... and one damaged in the new table alone (no event): the checks ahead say nothing changed it since
    query(conn, f"UPDATE {new} SET c = 'damaged' WHERE id = 4500")

    reusable = reusable_checks(ctx)
    assert reusable is not None and len(reusable.ranges) == checked
    assert (2500,) in reusable.changed and (4500,) not in reusable.changed
    repaired = validate(ctx, None, reusable.ranges, reusable.changed)
    assert repaired == 1
    assert new_table_flag(conn, table, 2500) == query(conn, f"SELECT k, c FROM {DB}.{table} WHERE id=2500")[0]
    assert new_table_flag(conn, table, 4500)[1] == "damaged", "a checked range was compared whole again"
    # without the checks, the whole table is compared and the damage found
    assert validate(ctx) == 1
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def test_a_change_committed_during_a_check_ahead_is_compared_at_the_end(endpoints, conn, monkeypatch):
    """The topic's ends are read before the check: a change made while the chunk is compared, and captured
    before the check is recorded, lies after the recorded position. Read after the check instead, the
    position would lie past the change (the later chunks' checks too), and validation at the end would
    never look at its key."""
    table = "during"
    ctx = waiting_migration(endpoints, conn, table)
    first = next(c for c in StateStore(conn, "stream_osc").chunks(ctx.migration.id) if c.end is not None)
    key = first.end[0] - 1
    real_repair = ahead_module.repair_range
    changed: list[int] = []

    def change_while_checking(c, hasher, lo, hi, *args, **kwargs):
        repaired = real_repair(c, hasher, lo, hi, *args, **kwargs)
        if hi == first.end:   # the first chunk matched; the change lands before its check is recorded
            before = topic_ends(ctx)
            query(conn, f"UPDATE {DB}.{table} SET k = k + 1000000 WHERE id = %s", (key,))
            wait_until_captured(ctx, before)
            changed.append(key)
        return repaired

    monkeypatch.setattr(ahead_module, "repair_range", change_while_checking)
    validate_ahead(ctx, 0)
    assert changed == [key]
    assert scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND checked_from IS NOT NULL "
                        "AND chunk_no = %s", (ctx.migration.id, first.number)) == 1
    reusable = reusable_checks(ctx)
    assert reusable is not None and (key,) in reusable.changed
    assert validate(ctx, None, reusable.ranges, reusable.changed) == 1
    assert new_table_flag(conn, table, key) == query(conn, f"SELECT k, c FROM {DB}.{table} WHERE id=%s", (key,))[0]
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def test_checks_older_than_the_topic_keeps_deletes_are_set_aside(endpoints, conn):
    """A delete's tombstone leaves the compacted topic after a day: a check older than half that is not relied on."""
    table = "aged"
    ctx = waiting_migration(endpoints, conn, table)
    validate_ahead(ctx, 0)
    assert reusable_checks(ctx) is not None
    aged = time.time() - ahead_module.MAX_CHECK_AGE_S - 60
    query(conn, "UPDATE stream_osc.chunks SET checked_from = JSON_SET(checked_from, '$.at', %s) "
                "WHERE migration_id=%s", (aged, ctx.migration.id))
    assert reusable_checks(ctx) is None
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
