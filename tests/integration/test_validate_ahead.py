"""Validation ahead (cutover/validate_ahead.py): chunks checked during the copy are not compared whole at the end,
and everything written in them since, or differing at their check, must be.

Each test leaves a migration in sync and waiting for its cutover with its coordinator gone (no applier runs),
so a source change stays unapplied: only validation can bring it to the new table.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from core.context import RunContext
from core.db import query, scalar
from core.spec import MigrationSpec, helper_table_name
from core.state import StateStore
from core.table import load_pair
from cutover import validate_ahead as ahead_module
from cutover.validate import validate
from cutover.validate_ahead import reusable_checks, validate_ahead
from demo.traffic import create_sample_table
from streams.topics import TopicNames, consumer_config, end_offsets, group_reader
from tests.integration.helpers import (abort_leftover, cli, leftovers, run_context, status_doc, wait_for,
                                       waiting_for_cutover)

pytestmark = pytest.mark.integration

DB = "ahead"
ROWS = 6_000
ALTER = "ADD COLUMN flag TINYINT NOT NULL DEFAULT 0"
SETTINGS = {"copy_workers": 1, "apply_workers": 1, "chunk_size": 1_000, "batch_size": 200, "partitions": 2,
            "keep_old": False, "max_lag_events": 50}


def waiting_migration(endpoints, conn, table: str, log: Path, rows: int = ROWS,
                      chunk_size: int = 1_000) -> tuple[RunContext, str]:
    """db.table migrated up to its manual cutover, coordinator killed; the migration's context and what the
    coordinator printed."""
    abort_leftover(conn, DB, table)
    for role in ("new", "old"):
        query(conn, f"DROP TABLE IF EXISTS {DB}.{helper_table_name(table, role)}")
    create_sample_table(conn, DB, table, rows=rows, seed=7)
    proc = waiting_for_cutover(conn, DB, table, "--alter", ALTER, "--copy-workers", "1", "--apply-workers", "1",
                               "--chunk-size", str(chunk_size), "--batch-size", "200", "--target-batch-time", "0",
                               "--partitions", "2", "--drop-old", "--max-lag", "50", "--validate-ahead", log=log)
    proc.kill()
    proc.wait(30)
    output = log.read_text()
    spec = MigrationSpec(database=DB, table=table, alter=ALTER, cutover="manual",
                         **{**SETTINGS, "chunk_size": chunk_size}).validate()
    migration = StateStore(conn, spec.metadata_schema).active(DB, table)
    return run_context(endpoints, spec, migration, load_pair(conn, DB, table, spec.new_table)), output


def topic_ends(ctx: RunContext) -> dict[int, int]:
    reader = group_reader(ctx.endpoints.kafka, ctx.migration.group_id)
    try:
        return end_offsets(reader, TopicNames(ctx.migration.prefix, DB, ctx.spec.table).changes, ctx.spec.partitions)
    finally:
        reader.close()


def wait_until_captured(ctx: RunContext, before: dict[int, int]) -> None:
    """Until the change topic holds an event more than at `before` (the change just made is captured)."""
    wait_for(lambda: sum(topic_ends(ctx).values()) > sum(before.values()), 30, "the change to be captured")


def commit_group_offsets(ctx: RunContext, offsets: dict[int, int]) -> None:
    """Commit the applier group's offsets, as an applier does after writing a batch (once the killed
    coordinator's members have left the group)."""
    topic = TopicNames(ctx.migration.prefix, DB, ctx.spec.table).changes
    consumer = Consumer(consumer_config(ctx.endpoints.kafka, **{"group.id": ctx.migration.group_id,
                                                                "enable.auto.commit": False}))

    def committed() -> bool:
        try:
            consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
            return True
        except KafkaException:
            return False
    try:
        wait_for(committed, 60, "the applier group's offsets to be committed")
    finally:
        consumer.close()


def rows_of(conn, table: str, key: int) -> tuple[tuple, tuple]:
    """(k, c) of a key in the original and in the new table."""
    sql = "SELECT k, c FROM {} WHERE id=%s"
    return (query(conn, sql.format(f"{DB}.{table}"), (key,))[0],
            query(conn, sql.format(f"{DB}.{helper_table_name(table, 'new')}"), (key,))[0])


def checked(conn, ctx: RunContext) -> int:
    return scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND checked_from IS NOT NULL",
                  (ctx.migration.id,))


def finish(endpoints, table: str) -> None:
    assert cli("abort", "--table", f"{DB}.{table}").returncode == 0
    assert leftovers(endpoints, DB, table) == []


def test_a_migration_checks_its_copied_chunks_while_it_copies(endpoints, conn, tmp_path):
    table = "during_copy"
    ctx, output = waiting_migration(endpoints, conn, table, tmp_path / "migrate.log", rows=60_000, chunk_size=2_000)
    assert checked(conn, ctx) > 0
    assert "PK ranges were checked during the copy" in output
    assert status_doc(DB, table)["copy"]["chunks_checked"] == checked(conn, ctx)
    finish(endpoints, table)


