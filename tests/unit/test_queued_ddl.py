"""Which statements seen beside the queued RENAME roll a MariaDB cutover attempt back (cutover/queued_ddl.py)."""
import pytest

from cutover.queued_ddl import is_read_or_row_change, names


@pytest.mark.parametrize("statement", [
    "INSERT INTO shop.t (id) VALUES (1)", "update t set c = c + 1 where id = 3", "DELETE FROM t WHERE id = 1",
    "REPLACE INTO t VALUES (1)", "  /* app:checkout */ SELECT * FROM t FOR UPDATE", "-- note\nUPDATE t SET c = 1",
    "WITH x AS (SELECT 1) UPDATE t SET c = 1", "LOAD DATA INFILE '/tmp/f' INTO TABLE t", "SHOW CREATE TABLE t",
])
def test_reads_and_row_changes_are_let_through(statement):
    assert is_read_or_row_change(statement)


@pytest.mark.parametrize("statement", [
    "TRUNCATE TABLE t", "truncate t", "DROP TABLE t", "CREATE OR REPLACE TABLE t (id INT PRIMARY KEY)",
    "ALTER TABLE t ENGINE=InnoDB", "RENAME TABLE x TO t", "/* job */ OPTIMIZE TABLE t", "LOCK TABLES t WRITE",
    "CALL purge_t()", "FLUSH TABLES t FOR EXPORT", "TABLE t", "",
    # executable comments run: what they hold decides, so they are not skipped as comments
    "/*!TRUNCATE*/ TABLE t", "/*M!100000 DROP*/ TABLE t", "/*!CREATE OR*/ REPLACE TABLE t (i INT)",
])
def test_everything_else_rolls_the_attempt_back(statement):
    assert not is_read_or_row_change(statement)


def test_the_table_is_named_as_a_whole_name_in_its_schema():
    assert names("TRUNCATE `shop`.`t`", "shop", "t", None)
    assert names("truncate SHOP.T", "shop", "t", "other")
    assert names("DROP TABLE t", "shop", "t", "shop")
    assert names("DROP TABLE `order-lines`", "shop", "order-lines", "shop")
    assert names("DROP TABLE t", "shop", "t", None)               # no session schema: assumed ours
    assert not names("DROP TABLE t", "shop", "t", "other")        # another schema's t
    assert not names("TRUNCATE other.t", "shop", "t", "shop")
    assert not names("ALTER TABLE orders ADD x INT", "shop", "t", "shop")
    assert not names("DROP TABLE t_archive", "shop", "t", "shop") and not names("DROP TABLE $t", "shop", "t", "shop")
