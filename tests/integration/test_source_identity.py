"""The identity init records of the source (core/source_check.py) must tell the table apart from every other
one, its case twin and its partitions included, and change with exactly what replaces its rows unseen."""
from __future__ import annotations

import pytest

from core.db import qualified, query, scalar
from core.source_check import foreign_keys, table_identity

pytestmark = pytest.mark.integration

DB = "identity"


def make(conn, table: str, extra: str = "") -> list[int]:
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, table)}")
    query(conn, f"CREATE TABLE {qualified(DB, table)} (id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB {extra}")
    identity = table_identity(conn, DB, table)
    assert identity, f"{table} not found"
    return identity


def distinct_cases(conn) -> None:
    if scalar(conn, "SELECT @@lower_case_table_names"):
        pytest.skip("this server folds table names: no case twins")


def test_case_twins_odd_names_and_partitions_each_have_their_own_identity(conn):
    distinct_cases(conn)
    lower, upper = make(conn, "orders"), make(conn, "Orders")
    odd = make(conn, "order-lines$2")
    device = make(conn, "Aux")   # a Windows device name: stored with a suffix on every platform
    partitioned = make(conn, "parted_1", "PARTITION BY HASH(id) PARTITIONS 3")
    assert len(partitioned) == 3
    assert len({*lower, *upper, *odd, *device, *partitioned}) == 7


@pytest.mark.parametrize("statement, replaced", [
    ("TRUNCATE TABLE {t}", True),
    ("OPTIMIZE TABLE {t}", True),
    ("ALTER TABLE {t} FORCE", True),
    ("RENAME TABLE {t} TO {t}_moved, {t}_moved TO {t}", False),
    ("ALTER TABLE {t} COMMENT 'kept'", False),
    ("ANALYZE TABLE {t}", False),
])
def test_the_identity_changes_with_what_replaces_the_rows_in_place(conn, statement, replaced):
    before = make(conn, "replaced")
    query(conn, f"INSERT INTO {qualified(DB, 'replaced')} VALUES (1), (2)")
    query(conn, statement.format(t=f"{DB}.replaced"))
    assert (table_identity(conn, DB, "replaced") != before) is replaced


def test_a_table_dropped_and_created_again_has_a_new_identity(conn):
    before = make(conn, "Recreated")
    after = make(conn, "Recreated")
    assert after != before


def test_a_partition_truncated_changes_the_identity(conn):
    before = make(conn, "parted_rows", "PARTITION BY RANGE(id) (PARTITION p0 VALUES LESS THAN (10), "
                                       "PARTITION p1 VALUES LESS THAN MAXVALUE)")
    query(conn, f"ALTER TABLE {qualified(DB, 'parted_rows')} TRUNCATE PARTITION p1")
    assert table_identity(conn, DB, "parted_rows") != before


def test_a_missing_table_has_no_identity(conn):
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, 'missing')}")
    assert table_identity(conn, DB, "missing") == []


def test_foreign_keys_are_read_both_ways_and_never_from_a_case_twin(conn):
    distinct_cases(conn)
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, 'fk_child')}")
    for parent in ("fk_parent", "FK_PARENT"):
        make(conn, parent)
    query(conn, f"CREATE TABLE {qualified(DB, 'fk_child')} (id INT NOT NULL PRIMARY KEY, pid INT NOT NULL, "
                f"CONSTRAINT fk_up FOREIGN KEY (pid) REFERENCES {qualified(DB, 'fk_parent')} (id) ON DELETE CASCADE)")
    expected = {f"{DB}.fk_up": f"{DB}.fk_child REFERENCES {DB}.fk_parent ON DELETE CASCADE"}
    assert foreign_keys(conn, DB, "fk_child") == expected
    assert foreign_keys(conn, DB, "fk_parent") == expected
    assert foreign_keys(conn, DB, "FK_PARENT") == {}
    query(conn, f"DROP TABLE {qualified(DB, 'fk_child')}")


def test_a_name_not_looked_up_in_innodb_still_has_its_own_foreign_keys_read(conn):
    """`ä` is written from the file-name encoding's own table: no identity, and the foreign keys that reach
    its rows (it as the child) are read by its name instead."""
    child = "kinder_ä"
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, child)}")
    make(conn, "eltern")
    query(conn, f"CREATE TABLE {qualified(DB, child)} (id INT NOT NULL PRIMARY KEY, pid INT NOT NULL, "
                f"CONSTRAINT fk_kind FOREIGN KEY (pid) REFERENCES {qualified(DB, 'eltern')} (id) ON DELETE CASCADE)")
    assert table_identity(conn, DB, child) is None
    assert foreign_keys(conn, DB, child) == {
        f"{DB}.fk_kind": f"{DB}.{child} REFERENCES {DB}.eltern ON DELETE CASCADE ON UPDATE RESTRICT"}
    query(conn, f"DROP TABLE {qualified(DB, child)}")
