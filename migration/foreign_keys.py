"""Foreign keys at init: which the migration refuses, and the new table's own constraints (docs/foreign-keys.md).

Refused, each named: a constraint whose parent rewrites this table's rows (CASCADE, SET NULL, SET DEFAULT: InnoDB
makes those changes with no row event in the binlog, so the appliers would never see them), one of the table to
itself, constraints of other tables referencing it (unless --alter-foreign-keys-method rebuild), any on a move to
another server, and an ALTER that adds one. The table's other constraints are carried to the new table under their
new names (core/foreign_keys.py: new_constraint_name) and recorded; the new table is left without them until the
cutover's lock adds them (cutover/foreign_keys.py).
"""
from __future__ import annotations

import pymysql

from core.db import qualified, query, quote_ident
from core.foreign_keys import (CHILD_KEYS_OPTION, FOREIGN_KEYS_OPTION, ForeignKey, added_foreign_key,
                               child_foreign_keys, clause_spans, constraint_taken, new_constraint_name,
                               own_foreign_keys, split_alter)
from core.source_check import foreign_keys
from core.spec import MigrationSpec
from migration.checks import PreflightError


def check_foreign_keys(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """PreflightError naming the constraint for every foreign key the migration cannot keep; nothing is made."""
    db, table = spec.database, spec.table
    own = own_foreign_keys(conn, db, table)
    children = child_foreign_keys(conn, db, table)
    if spec.target_server and (own or children):
        names = ", ".join(sorted(fk.name for fk in own + children))
        raise PreflightError(f"table {db}.{table} has foreign keys ({names}): a move to another server would leave "
                             "them behind; not supported")
    for fk in own:
        rules = fk.changing_rules()
        if rules:
            raise PreflightError(f"table {db}.{table} has foreign key {fk.name} REFERENCES {fk.parent_schema}."
                                 f"{fk.parent} {' '.join(rules)}: the parent's changes rewrite this table's rows "
                                 "with no row event in the binlog, so the migration would never see them and "
                                 "they would be lost; not supported")
        if fk.references(db, table):
            raise PreflightError(f"table {db}.{table} has foreign key {fk.name} referencing itself: not supported")
        taken = constraint_taken(conn, db, new_constraint_name(fk.name))
        if taken:
            raise PreflightError(f"foreign key {fk.name} of {db}.{table} is carried to the new table as "
                                 f"{new_constraint_name(fk.name)}, a name {db}.{taken} already gives a constraint "
                                 "(constraint names are unique in a schema): rename one of them first")
    for span in clause_spans(spec.alter):
        added = added_foreign_key(span)
        if added:
            raise PreflightError(f"the ALTER adds a foreign key ({added}): not supported; stream-osc adds a "
                                 "table's constraints at the swap without reading its rows, which only the "
                                 "constraints the original already holds make sound; add it with ALTER TABLE "
                                 "after the migration")
    for fk in children if spec.alter_foreign_keys_method == "rebuild" else []:
        taken = constraint_taken(conn, fk.schema, new_constraint_name(fk.name))
        if taken:
            raise PreflightError(f"foreign key {fk.name} of {fk.schema}.{fk.table} is rebuilt as "
                                 f"{new_constraint_name(fk.name)}, a name {fk.schema}.{taken} already gives a "
                                 "constraint (constraint names are unique in a schema): rename one of them first")
    if children and spec.alter_foreign_keys_method != "rebuild":
        shown = ", ".join(f"{fk.schema}.{fk.table} ({fk.name})" for fk in children)
        raise PreflightError(f"table {db}.{table} is referenced by foreign keys of {shown}: after the swap they "
                             "would reference the original table, renamed away; give --alter-foreign-keys-method "
                             "rebuild to rebuild them on the new table right after the swap (docs/foreign-keys.md)")


def carry_foreign_keys(conn: pymysql.connections.Connection, spec: MigrationSpec) -> tuple[str, list[ForeignKey]]:
    """Before the ALTER, on the new table (empty): the source's constraints the ALTER does not drop, under their
    new names, so that the ALTER meets them as on the original (a column or index they need cannot go); returns
    the ALTER to run there (its clauses dropping a constraint left out: the copy never had it)."""
    own = own_foreign_keys(conn, spec.database, spec.table)
    alter, dropped = split_alter(spec.alter, [fk.name for fk in own])
    carried = [fk for fk in own if fk.name not in dropped]
    if carried:
        new = qualified(spec.database, spec.new_table)
        before = _indexes(conn, spec.database, spec.new_table)
        query(conn, "SET SESSION foreign_key_checks = 0")   # an empty table: no row to check, no parent to lock
        try:
            query(conn, f"ALTER TABLE {new} " + ", ".join(fk.clause(new_constraint_name(fk.name)) for fk in carried))
        finally:
            query(conn, "SET SESSION foreign_key_checks = 1")
        renamed = _renamed_indexes(before, _indexes(conn, spec.database, spec.new_table))
        if renamed:
            query(conn, f"ALTER TABLE {new} " + ", ".join(f"RENAME INDEX {quote_ident(now)} TO {quote_ident(was)}"
                                                          for now, was in renamed))
    return alter, carried


def _indexes(conn: pymysql.connections.Connection, database: str, table: str) -> dict[str, tuple[str, ...]]:
    """{index name: its columns} of a table."""
    found: dict[str, list[str]] = {}
    for name, column in query(conn, "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE "
                                    "TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX",
                              (database, table)):
        found.setdefault(name, []).append(column)
    return {name: tuple(columns) for name, columns in found.items()}


def _renamed_indexes(before: dict[str, tuple[str, ...]], after: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """(name now, name before) of the indexes the constraints took over. An index the server made for a constraint
    (one made with the original's key) stays marked as such in CREATE … LIKE, and MariaDB replaces it with one
    named after the new constraint when that is added: its name is given back, as the table has it."""
    gone = {name: columns for name, columns in before.items() if name not in after}
    new = {name: columns for name, columns in after.items() if name not in before}
    return [(now, was) for was, columns in gone.items()
            for now in [next((n for n, c in new.items() if c == columns), None)] if now is not None]


def set_aside_foreign_keys(conn: pymysql.connections.Connection, spec: MigrationSpec) -> list[dict[str, str]]:
    """After the ALTER: the new table's constraints as it left them (columns it renamed renamed), recorded, then
    dropped from the new table until the cutover's lock adds them back; [{"name", "sql"}]."""
    kept = own_foreign_keys(conn, spec.database, spec.new_table)
    if kept:
        query(conn, "SET SESSION foreign_key_checks = 0")
        try:
            query(conn, f"ALTER TABLE {qualified(spec.database, spec.new_table)} "
                        + ", ".join(f"DROP FOREIGN KEY {quote_ident(fk.name)}" for fk in kept))
        finally:
            query(conn, "SET SESSION foreign_key_checks = 1")
    return [{"name": fk.name, "sql": fk.clause()} for fk in kept]


def check_children_fit(conn: pymysql.connections.Connection, spec: MigrationSpec) -> None:
    """After the ALTER, with --alter-foreign-keys-method rebuild: every child's constraint can reference the new
    table, as the server's own ALTER of the original would have required: the referenced columns still there, of
    the same type and collation, at the head of an index. Found only after the swap, the children would be left
    referencing the old table."""
    if spec.alter_foreign_keys_method != "rebuild":
        return
    columns = {name.lower(): (ctype, collation) for name, ctype, collation in query(
        conn, "SELECT COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
              "AND TABLE_NAME=%s", (spec.database, spec.new_table))}
    before = {name.lower(): (ctype, collation) for name, ctype, collation in query(
        conn, "SELECT COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s "
              "AND TABLE_NAME=%s", (spec.database, spec.table))}
    heads = [tuple(c.lower() for c in cols) for cols in _indexes(conn, spec.database, spec.new_table).values()]
    for fk in child_foreign_keys(conn, spec.database, spec.table):
        wanted = tuple(c.lower() for c in fk.parent_columns)
        changed = [c for c in wanted if columns.get(c) != before.get(c)]
        if changed or not any(head[:len(wanted)] == wanted for head in heads):
            what = (f"changes or drops column {', '.join(changed)}" if changed
                    else f"leaves no index starting with ({', '.join(fk.parent_columns)})")
            raise PreflightError(f"the ALTER {what}, which foreign key {fk.name} of {fk.schema}.{fk.table} "
                                 "references: the server would refuse it on the table, and the constraint could not "
                                 "be rebuilt on the new table")


def definition_after_alter(conn: pymysql.connections.Connection, spec: MigrationSpec,
                           altered: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The definition the table itself will have once the server makes the ALTER on it (the instant path), from
    the new table's (`altered`, which holds no foreign key): the table's foreign keys, either way, but those the
    ALTER drops (core/source_check.py: table_definition)."""
    own = [fk.name for fk in own_foreign_keys(conn, spec.database, spec.table)]
    _, dropped = split_alter(spec.alter, own)
    gone = {f"{spec.database}.{name}".lower() for name in dropped}
    kept = {name: joined for name, joined in foreign_keys(conn, spec.database, spec.table).items()
            if name.lower() not in gone}
    return {**altered, "foreign_keys": kept}


def child_keys_to_rebuild(conn: pymysql.connections.Connection, spec: MigrationSpec) -> list[dict[str, str]]:
    """--alter-foreign-keys-method rebuild: the children's constraints, recorded at init ({"schema", "table",
    "name", "new_name", "sql"}: the clause that makes the constraint reference the swapped-in table)."""
    if spec.alter_foreign_keys_method != "rebuild":
        return []
    return [{"schema": fk.schema, "table": fk.table, "name": fk.name, "new_name": new_constraint_name(fk.name),
             "sql": fk.clause(new_constraint_name(fk.name), spec.table)}
            for fk in child_foreign_keys(conn, spec.database, spec.table)]


def foreign_key_options(conn: pymysql.connections.Connection, spec: MigrationSpec,
                        kept: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """What the migration's options record of foreign keys (nothing when there are none)."""
    children = child_keys_to_rebuild(conn, spec)
    return {**({FOREIGN_KEYS_OPTION: kept} if kept else {}), **({CHILD_KEYS_OPTION: children} if children else {})}
