"""The benchmark's buffer pool size: three copies of the table, in whole GiB, within half the memory."""
from __future__ import annotations

from bench.server import GIB, wanted_buffer_pool


def test_three_copies_rounded_up_to_whole_gib():
    assert wanted_buffer_pool(int(1.1 * GIB), 24 * GIB, 1 * GIB) == 4 * GIB


def test_capped_at_half_the_memory():
    assert wanted_buffer_pool(5 * GIB, 24 * GIB, 1 * GIB) == 12 * GIB


def test_never_shrinks_the_pool():
    assert wanted_buffer_pool(10 * 2 ** 20, 24 * GIB, 1 * GIB) == 1 * GIB
