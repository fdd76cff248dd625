"""Which regions validation compares once chunks were checked ahead (cutover/validate.py, validate_ahead.py)."""
from __future__ import annotations

from core.state_records import ChunkCheck
from cutover.validate import KeyList, KeyRange, regions_to_compare
from cutover.validate_ahead import (KEY_COST, MAX_CHANGED_KEYS, MAX_CHECK_AGE_S, earliest_offsets, events_since,
                                    fresh_checks, key_limit)

RANGES = [(None, (1,)), ((1,), (1001,)), ((1001,), (2001,)), ((2001,), None)]


def test_without_checks_every_range_is_compared_whole():
    assert regions_to_compare(RANGES, frozenset(), (), 1000) == [KeyRange(lo, hi) for lo, hi in RANGES]


def test_checked_ranges_are_left_out_and_their_changed_keys_compared_in_batches():
    changed = [(k,) for k in range(1, 2501)]
    regions = regions_to_compare(RANGES, frozenset({((1,), (1001,)), ((1001,), (2001,))}), changed, 1000)
    assert regions[:2] == [KeyRange(None, (1,)), KeyRange((2001,), None)]
    batches = regions[2:]
    assert all(isinstance(b, KeyList) for b in batches) and [len(b.keys) for b in batches] == [1000, 1000, 500]
    assert {k for b in batches for k in b.keys} == set(changed)


def test_a_check_older_than_half_the_tombstone_retention_is_not_fresh():
    now = 1_000_000.0
    recent = ChunkCheck(1, (1,), (2,), {0: 5}, now - 60)
    old = ChunkCheck(2, (2,), (3,), {0: 5}, now - MAX_CHECK_AGE_S - 1)
    assert fresh_checks([recent, old], now) == [recent]


def test_keys_are_compared_one_by_one_only_while_cheaper_than_the_checked_rows():
    assert key_limit(400_000) == 400_000 // KEY_COST
    assert key_limit(100) == 1000                       # a small table: a few keys are always worth it
    assert key_limit(10**9) == MAX_CHANGED_KEYS         # memory bound


def test_events_since_the_checks_count_from_the_earliest_offsets_of_each_partition():
    checks = [ChunkCheck(1, (1,), (2,), {0: 10, 1: 50}, 0.0), ChunkCheck(2, (2,), (3,), {0: 30, 1: 20}, 0.0)]
    assert events_since(earliest_offsets(checks, range(2)), {0: 100, 1: 40}) == (100 - 10) + (40 - 20)
    assert events_since(earliest_offsets([], range(1)), {0: 100}) == 0
