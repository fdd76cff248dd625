"""Foreign keys of a migrated table: the ones it holds to parents, the ones other tables hold to it, their names on
the new table, and the ALTER's clauses that drop them (docs/foreign-keys.md).

The new table holds no foreign key while the copy and the appliers write it: one there would make the application's
DELETE of a parent row check the new table's rows too, which lag the original's (a child row the application has
deleted is still there until its change is applied), and refuse it (error 1451) or wait for an applier's row lock.
The table's own constraints are added to the new table in the cutover's lock, after the last drain, with
foreign_key_checks=0: then the new table holds exactly the original's rows, which the same constraints already hold,
so the server need not read a row (measured: 12 ms for a 1M-row table, metadata only).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pymysql

from core.alter_columns import Token, tokenize
from core.db import qualified, query, quote_ident

NAME_LIMIT = 64   # the server's longest identifier
# rules under which a parent's change rewrites the child's rows inside InnoDB, with no row event in the binlog
CHANGING_RULES = ("CASCADE", "SET NULL", "SET DEFAULT")
FOREIGN_KEYS_OPTION = "foreign_keys"       # the new table's constraints, recorded at init: [{"name", "sql"}]
CHILD_KEYS_OPTION = "child_foreign_keys"   # --alter-foreign-keys-method rebuild: the children's constraints
METHODS = ("none", "rebuild")              # --alter-foreign-keys-method


@dataclass(frozen=True)
class ForeignKey:
    """One constraint: `schema`.`table` (columns) REFERENCES `parent_schema`.`parent` (parent_columns)."""

    name: str
    schema: str
    table: str
    columns: tuple[str, ...]
    parent_schema: str
    parent: str
    parent_columns: tuple[str, ...]
    on_delete: str
    on_update: str

    def clause(self, name: str | None = None, parent: str | None = None) -> str:
        """ADD CONSTRAINT … as it reads, under `name` (default its own) and referencing `parent` (a table of the
        parent's schema; default its own parent)."""
        cols = ", ".join(map(quote_ident, self.columns))
        refs = ", ".join(map(quote_ident, self.parent_columns))
        # RESTRICT, the default, is left unsaid: said, MariaDB 10.11's in-place ADD (foreign_key_checks=0) records
        # it as NO ACTION (the same check in InnoDB, another definition)
        rules = "".join(f" ON {event} {rule}" for event, rule in (("DELETE", self.on_delete),
                                                                  ("UPDATE", self.on_update)) if rule != "RESTRICT")
        return (f"ADD CONSTRAINT {quote_ident(name or self.name)} FOREIGN KEY ({cols}) REFERENCES "
                f"{qualified(self.parent_schema, parent or self.parent)} ({refs}){rules}")

    def changing_rules(self) -> list[str]:
        """The rules ("ON DELETE CASCADE") under which the parent rewrites this table's rows."""
        return [f"ON {event} {rule}" for event, rule in (("DELETE", self.on_delete), ("UPDATE", self.on_update))
                if rule in CHANGING_RULES]

    def describe(self) -> str:
        return (f"{self.name} ({self.schema}.{self.table} ({', '.join(self.columns)}) REFERENCES "
                f"{self.parent_schema}.{self.parent} ({', '.join(self.parent_columns)}))")

    def references(self, schema: str, table: str) -> bool:
        return (self.parent_schema, self.parent.lower()) == (schema, table.lower())


def new_constraint_name(name: str) -> str:
    """The name of a constraint's copy on the new table: InnoDB's constraint names are unique in a schema, and the
    original's stays until it is dropped with the old table. A leading underscore is toggled (pt-online-schema-change's
    scheme): `fk` <-> `_fk`, so that a table migrated again gets its first names back. A 64-character name without
    one has no room: its first character becomes the underscore (`abc…` -> `_bc…`, then `bc…` the next time)."""
    if name.startswith("_") and len(name) > 1:
        return name[1:]
    return "_" + (name if len(name) < NAME_LIMIT else name[1:])


def _read(conn: pymysql.connections.Connection, where: str, args: tuple[str, ...]) -> list[ForeignKey]:
    """Constraints from KEY_COLUMN_USAGE (columns in order), then their rules from REFERENTIAL_CONSTRAINTS asked
    per table (joined in one statement, the server fills that view for every table it has)."""
    rows = query(conn, f"""
        SELECT CONSTRAINT_NAME, TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME,
               REFERENCED_COLUMN_NAME
        FROM information_schema.KEY_COLUMN_USAGE WHERE REFERENCED_TABLE_NAME IS NOT NULL AND {where}
        ORDER BY TABLE_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, ORDINAL_POSITION""", args)
    found: dict[tuple[str, str, str], dict] = {}
    for name, schema, table, column, ref_schema, ref_table, ref_column in rows:
        fk = found.setdefault((schema, table, name), {
            "name": name, "schema": schema, "table": table, "columns": [], "parent_schema": ref_schema,
            "parent": ref_table, "parent_columns": []})
        fk["columns"].append(column)
        fk["parent_columns"].append(ref_column)
    rules: dict[tuple[str, str, str], tuple[str, str]] = {}
    for schema, table in sorted({(schema, table) for schema, table, _ in found}):
        for name, on_delete, on_update in query(conn, "SELECT CONSTRAINT_NAME, DELETE_RULE, UPDATE_RULE FROM "
                                                      "information_schema.REFERENTIAL_CONSTRAINTS WHERE "
                                                      "CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s", (schema, table)):
            rules[(schema, table, name)] = (on_delete, on_update)
    return [ForeignKey(**{**fk, "columns": tuple(fk["columns"]), "parent_columns": tuple(fk["parent_columns"]),
                          "on_delete": rules.get(key, ("RESTRICT", "RESTRICT"))[0],
                          "on_update": rules.get(key, ("RESTRICT", "RESTRICT"))[1]})
            for key, fk in found.items()]


def own_foreign_keys(conn: pymysql.connections.Connection, database: str, table: str) -> list[ForeignKey]:
    """The constraints `database`.`table` holds (to its parents, or to itself)."""
    return _read(conn, "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (database, table))


def child_foreign_keys(conn: pymysql.connections.Connection, database: str, table: str) -> list[ForeignKey]:
    """The constraints other tables hold to `database`.`table` (its children; the table itself left out). This
    opens every table of the server: any schema may hold one."""
    return [fk for fk in _read(conn, "REFERENCED_TABLE_SCHEMA = %s AND REFERENCED_TABLE_NAME = %s",
                               (database, table))
            if (fk.schema, fk.table.lower()) != (database, table.lower())]


def constraint_taken(conn: pymysql.connections.Connection, database: str, name: str) -> str | None:
    """The table holding a constraint of that name in the schema (InnoDB compares them without case), or None."""
    rows = query(conn, "SELECT TABLE_NAME FROM information_schema.TABLE_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s "
                       "AND LOWER(CONSTRAINT_NAME) = LOWER(%s) AND CONSTRAINT_TYPE = 'FOREIGN KEY'", (database, name))
    return rows[0][0] if rows else None


def _words(tokens: list[Token], at: int, *words: str) -> bool:
    ahead = tokens[at:at + len(words)]
    return len(ahead) == len(words) and all(k == "word" and t.upper() == w for (k, t), w in zip(ahead, words))


def clause_spans(alter: str) -> list[str]:
    """The ALTER's top-level comma-separated clauses as written (quotes, comments and parentheses respected)."""
    spans, depth, start, i = [], 0, 0, 0
    while i < len(alter):
        ch = alter[i]
        if ch in "`\"'":
            i += 1
            while i < len(alter) and alter[i] != ch:
                i += 2 if alter[i] == "\\" and ch != "`" else 1
        elif alter.startswith("/*", i):
            end = alter.find("*/", i + 2)
            i = len(alter) if end < 0 else end + 1
        elif ch == "#" or alter.startswith("-- ", i):
            end = alter.find("\n", i)
            i = len(alter) if end < 0 else end
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            spans.append(alter[start:i])
            start = i + 1
        i += 1
    spans.append(alter[start:])
    return [s for s in spans if s.strip()]


def dropped_constraint(span: str) -> str | None:
    """The name a `DROP FOREIGN KEY [IF EXISTS] name` or `DROP CONSTRAINT [IF EXISTS] name` clause drops."""
    tokens = tokenize(span)
    for words in (("DROP", "FOREIGN", "KEY"), ("DROP", "CONSTRAINT")):
        if _words(tokens, 0, *words):
            at = len(words) + (2 if _words(tokens, len(words), "IF", "EXISTS") else 0)
            if len(tokens) == at + 1 and tokens[at][0] in ("name", "word", "dq"):
                return tokens[at][1]
    return None


def added_foreign_key(span: str) -> str | None:
    """The clause as written when it adds a foreign key (`ADD [CONSTRAINT [name]] FOREIGN KEY …`), else None."""
    tokens = tokenize(span)
    if not _words(tokens, 0, "ADD"):
        return None
    kinds = [t.upper() for k, t in tokens[1:4] if k == "word"]
    return re.sub(r"\s+", " ", span.strip()) if "FOREIGN" in kinds and "REFERENCES" in {
        t.upper() for k, t in tokens if k == "word"} else None


def split_alter(alter: str, names: list[str]) -> tuple[str, list[str]]:
    """(the ALTER without its clauses dropping one of `names`, the names those clauses drop). The new table is
    made without foreign keys, so a DROP FOREIGN KEY there would fail: the constraint is left out instead."""
    kept, dropped = [], []
    known = {n.lower(): n for n in names}
    for span in clause_spans(alter):
        name = dropped_constraint(span)
        if name is not None and name.lower() in known:
            dropped.append(known[name.lower()])
        else:
            kept.append(span.strip())
    return ", ".join(kept), dropped
