"""Validation ahead: each copied chunk is compared while the copy and the appliers go on, so that validation at
the end compares, in those chunks, only the keys written since and the keys that differed (docs/cutover.md,
"Validation ahead").

A check reads and never writes: it reads the applier group's committed offsets (`offsets`), then compares the
chunk in both tables (checksums; row hashes where they differ) and records the offsets with the keys that
differed. Why the rows of a checked chunk whose keys are neither among those nor among the keys of the
events from `offsets` on are equal in validation's snapshot:
- every event before `offsets` was applied (its key re-copied, committed) before the check began, and every
  change not yet applied then has its event at or after `offsets`: a change committed later is captured later;
- so such a key had no change applied, and none to apply, from before the check to the snapshot: its source
  row held still, and nothing wrote its row in the new table (the copy of its chunk was done; appliers, the
  cutover's drain and validation's repairs write only the keys of events; the removal of a stale row that
  blocks a UNIQUE value needs its source row to have changed: an event);
- the check found the two rows equal.
When those keys are many, comparing them one by one costs more than the checksums: the checks are then set
aside and every range is compared whole, as without them.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException

from core.context import RunContext
from core.keys import Key
from core.logs import log_event
from core.state import StateStore
from core.state_records import Chunk, ChunkCheck
from cutover.validate import differing_keys, row_hasher
from streams.closing import close_within
from streams.key_scan import TooManyKeys, changed_keys, scan_consumer
from streams.topics import TopicNames, committed_offsets, consumer_lag, end_offsets, group_reader

log = logging.getLogger("stream_osc.validate")

IDLE_WAIT_S = 0.5            # how often a checker with no copied chunk to check looks again
MAX_CHECK_AGE_S = 12 * 3600  # a check older than this is set aside: the topic keeps a delete's tombstone 24 h
MAX_DIFFERING = 1_000        # keys a check may leave to the end; with more, the chunk is tried again later
MAX_TRIES = 3                # checks of one chunk before it is left to the end whole
MAX_CHANGED_KEYS = 200_000   # at most this many keys compared one by one (memory: about 100 bytes each)
KEY_COST = 20                # a key compared by itself costs about as much as this many rows of a range checksum
                             # (measured under 1,000 write tx/s: key lookups by IN lists vs range checksums)
EVENTS_PER_KEY = 4           # events allowed per key worth comparing (a hot row is written many times)


@dataclass(frozen=True)
class Reusable:
    """What validation may take from the checks ahead: ranges it need not compare whole, and the keys it
    compares one by one instead (written since the earliest check, or differing at their chunk's check)."""

    ranges: frozenset[tuple[Key | None, Key | None]]
    changed: frozenset[Key]


@dataclass(frozen=True)
class Progress:
    """Where validation ahead stands: the chunk to check next (None: none copied yet), whether any is left
    to check later, and the checks made so far with the rows they covered."""

    chunk: Chunk | None
    more: bool
    checks: list[ChunkCheck]
    rows_checked: int


def progress(store: StateStore, migration_id: int, set_aside: set[int]) -> Progress:
    checks = store.checks(migration_id)
    checked = {c.number for c in checks}
    chunks = store.chunks(migration_id)
    left = [c for c in chunks if c.end is not None and c.number not in checked and c.number not in set_aside]
    return Progress(next((c for c in left if c.done), None), bool(left), checks,
                    sum(c.rows_copied for c in chunks if c.number in checked))


def earliest_offsets(checks: list[ChunkCheck], partitions: range) -> dict[int, int]:
    """Per partition, the earliest offset any check recorded: every change since is read from there
    (none for no checks)."""
    return {p: min(c.offsets.get(p, 0) for c in checks) for p in partitions} if checks else {}


def events_since(start: dict[int, int], ends: dict[int, int]) -> int:
    """Change events from `start` to the topic's ends (a partition without a start: none): at least the keys
    written since."""
    return sum(max(end - start.get(p, end), 0) for p, end in ends.items())


def validate_ahead(ctx: RunContext, worker_no: int) -> None:
    """Check copied chunks one at a time, yielding and throttled like the copy, until stopped or none is left;
    only while the appliers are in sync (lag within --max-lag): a chunk whose changes wait in the topic differs
    in those keys, which the end then has to compare anyway."""
    conn = ctx.db()
    target = ctx.target_db() if ctx.pair.remote else None
    group: Consumer | None = None
    set_aside: set[int] = set()
    tries: Counter[int] = Counter()
    try:
        group = group_reader(ctx.endpoints.kafka, ctx.migration.group_id)
        topic = TopicNames(ctx.migration.prefix, ctx.spec.database, ctx.spec.table).changes
        hasher = row_hasher(target or conn, ctx.pair)
        store = ctx.store(conn)
        while not ctx.stop.is_set():
            state = progress(store, ctx.migration.id, set_aside)
            chunk = state.chunk
            if chunk is None:
                if not state.more:
                    return
                ctx.stop.wait(IDLE_WAIT_S)
                continue
            written = events_since(earliest_offsets(state.checks, range(ctx.spec.partitions)),
                                   end_offsets(group, topic, ctx.spec.partitions))
            if written > EVENTS_PER_KEY * key_limit(state.rows_checked + chunk.rows_copied):
                # under writes spread over the table every range is written again before the end: comparing
                # the written keys one by one would cost more than the ranges, and validation sets the checks aside
                log_event(log, "validation ahead stops: more keys written since its checks than it would save",
                          events=written, rows_checked=state.rows_checked)
                return
            if consumer_lag(group, topic, ctx.spec.partitions) > ctx.spec.max_lag_events:
                ctx.stop.wait(IDLE_WAIT_S)
                continue
            if not ctx.wait_while_paused_or_throttled(conn):
                return
            with ctx.yielding.turn(ctx.stop.is_set) as allowed:
                if not allowed:
                    return
                offsets = committed_offsets(group, topic, ctx.spec.partitions)
                started = time.monotonic()
                differing = differing_keys(conn, hasher, chunk.start, chunk.end, target).keys
            if len(differing) > MAX_DIFFERING:
                tries[chunk.number] += 1
                if tries[chunk.number] >= MAX_TRIES:
                    set_aside.add(chunk.number)
                    log_event(log, "chunk left to validation at the end", logging.INFO, chunk=chunk.number,
                              differing=len(differing))
                continue
            store.record_check(ctx.migration.id, chunk.number, offsets, sorted(differing, key=repr))
            log_event(log, "chunk checked ahead", logging.DEBUG, chunk=chunk.number, differing=len(differing),
                      took_ms=round((time.monotonic() - started) * 1000, 1))
    finally:
        if group is not None:
            close_within(group, "validate-ahead")
        conn.close()
        if target is not None:
            target.close()


def fresh_checks(checks: list[ChunkCheck], now: float) -> list[ChunkCheck]:
    return [c for c in checks if now - c.at <= MAX_CHECK_AGE_S]


def key_limit(rows_checked: int) -> int:
    """How many keys are worth comparing one by one instead of the checked chunks' rows."""
    return min(MAX_CHANGED_KEYS, max(rows_checked // KEY_COST, 1000))


def reusable_checks(ctx: RunContext) -> Reusable | None:
    """The checks ahead that validation can rely on, with the keys to compare one by one; None when there are
    none, or those keys are too many or cannot be read (then every range is compared whole).

    Called once validation's snapshot is taken: the topic's end is then past every change the snapshot holds."""
    conn = ctx.db()
    try:
        store = ctx.store(conn)
        checks = fresh_checks(store.checks(ctx.migration.id), time.time())
        rows = {c.number: c.rows_copied for c in store.chunks(ctx.migration.id)}
    finally:
        conn.close()
    if not checks:
        return None
    limit = key_limit(sum(rows.get(c.number, 0) for c in checks))
    differing = {k for c in checks for k in c.differing}
    partitions = range(ctx.spec.partitions)
    start = earliest_offsets(checks, partitions)
    topic = TopicNames(ctx.migration.prefix, ctx.spec.database, ctx.spec.table).changes
    consumer = scan_consumer(ctx.endpoints.kafka, ctx.migration.group_id)
    started = time.monotonic()
    try:
        end = end_offsets(consumer, topic, ctx.spec.partitions)
        events = events_since(start, end)
        if any(start[p] > end[p] for p in partitions) or events > EVENTS_PER_KEY * limit:
            log_event(log, "checks ahead set aside", events=events, limit=limit, start_past_end=any(
                start[p] > end[p] for p in partitions))
            return None
        if len(differing) > limit:
            raise TooManyKeys(f"{len(differing)} keys differed at the checks")
        keys = changed_keys(consumer, topic, start, end, ctx.pair.pk, limit - len(differing)) | differing
    except (TooManyKeys, KafkaException) as exc:
        log_event(log, "checks ahead set aside", logging.WARNING if isinstance(exc, KafkaException) else logging.INFO,
                  reason=str(exc))
        return None
    finally:
        close_within(consumer, "key scan")
    log_event(log, "checks ahead reused", chunks=len(checks), changed_keys=len(keys), differing=len(differing),
              scan_ms=round((time.monotonic() - started) * 1000, 1))
    return Reusable(frozenset((c.start, c.end) for c in checks), frozenset(keys))
