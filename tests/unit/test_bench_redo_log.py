"""The benchmark's redo log size: the table once, in whole GiB, between 1 and 4 GiB, never shrunk."""
from __future__ import annotations

from bench.server import GIB, wanted_redo_log

MIB = 2 ** 20


def test_a_small_table_gets_the_least_a_production_server_has():
    assert wanted_redo_log(250 * MIB, 96 * MIB) == 1 * GIB


def test_the_table_once_rounded_up_to_whole_gib():
    assert wanted_redo_log(int(1.2 * GIB), 96 * MIB) == 2 * GIB


def test_capped_at_four_gib():
    assert wanted_redo_log(20 * GIB, 96 * MIB) == 4 * GIB


def test_never_shrinks_the_log():
    assert wanted_redo_log(250 * MIB, 8 * GIB) == 8 * GIB