def test_validation_after_checks_ahead_compares_the_keys_changed_since_not_the_checked_ranges(endpoints, conn,
                                                                                               tmp_path):
    table = "reuse"
    ctx, _ = waiting_migration(endpoints, conn, table, tmp_path / "migrate.log")
    query(conn, "UPDATE stream_osc.chunks SET checked_from = NULL WHERE migration_id=%s", (ctx.migration.id,))
    validate_ahead(ctx, 0)
    bounded = scalar(conn, "SELECT COUNT(*) FROM stream_osc.chunks WHERE migration_id=%s AND end_key IS NOT NULL",
                     (ctx.migration.id,))
    assert checked(conn, ctx) == bounded > 0, "every bounded chunk is checked"
    new = f"{DB}.{helper_table_name(table, 'new')}"
    # a row of a checked chunk changed in the source (an event, not applied: no applier runs) ...
    before = topic_ends(ctx)
    query(conn, f"UPDATE {DB}.{table} SET k = k + 1000000 WHERE id = 2500")
    wait_until_captured(ctx, before)
    # ... and one damaged in the new table alone (no event): the checks ahead say nothing changed it since
    query(conn, f"UPDATE {new} SET c = 'damaged' WHERE id = 4500")

    reusable = reusable_checks(ctx)
    assert reusable is not None and len(reusable.ranges) == bounded
    assert (2500,) in reusable.changed and (4500,) not in reusable.changed
    assert validate(ctx, None, reusable.ranges, reusable.changed) == 1
    original, new_row = rows_of(conn, table, 2500)
    assert new_row == original
    assert rows_of(conn, table, 4500)[1][1] == "damaged", "a checked range was compared whole again"
    assert validate(ctx) == 1   # without the checks every range is compared, and the damage found
    finish(endpoints, table)


def test_a_row_written_wrongly_during_a_check_is_compared_at_the_end(endpoints, conn, monkeypatch, tmp_path):
    """An applier writes a row of the chunk being checked, wrongly, and commits its offsets past the change's
    event, after the check compared the chunk. The offsets recorded were read before the check, so the event
    is in the scan at the end. Read after the check, they would lie past it, and the wrong row would pass."""
    table = "during"
    ctx, _ = waiting_migration(endpoints, conn, table, tmp_path / "migrate.log")
    query(conn, "UPDATE stream_osc.chunks SET checked_from = NULL WHERE migration_id=%s", (ctx.migration.id,))
    first = next(c for c in StateStore(conn, "stream_osc").chunks(ctx.migration.id) if c.end is not None)
    key = first.end[0] - 1
    real_compare = ahead_module.differing_keys
    written: list[int] = []

    def applier_writes_during_the_check(c, hasher, lo, hi, *args, **kwargs):
        found = real_compare(c, hasher, lo, hi, *args, **kwargs)
        if hi == first.end and not written:
            before = topic_ends(ctx)
            query(conn, f"UPDATE {DB}.{table} SET k = k + 1000000 WHERE id = %s", (key,))
            wait_until_captured(ctx, before)
            query(conn, f"UPDATE {DB}.{helper_table_name(table, 'new')} SET k = -1 WHERE id = %s", (key,))
            commit_group_offsets(ctx, topic_ends(ctx))
            written.append(key)
        return found

    monkeypatch.setattr(ahead_module, "differing_keys", applier_writes_during_the_check)
    validate_ahead(ctx, 0)
    assert written == [key]
    reusable = reusable_checks(ctx)
    assert reusable is not None and (key,) in reusable.changed
    assert validate(ctx, None, reusable.ranges, reusable.changed) == 1
    original, new_row = rows_of(conn, table, key)
    assert new_row == original
    finish(endpoints, table)


def test_a_row_differing_at_its_check_is_compared_at_the_end(endpoints, conn, tmp_path):
    """A row of the new table differs when its chunk is checked, and no event will ever name it (the damage is
    the new table's alone): the check records it, and the end compares it."""
    table = "differing"
    ctx, _ = waiting_migration(endpoints, conn, table, tmp_path / "migrate.log")
    query(conn, "UPDATE stream_osc.chunks SET checked_from = NULL WHERE migration_id=%s", (ctx.migration.id,))
    query(conn, f"UPDATE {DB}.{helper_table_name(table, 'new')} SET c = 'damaged' WHERE id = 3500")
    validate_ahead(ctx, 0)
    reusable = reusable_checks(ctx)
    assert reusable is not None and (3500,) in reusable.changed
    assert validate(ctx, None, reusable.ranges, reusable.changed) == 1
    original, new_row = rows_of(conn, table, 3500)
    assert new_row == original
    finish(endpoints, table)


def test_checks_older_than_the_topic_keeps_deletes_are_set_aside(endpoints, conn, tmp_path):
    """A delete's tombstone leaves the compacted topic after a day: a check older than half that is not relied on."""
    table = "aged"
    ctx, _ = waiting_migration(endpoints, conn, table, tmp_path / "migrate.log")
    query(conn, "UPDATE stream_osc.chunks SET checked_from = NULL WHERE migration_id=%s", (ctx.migration.id,))
    validate_ahead(ctx, 0)
    assert reusable_checks(ctx) is not None
    aged = time.time() - ahead_module.MAX_CHECK_AGE_S - 60
    query(conn, "UPDATE stream_osc.chunks SET checked_from = JSON_SET(checked_from, '$.at', %s) "
                "WHERE migration_id=%s", (aged, ctx.migration.id))
    assert reusable_checks(ctx) is None
    finish(endpoints, table)
