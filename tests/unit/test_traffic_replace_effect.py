"""The application's record predicts what its REPLACE leaves (demo/traffic.py): a wrong prediction would make
the oracle blame the tool for the server's own behaviour, or miss a row the tool lost."""
from __future__ import annotations

from core.endpoints import MySQLAddress
from demo.traffic import COLUMNS, SampleRows, Traffic

U = COLUMNS.index("u")


def planned_replace():
    traffic = Traffic(MySQLAddress("127.0.0.1", 3306, "app", "unused"), "db", "t", SampleRows(100, 1), seed=3)
    return traffic._sessions[0]._plan_replace()


def seeded(pk: int):
    return SampleRows(100, 1).state(pk)


def test_row_b_with_a_unique_value_gives_it_to_a_and_is_removed():
    op = planned_replace()
    a, b = op.keys
    new_a, new_b = op.effect((seeded(a), seeded(b)))
    assert new_a[U] == f"u-{b}" and new_b is None


def test_a_missing_row_a_is_created_and_row_b_still_removed():
    op = planned_replace()
    a, b = op.keys
    new_a, new_b = op.effect((None, seeded(b)))
    assert new_a[U] == f"u-{b}" and new_b is None


def test_row_b_without_a_unique_value_collides_with_nothing_and_stays():
    op = planned_replace()
    a, b = op.keys
    without_unique = seeded(b)[:U] + (None,) + seeded(b)[U + 1:]
    new_a, new_b = op.effect((seeded(a), without_unique))
    assert new_a[U] is None and new_b == without_unique


def test_a_missing_row_b_leaves_row_a_replaced_without_a_unique_value():
    op = planned_replace()
    a, b = op.keys
    new_a, new_b = op.effect((seeded(a), None))
    assert new_a[U] is None and new_a[COLUMNS.index("note")] == "rep" and new_b is None
