"""The pure parts of foreign keys (core/foreign_keys.py): the new table's constraint names, the ALTER's clauses that
drop or add one, and the clause that makes a constraint again."""
from __future__ import annotations

import pytest

from core.foreign_keys import (NAME_LIMIT, ForeignKey, added_foreign_key, clause_spans, dropped_constraint,
                               new_constraint_name, split_alter)


@pytest.mark.parametrize("name, new", [("fk_a", "_fk_a"), ("_fk_a", "fk_a"), ("__fk", "_fk"), ("_", "__"),
                                       ("orders_ibfk_1", "_orders_ibfk_1")])
def test_a_leading_underscore_is_toggled(name, new):
    assert new_constraint_name(name) == new


def test_a_name_migrated_twice_comes_back_and_a_64_character_name_stays_within_the_limit():
    assert new_constraint_name(new_constraint_name("fk_orders_parent")) == "fk_orders_parent"
    long = "f" * NAME_LIMIT
    assert new_constraint_name(long) == "_" + "f" * (NAME_LIMIT - 1)
    assert len(new_constraint_name(long)) == NAME_LIMIT
    assert new_constraint_name(new_constraint_name(long)) == "f" * (NAME_LIMIT - 1)
    assert len(new_constraint_name("g" * (NAME_LIMIT - 1))) == NAME_LIMIT


def test_clauses_are_split_at_top_level_commas_only():
    alter = "ADD COLUMN a ENUM('x,y', 'z') NULL, ADD INDEX i (a, b) COMMENT 'p, q', /* c, d */ DROP COLUMN `e,f`"
    assert [s.strip() for s in clause_spans(alter)] == [
        "ADD COLUMN a ENUM('x,y', 'z') NULL", "ADD INDEX i (a, b) COMMENT 'p, q'", "/* c, d */ DROP COLUMN `e,f`"]


@pytest.mark.parametrize("clause, name", [("DROP FOREIGN KEY fk_a", "fk_a"), ("drop foreign key `fk a`", "fk a"),
                                          ("DROP FOREIGN KEY IF EXISTS fk_b", "fk_b"),
                                          ("DROP CONSTRAINT fk_c", "fk_c"), ("DROP INDEX fk_a", None),
                                          ("DROP COLUMN fk_a", None)])
def test_a_dropped_constraint_is_read_from_its_clause(clause, name):
    assert dropped_constraint(clause) == name


def test_the_alter_is_run_without_its_clauses_dropping_a_carried_constraint():
    alter = "ADD COLUMN note INT NULL, DROP FOREIGN KEY `FK_Other`, DROP CONSTRAINT chk_note, DROP INDEX idx"
    assert split_alter(alter, ["fk_parent", "fk_other"]) == (
        "ADD COLUMN note INT NULL, DROP CONSTRAINT chk_note, DROP INDEX idx", ["fk_other"])
    assert split_alter("DROP FOREIGN KEY fk_parent", ["fk_parent"]) == ("", ["fk_parent"])


@pytest.mark.parametrize("clause, added", [
    ("ADD CONSTRAINT f FOREIGN KEY (k) REFERENCES p (id)", True), ("add foreign key (k) references p(id)", True),
    ("ADD CONSTRAINT `f` FOREIGN KEY fk_idx (k) REFERENCES p (id)", True), ("ADD INDEX (k)", False),
    ("ADD COLUMN foreign_id INT", False), ("DROP FOREIGN KEY f", False)])
def test_an_added_foreign_key_is_seen(clause, added):
    assert (added_foreign_key(clause) is not None) == added


def test_a_constraint_is_made_again_under_its_new_name_and_restrict_is_left_unsaid():
    fk = ForeignKey("fk_a", "db", "t", ("a", "b"), "pdb", "p", ("x", "y"), "RESTRICT", "NO ACTION")
    assert fk.clause("_fk_a") == ("ADD CONSTRAINT `_fk_a` FOREIGN KEY (`a`, `b`) REFERENCES `pdb`.`p` (`x`, `y`) "
                                  "ON UPDATE NO ACTION")
    assert fk.clause(parent="t2").endswith("REFERENCES `pdb`.`t2` (`x`, `y`) ON UPDATE NO ACTION")
    assert fk.changing_rules() == []
    cascading = ForeignKey("f", "db", "t", ("a",), "db", "p", ("x",), "CASCADE", "SET NULL")
    assert cascading.changing_rules() == ["ON DELETE CASCADE", "ON UPDATE SET NULL"]
