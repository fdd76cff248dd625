"""Which indexes --defer-indexes defers, and how their definitions are read back from SHOW CREATE TABLE."""
from __future__ import annotations

from core.deferred_indexes import DeferredIndex, IndexShape, deferred_names, parse_index_clauses

CREATE = """CREATE TABLE `t` (
  `id` int(11) NOT NULL,
  `a` varchar(50) DEFAULT NULL,
  `b` int(11) DEFAULT NULL,
  `g` point NOT NULL,
  `t` text DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `ua` (`a`),
  KEY `a,b` (`a`(10),`b` DESC) COMMENT 'it''s, a\\nkey',
  KEY `odd``name` (`b`) IGNORED,
  SPATIAL KEY `sp` (`g`),
  FULLTEXT KEY `ft` (`t`),
  CONSTRAINT `fk` FOREIGN KEY (`b`) REFERENCES `p` (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci"""


def test_definitions_keep_prefix_order_comment_and_visibility_verbatim():
    assert parse_index_clauses(CREATE) == {
        "a,b": "KEY `a,b` (`a`(10),`b` DESC) COMMENT 'it''s, a\\nkey'",
        "odd`name": "KEY `odd``name` (`b`) IGNORED",
        "sp": "SPATIAL KEY `sp` (`g`)",
        "ft": "FULLTEXT KEY `ft` (`t`)",
    }


def test_definitions_are_read_under_ansi_quotes_too():
    assert parse_index_clauses('CREATE TABLE "t" (\n  "id" int,\n  PRIMARY KEY ("id"),\n  KEY "k""x" ("id")\n)') == {
        'k"x': 'KEY "k""x" ("id")'}


def test_primary_and_unique_keys_are_never_deferred():
    shapes = {"PRIMARY": IndexShape(True, (("id", None),)), "u": IndexShape(True, (("a", None),)),
              "k": IndexShape(False, (("b", None),))}
    assert deferred_names(shapes, []) == (["k"], [])


def test_an_index_a_foreign_key_may_use_is_kept():
    shapes = {"fk_ab": IndexShape(False, (("A", None), ("b", None), ("c", None))),   # starts with the key's columns
              "ba": IndexShape(False, (("b", None), ("a", None))),                  # other order: not usable
              "a_prefix": IndexShape(False, (("a", 10), ("b", None))),              # a prefix: not usable
              "x_prefix_a_b": IndexShape(False, (("x", 5), ("a", None), ("b", None))),  # does not start with them
              "a_only": IndexShape(False, (("a", None),))}                          # too short
    assert deferred_names(shapes, [("a", "b")]) == (["a_only", "a_prefix", "ba", "x_prefix_a_b"], ["fk_ab"])


def test_a_recorded_definition_survives_its_json_round_trip():
    index = DeferredIndex("a,b", "KEY `a,b` (`a`(10),`b` DESC) COMMENT 'x'")
    assert DeferredIndex.from_json(index.as_json()) == index
