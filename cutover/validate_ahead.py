"""Validation ahead: each copied chunk is compared while the copy and the appliers go on, so that validation at
the end compares, in those chunks, only the keys changed since (cutover/README.md, "Validation ahead").

A chunk checked ahead, with the change topic's ends read before its check began (`offsets`), needs no full
comparison at the end, because:
- the check compares the whole chunk live and re-copies what differs until it matches (validate.repair);
  what it leaves differing is a key written during the check, after `offsets` were read;
- a change committed after `offsets` were read is captured after that, so its event lies at or after
  `offsets` in its partition; the end scans the topic from there (streams/key_scan.py) and compares every
  key it finds one by one;
- a key with no such event kept its source row since the check, and nothing writes its row in the new table
  but a re-copy of that same source row (an applier's, the drain's, a repair's: each reads the current
  row under a share lock and writes it in the same transaction) or the removal of a stale row, which needs
  the source row to have changed: its row is still the one that matched.
So the end compares: every range not checked ahead (the chunks before and above the plan, those whose check
failed or did not happen), and the keys of every event since the earliest check. When those keys are many,
comparing them one by one costs more than the checksums: the checks are then set aside.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer

from core.context import RunContext
from core.keys import Key
from core.logs import log_event
from core.state import Chunk, ChunkCheck, StateStore
from cutover.validate import ValidationFailed, differing_keys, repair_range, row_hasher
from streams.closing import close_within
from streams.key_scan import TooManyKeys, changed_keys, scan_consumer
from streams.topics import TopicNames, consumer_lag, end_offsets, group_reader

log = logging.getLogger("stream_osc.validate")

IDLE_WAIT_S = 0.5            # how often a checker with no copied chunk to check looks again
MAX_CHECK_AGE_S = 12 * 3600  # a check older than this is set aside: the topic keeps a delete's tombstone 24 h
MAX_CHANGED_KEYS = 200_000   # at most this many keys compared one by one (memory: about 100 bytes each)
KEY_COST = 4                 # a key compared by itself costs about as much as this many rows of a range checksum


@dataclass(frozen=True)
class Reusable:
    """What validation may take from the checks ahead: ranges it need not compare whole, and the keys changed
    since the earliest of those checks, which it compares one by one."""

    ranges: frozenset[tuple[Key | None, Key | None]]
    changed: frozenset[Key]


def next_unchecked(store: StateStore, migration_id: int, set_aside: set[int]) -> tuple[Chunk | None, bool]:
    """(a copied, bounded chunk not yet checked, or None; whether any chunk may still be checked later)."""
    checked = {c.number for c in store.checks(migration_id)}
    chunks = [c for c in store.chunks(migration_id)
              if c.end is not None and c.number not in checked and c.number not in set_aside]
    return next((c for c in chunks if c.done), None), bool(chunks)


def validate_ahead(ctx: RunContext, worker_no: int) -> None:
    """Check copied chunks one at a time, yielding and throttled like the copy, until stopped or none is left;
    only while the appliers are in sync (lag within --max-lag): a chunk whose changes wait in the topic would
    differ, and the check would re-copy what the appliers are about to.

    A chunk whose rows keep differing is left to validation at the end, which decides (and names them)."""
    conn = ctx.db()
    target = ctx.target_db() if ctx.pair.remote else None
    watermarks: Consumer | None = None
    set_aside: set[int] = set()
    try:
        watermarks = group_reader(ctx.endpoints.kafka, ctx.migration.group_id)
        topic = TopicNames(ctx.migration.prefix, ctx.spec.database, ctx.spec.table).changes
        hasher = row_hasher(target or conn, ctx.pair)
        store = ctx.store(conn)
        while not ctx.stop.is_set():
            chunk, more = next_unchecked(store, ctx.migration.id, set_aside)
            if chunk is None:
                if not more:
                    return
                ctx.stop.wait(IDLE_WAIT_S)
                continue
            if consumer_lag(watermarks, topic, ctx.spec.partitions) > ctx.spec.max_lag_events:
                ctx.stop.wait(IDLE_WAIT_S)   # in sync first: a chunk checked now would re-copy what appliers will
                continue
            if not ctx.wait_while_paused_or_throttled(conn):
                return
            with ctx.yielding.turn(ctx.stop.is_set) as allowed:
                if not allowed:
                    return
                offsets = end_offsets(watermarks, topic, ctx.spec.partitions)
                started = time.monotonic()
                try:
                    diff = differing_keys(conn, hasher, chunk.start, chunk.end, target).keys
                    repaired = repair_range(conn, hasher, chunk.start, chunk.end, diff, ctx.spec.qualified_name,
                                            target)
                except ValidationFailed as exc:
                    set_aside.add(chunk.number)
                    log_event(log, "chunk left to validation at the end", logging.WARNING, chunk=chunk.number,
                              reason=str(exc))
                    continue
            store.record_check(ctx.migration.id, chunk.number, offsets)
            log_event(log, "chunk checked ahead", logging.DEBUG, chunk=chunk.number, repaired=repaired,
                      took_ms=round((time.monotonic() - started) * 1000, 1))
    finally:
        if watermarks is not None:
            close_within(watermarks, "validate-ahead")
        conn.close()
        if target is not None:
            target.close()


def fresh_checks(checks: list[ChunkCheck], now: float) -> list[ChunkCheck]:
    return [c for c in checks if now - c.at <= MAX_CHECK_AGE_S]


def key_limit(rows_checked: int) -> int:
    """How many changed keys are worth comparing one by one instead of the checked chunks' rows."""
    return min(MAX_CHANGED_KEYS, max(rows_checked // KEY_COST, 1000))


def reusable_checks(ctx: RunContext) -> Reusable | None:
    """The checks ahead that validation can rely on, with the keys changed since; None when there are none or
    the changed keys are too many (then every range is compared whole)."""
    conn = ctx.db()
    try:
        store = ctx.store(conn)
        checks = fresh_checks(store.checks(ctx.migration.id), time.time())
        rows = {c.number: c.rows_copied for c in store.chunks(ctx.migration.id)}
    finally:
        conn.close()
    if not checks:
        return None
    partitions = range(ctx.spec.partitions)
    start = {p: min(c.offsets.get(p, 0) for c in checks) for p in partitions}
    topic = TopicNames(ctx.migration.prefix, ctx.spec.database, ctx.spec.table).changes
    consumer = scan_consumer(ctx.endpoints.kafka, ctx.migration.group_id)
    try:
        end = end_offsets(consumer, topic, ctx.spec.partitions)
        if any(start[p] > end[p] for p in partitions):
            log_event(log, "checks ahead set aside: the change topic ends before them", logging.WARNING,
                      start=start, end=end)
            return None
        started = time.monotonic()
        keys = changed_keys(consumer, topic, start, end, ctx.pair.pk, key_limit(sum(rows.get(c.number, 0)
                                                                                     for c in checks)))
    except TooManyKeys as exc:
        log_event(log, "checks ahead set aside", reason=str(exc))
        return None
    finally:
        close_within(consumer, "key scan")
    log_event(log, "checks ahead reused", chunks=len(checks), changed_keys=len(keys),
              scan_ms=round((time.monotonic() - started) * 1000, 1))
    return Reusable(frozenset((c.start, c.end) for c in checks), frozenset(keys))
