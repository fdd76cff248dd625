"""Which statements seen beside the queued RENAME roll a MariaDB cutover attempt back (cutover/queued_ddl.py)."""
import subprocess
import sys

import pytest

from core.db import STATEMENT_TAG
from core.sql_names import names_table
from cutover.queued_ddl import is_read_or_row_change


@pytest.mark.parametrize("statement", [
    "INSERT INTO shop.t (id) VALUES (1)", "update t set c = c + 1 where id = 3", "DELETE FROM t WHERE id = 1",
    "REPLACE INTO t VALUES (1)", "  /* app:checkout */ SELECT * FROM t FOR UPDATE", "-- note\nUPDATE t SET c = 1",
    "WITH x AS (SELECT 1) UPDATE t SET c = 1", "LOAD DATA INFILE '/tmp/f' INTO TABLE t", "SHOW CREATE TABLE t",
    "SET STATEMENT max_statement_time=1 FOR SELECT * FROM t", "(SELECT id FROM t) UNION (SELECT id FROM u)",
    "set statement a=1, b=OFF for update t set c = 2", "SET STATEMENT a=1e-5, b=-3 FOR SELECT 1",
])
def test_reads_and_row_changes_are_let_through(statement):
    assert is_read_or_row_change(statement)


@pytest.mark.parametrize("statement", [
    "TRUNCATE TABLE t", "truncate t", "DROP TABLE t", "CREATE OR REPLACE TABLE t (id INT PRIMARY KEY)",
    "ALTER TABLE t ENGINE=InnoDB", "RENAME TABLE x TO t", "/* job */ OPTIMIZE TABLE t", "LOCK TABLES t WRITE",
    "CALL purge_t()", "FLUSH TABLES t FOR EXPORT", "TABLE t", "",
    # executable comments run: what they hold decides, so they are not skipped as comments
    "/*!TRUNCATE*/ TABLE t", "/*M!100000 DROP*/ TABLE t", "/*!CREATE OR*/ REPLACE TABLE t (i INT)",
    "SET STATEMENT max_statement_time=1 FOR TRUNCATE t", "SET STATEMENT x='a FOR SELECT' FOR TRUNCATE t",
    "(TRUNCATE t)", "SET STATEMENT max_statement_time=1-- FOR SELECT\nFOR TRUNCATE t",
])

def test_everything_else_rolls_the_attempt_back(statement):
    assert not is_read_or_row_change(statement)


def test_the_table_is_named_as_a_whole_name_in_its_schema():
    assert names_table("TRUNCATE `shop`.`t`", "shop", "t", None)
    assert names_table("truncate SHOP.T", "shop", "t", "other")
    assert names_table("DROP TABLE t", "shop", "t", "shop")
    assert names_table("DROP TABLE `order-lines`", "shop", "order-lines", "shop")
    assert names_table("DROP TABLE t", "shop", "t", None)               # no session schema: assumed ours
    assert not names_table("DROP TABLE t", "shop", "t", "other")        # another schema's t
    assert not names_table("TRUNCATE other.t", "shop", "t", "shop")
    assert not names_table("ALTER TABLE orders ADD x INT", "shop", "t", "shop")
    assert not names_table("DROP TABLE t_archive", "shop", "t", "shop")
    assert not names_table("DROP TABLE $t", "shop", "t", "shop")


@pytest.mark.parametrize("table", ["stream", "osc"])
def test_the_tool_s_tag_is_not_taken_for_a_table_it_names(table):
    """A COMMIT of another migration's session, seen beside the RENAME, does not roll the attempt back for a
    table named after a word of the tag."""
    assert not names_table(STATEMENT_TAG + "COMMIT", "shop", table, None)
    assert names_table(STATEMENT_TAG + f"TRUNCATE shop.{table}", "shop", table, None)


def test_a_long_run_of_blanks_is_judged_and_does_not_hold_the_lock():
    """Judged under the cutover's lock: a pattern trying every split of the blanks would not end in a lifetime
    (about 0.4 s for 22 blanks, doubling with each one). In a process of its own: a match holds the GIL."""
    judged = subprocess.run([sys.executable, "-c", (
        "from cutover.queued_ddl import is_read_or_row_change as judge\n"
        "blanks = ' ' * 5000\n"
        "print(judge(blanks + '(TRUNCATE t)'), judge('\\n' + blanks + '/*! */'), judge(blanks + 'SELECT 1'))")],
        capture_output=True, text=True, timeout=30)
    assert judged.stdout.split() == ["False", "False", "True"], judged.stderr
