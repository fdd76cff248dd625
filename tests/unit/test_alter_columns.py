"""The ALTER text tells which columns are renamed or dropped, whatever the quoting, case and clause mix."""
from __future__ import annotations

import pytest

from core.alter_columns import clauses, column_changes, renamed_columns
from core.table import is_generated


@pytest.mark.parametrize("alter, expected", [
    ("RENAME COLUMN note TO remark", {"note": "remark"}),
    ("rename column note to remark", {"note": "remark"}),
    ("CHANGE note remark VARCHAR(64)", {"note": "remark"}),
    ("CHANGE COLUMN note remark VARCHAR(64) NOT NULL", {"note": "remark"}),
    ("change column `note` `re mark` text", {"note": "re mark"}),
    ("RENAME COLUMN `a``b` TO `c,d`", {"a`b": "c,d"}),
    ("CHANGE COLUMN IF EXISTS note remark INT", {"note": "remark"}),
    ("CHANGE note note VARCHAR(200)", {}),
    ("MODIFY note VARCHAR(200)", {}),
    ("ADD COLUMN x INT, RENAME COLUMN a TO b, CHANGE c d INT", {"a": "b", "c": "d"}),
    ("RENAME COLUMN a TO b, RENAME COLUMN b TO a", {"a": "b", "b": "a"}),
    ("CHANGE price cost DECIMAL(12,2) DEFAULT '1,5', RENAME COLUMN x TO y", {"price": "cost", "x": "y"}),
    ("CHANGE note remark VARCHAR(9) DEFAULT 'it''s, CHANGE a b', CHANGE q r INT", {"note": "remark", "q": "r"}),
    ("CHANGE note remark VARCHAR(9) DEFAULT 'x\\', CHANGE a b', CHANGE q r INT", {"note": "remark", "q": "r"}),
    ("CHANGE note remark ENUM('a','b,c') COMMENT \"RENAME COLUMN p TO q\"", {"note": "remark"}),
    ("ADD COLUMN v INT AS (IF(a, 1, 2)) VIRTUAL, CHANGE b c INT", {"b": "c"}),
    ("/* RENAME COLUMN p TO q, */ CHANGE a b INT -- , CHANGE c d INT\n, RENAME COLUMN e TO f", {"a": "b", "e": "f"}),
    ("RENAME TO other_table", {}),
    ("RENAME INDEX i TO j, RENAME KEY k TO l", {}),
    ("ALGORITHM=INPLACE, LOCK=NONE, CHANGE a b INT", {"a": "b"}),
    ("CHANGE `Note` `note` TEXT", {"Note": "note"}),
])
def test_renamed_columns(alter, expected):
    assert renamed_columns(alter) == expected


@pytest.mark.parametrize("alter, expected", [
    ("DROP COLUMN note", {"note"}),
    ("drop note, DROP IF EXISTS `x y`, DROP COLUMN IF EXISTS z", {"note", "x y", "z"}),
    ("DROP INDEX note, DROP KEY k, DROP PRIMARY KEY, DROP FOREIGN KEY f, DROP CONSTRAINT c, DROP CHECK c2", set()),
    ("ALTER COLUMN a DROP DEFAULT", set()),
    ("DROP COLUMN note, ADD COLUMN note INT", {"note"}),
])
def test_dropped_columns(alter, expected):
    assert column_changes(alter).dropped == expected


def test_commas_inside_parentheses_and_strings_stay_in_their_clause():
    assert len(clauses("ADD COLUMN p DECIMAL(12,2) DEFAULT 'a,b', ADD INDEX i (a, b), MODIFY c INT")) == 3


def test_an_unterminated_quote_is_an_error():
    with pytest.raises(ValueError, match="unterminated"):
        renamed_columns("CHANGE `note remark INT")


@pytest.mark.parametrize("extra, generated", [
    ("VIRTUAL GENERATED", True), ("STORED GENERATED", True), ("PERSISTENT GENERATED", True),
    ("PERSISTENT", True), ("VIRTUAL", True), ("DEFAULT_GENERATED", False),
    ("DEFAULT_GENERATED on update CURRENT_TIMESTAMP", False), ("auto_increment", False), ("", False), (None, False),
])
def test_generated_columns_are_told_from_expression_defaults(extra, generated):
    assert is_generated(extra) is generated
