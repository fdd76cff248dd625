"""The pending ranges an applier's sort names in its locking read (applier/uncopied.py): pure logic."""
from __future__ import annotations

from types import SimpleNamespace

from applier.uncopied import _Pending, _ranges
from core.keys import KeyColumn, PrimaryKey

ID = PrimaryKey((KeyColumn("id", "int", "int(11)", None, None),))
CTX = SimpleNamespace(pair=SimpleNamespace(pk=ID), migration=SimpleNamespace(copy_until=(10_000,)))


def chunk(number: int, next_key: int | None, end: int | None) -> _Pending:
    return _Pending(number, None if next_key is None else (next_key,), None if end is None else (end,), False, None)


def test_chunks_not_started_yet_join_the_range_before_them_however_many_there_are():
    """A long OR can make the server give up on range analysis; a locking read by the primary key would
    then scan, and share-lock, the whole table."""
    pending = [chunk(0, 5, 10), *(chunk(n, 10 * n, 10 * (n + 1)) for n in range(1, 500)), chunk(500, 5_003, None)]
    where, params = _ranges(CTX, pending)
    assert where.count(" OR ") == 1
    assert params == [5, 5_000, 10_000, 5_003, 10_000]


def test_a_chunk_part_copied_starts_a_range_of_its_own():
    where, params = _ranges(CTX, [chunk(0, None, 10), chunk(1, 15, 20), chunk(2, 20, 30)])
    assert where.count(" OR ") == 1
    assert params == [10, 10_000, 15, 30, 10_000]
