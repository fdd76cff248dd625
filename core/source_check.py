"""The source table stays the one init captured, until the swap.

The new table means "the ALTER of this table": its rows are the copy of one table plus that table's row
events. Two kinds of change break that meaning without a row event to say so:
- its definition (a column added, dropped or retyped, a key, a trigger): the copy and the appliers would
  bend or lose data;
- its identity: TRUNCATE, a rebuild (OPTIMIZE, ALTER ... FORCE) or DROP and CREATE in its place. The
  connector skips truncates, and a dropped table sends no deletes, so the swap would bring back every row
  the application removed. A new InnoDB table id is the one mark all of these leave.

Both are recorded at init (in the migration's options) and compared every few seconds and, decisively,
inside the cutover's lock, where no DDL can run.

A third change loses row events without touching the table: the server's binlog_format or binlog_row_image
set away from ROW and FULL (init refuses a server without them). Sessions connecting after that log their
changes in a form the connector skips, so the appliers and the cutover's drain would never see them; they are
checked at the same points.
"""
from __future__ import annotations

import re
import weakref
from typing import Any, Callable

import pymysql

from core.db import query
from core.triggers import GUARD_PREFIX, read_triggers
from core.state_records import Migration

# The source's definition and identity recorded at init, in the migration's options (absent in migrations
# started before each was recorded: that check is then skipped).
DEFINITION_OPTION = "source_definition"
IDENTITY_OPTION = "source_identity"

# Letters the server's file-name encoding writes as two characters after '@' (the code points it keeps a
# table for): a name holding one is not looked up, and its identity is not checked.
_TWO_CHARACTER_CODES = ((0x00C0, 0x05FF), (0x1E00, 0x1FFF), (0x2160, 0x217F), (0x24B0, 0x24EF), (0xFF20, 0xFF5F))


_RESERVED = re.compile(r"^(CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])$", re.IGNORECASE)
UNKNOWN_TABLE = 1109   # ER_UNKNOWN_TABLE: this server has not that information_schema view
CAPTURED_BINLOG = {"binlog_format": "ROW", "binlog_row_image": "FULL"}   # what capture reads: checked at init and after


class SourceChanged(Exception):
    """The source table changed since init: the new table no longer means the ALTER of it."""

    user_facing = True


def table_definition(conn: pymysql.connections.Connection, database: str,
                     table: str) -> dict[str, dict[str, str]]:
    """Columns (type, nullability, default, extra, collation, generation), keys, triggers and foreign keys of a
    table.

    A column added to the source during the migration would not exist in the new table, a dropped or retyped
    one would break or bend the copy, a trigger added, dropped or changed (body, definer, sql_mode, order) would
    not be the one recorded to move at the swap.
    AUTO_INCREMENT position and statistics are left out (they change with every insert).
    """
    columns = {}
    for name, ctype, nullable, default, extra, collation, generated in query(conn, """
            SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA, COLLATION_NAME,
                   GENERATION_EXPRESSION
            FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s
            ORDER BY ORDINAL_POSITION""", (database, table)):
        parts = [ctype, "NULL" if nullable == "YES" else "NOT NULL"]
        parts += [f"DEFAULT {default}"] if default is not None else []
        parts += [f"COLLATE {collation}"] if collation else []
        parts += [f"AS ({generated})"] if generated else []
        parts += [extra] if extra else []
        columns[name] = " ".join(parts)
    keys: dict[str, dict[str, Any]] = {}
    for name, non_unique, column, sub_part in query(conn, """
            SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS
            WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s ORDER BY INDEX_NAME, SEQ_IN_INDEX""", (database, table)):
        key = keys.setdefault(name, {"unique": not int(non_unique), "columns": []})
        key["columns"].append(f"{column}({sub_part})" if sub_part else column)
    triggers = {t.name: t.signature() for t in read_triggers(conn, database, table)}
    return {"columns": columns,
            "keys": {name: ("UNIQUE " if k["unique"] else "") + f"({', '.join(k['columns'])})"
                     for name, k in keys.items()},
            "triggers": triggers,
            "foreign_keys": foreign_keys(conn, database, table)}


def foreign_keys(conn: pymysql.connections.Connection, database: str, table: str) -> dict[str, str]:
    """{InnoDB id: what it joins, with its rules} of the foreign keys from and to the table. A cascade from a
    parent deletes the source's rows with no row event; init refuses either way.

    Read from InnoDB's own list (INNODB_SYS_FOREIGN, MySQL INNODB_FOREIGN): REFERENTIAL_CONSTRAINTS asked
    for both ways opens every table of the server, and this runs inside the cutover's lock."""
    name = innodb_name(database, table)
    if name is None:   # the child side only, by the table's name: the side whose cascades reach its rows
        return {f"{database}.{fk}": f"{database}.{table} REFERENCES {parent_db}.{parent} ON DELETE {on_delete} "
                                    f"ON UPDATE {on_update}"
                for fk, parent_db, parent, on_delete, on_update in query(conn, """
                    SELECT CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE
                    FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE CONSTRAINT_SCHEMA=%s AND TABLE_NAME=%s""",
                                                                                   (database, table))}
    rows = _innodb_view(conn, ("INNODB_SYS_FOREIGN", "INNODB_FOREIGN"), "SELECT ID, FOR_NAME, REF_NAME, TYPE FROM "
                        "information_schema.{view} WHERE FOR_NAME = %s OR REF_NAME = %s", (name, name))
    fold = _name_fold(conn)
    return {_dotted(fk): f"{_dotted(child)} REFERENCES {_dotted(parent)}{_rules(int(kind))}"
            for fk, child, parent, kind in rows if fold(name) in (fold(child), fold(parent))}


# InnoDB's foreign key TYPE bits
_RULES = ((1, "ON DELETE CASCADE"), (2, "ON DELETE SET NULL"), (16, "ON DELETE NO ACTION"),
          (4, "ON UPDATE CASCADE"), (8, "ON UPDATE SET NULL"), (32, "ON UPDATE NO ACTION"))


def _dotted(innodb: str) -> str:
    """`db/name` as `db.name` (its characters left in the file-name encoding)."""
    return str(innodb).replace("/", ".", 1)


def _rules(kind: int) -> str:
    return "".join(f" {rule}" for bit, rule in _RULES if kind & bit)


def definition_changes(recorded: dict[str, dict[str, str]], current: dict[str, dict[str, str]]) -> list[str]:
    """What differs between two table definitions, one phrase per column or key."""
    if not current["columns"]:
        return ["the table is gone"]
    changes = []
    kinds = [("columns", "column"), ("keys", "key"), ("triggers", "trigger"), ("foreign_keys", "foreign key")]
    if any(name.startswith(GUARD_PREFIX) for name in current.get("triggers", {})):
        # a cutover stopped inside its trigger move (core/triggers.py): resume or abort puts the set back, and it is
        # compared once that is done; meanwhile the guards refuse every write
        kinds.remove(("triggers", "trigger"))
    for kind, noun in kinds:
        before, now = recorded.get(kind, {}), current.get(kind, {})
        changes += [f"{noun} {n} added ({now[n]})" for n in now if n not in before]
        changes += [f"{noun} {n} dropped" for n in before if n not in now]
        changes += [f"{noun} {n} changed from {before[n]} to {now[n]}" for n in now
                    if n in before and before[n] != now[n]]
    return changes


def innodb_name(database: str, table: str) -> str | None:
    """The table's name as InnoDB keeps it (`db/table`, in the server's file-name encoding), or None for a
    name holding a letter that encoding writes from a table of its own."""
    encoded = []
    for part in (database, table):
        chars = []
        for char in part:
            code = ord(char)
            if (char.isascii() and char.isalnum()) or char == "_":
                chars.append(char)
            elif any(lo <= code <= hi for lo, hi in _TWO_CHARACTER_CODES):
                return None
            else:
                chars.append(f"@{code:04x}")
        name = "".join(chars)
        # a device name of Windows gets a suffix on every platform, so that data files can move between them
        encoded.append(name + "@@@" if _RESERVED.match(name) else name)
    return "/".join(encoded)


def table_identity(conn: pymysql.connections.Connection, database: str, table: str) -> list[int] | None:
    """The InnoDB table ids of the table (one per partition when partitioned): new after TRUNCATE, a rebuild
    or DROP and CREATE, kept by RENAME and in-place ALTERs. None when the name cannot be looked up, [] when
    no InnoDB table has it.

    Read from information_schema (INNODB_SYS_TABLES on MariaDB, INNODB_TABLES on MySQL), which needs PROCESS,
    a privilege init already requires. The views scan InnoDB's whole dictionary (about 0.6 ms here for 400
    tables)."""
    name = innodb_name(database, table)
    if name is None:
        return None
    rows = _innodb_view(conn, ("INNODB_SYS_TABLES", "INNODB_TABLES"), "SELECT TABLE_ID, NAME FROM "
                        "information_schema.{view} WHERE NAME = %s OR LEFT(NAME, CHAR_LENGTH(%s)) = %s",
                        (name, name + "#", name + "#"))
    fold = _name_fold(conn)
    return sorted(int(tid) for tid, found in rows if is_innodb_name_of(fold(found), fold(name)))


def _name_fold(conn: pymysql.connections.Connection) -> Callable[[str], str]:
    """How this server compares table names (the views compare case-insensitively whatever it does): as they
    are, or in lower case where lower_case_table_names is set, so that `Orders` never stands for `orders`.
    Read once per session: the setting cannot change while the server runs."""
    fold = _FOLDS.get(conn)
    if fold is None:
        fold = str.lower if int(query(conn, "SELECT @@lower_case_table_names")[0][0]) else str
        _FOLDS[conn] = fold
    return fold


_FOLDS: weakref.WeakKeyDictionary[pymysql.connections.Connection, Callable[[str], str]] = weakref.WeakKeyDictionary()


def _innodb_view(conn: pymysql.connections.Connection, views: tuple[str, str], sql: str,
                 args: tuple[str, ...]) -> list[tuple]:
    """Rows of `sql` from the InnoDB view this server has: (MariaDB's, MySQL's) name of it; the version the
    server announces picks the first one tried (a proxy may announce another)."""
    order = list(views) if "mariadb" in str(conn.get_server_info()).lower() else list(reversed(views))
    for view in order:
        try:
            return query(conn, sql.format(view=view), args)
        except pymysql.err.MySQLError as exc:
            if exc.args[0] != UNKNOWN_TABLE or view == order[-1]:
                raise
    return []


def is_innodb_name_of(found: str, name: str) -> bool:
    """Is `found` the InnoDB name of table `name`, or of one of its partitions (`#P#`, MySQL `#p#`)?"""
    return found == name or (found.startswith(name) and found[len(name):].lower().startswith("#p#"))


def source_changes(conn: pymysql.connections.Connection, options: dict[str, Any], database: str,
                   table: str) -> tuple[list[str], str | None]:
    """(definition changes, identity change or None) of database.table against what init recorded."""
    recorded_definition = options.get(DEFINITION_OPTION)
    definition = ([] if recorded_definition is None else
                  definition_changes(recorded_definition, table_definition(conn, database, table)))
    recorded_identity = options.get(IDENTITY_OPTION)
    if recorded_identity is None or definition == ["the table is gone"]:
        return definition, None
    identity = table_identity(conn, database, table)
    if identity == recorded_identity:
        return definition, None
    now = ", ".join(map(str, identity)) if identity else "not found"
    return definition, f"InnoDB table id {', '.join(map(str, recorded_identity))} is now {now}"


def capture_setting_changes(conn: pymysql.connections.Connection) -> list[str]:
    """The binlog settings change data capture needs that the server no longer has ("binlog_format is MIXED")."""
    found = {str(name).lower(): str(value) for name, value in
             query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('binlog_format', 'binlog_row_image')")}
    return [f"{name} is {found[name]}" for name, needed in CAPTURED_BINLOG.items()
            if name in found and found[name].upper() != needed]


def check_source_unchanged(conn: pymysql.connections.Connection, migration: Migration) -> None:
    """Raise SourceChanged if the source table's definition or identity differs from the one init recorded, or
    its changes are no longer logged in the form change data capture reads."""
    name = f"{migration.database}.{migration.table}"
    definition, identity = source_changes(conn, migration.options, migration.database, migration.table)
    if definition:
        raise SourceChanged(f"table {name} was altered during the migration ({'; '.join(definition)}): stopping with "
                            f"the original table untouched; run `stream-osc abort --table {name}` and start "
                            "again against its new definition")
    if identity:
        raise SourceChanged(f"table {name} was replaced during the migration: it was truncated, rebuilt (OPTIMIZE, "
                            f"ALTER ... FORCE, a partition added, dropped or truncated) or dropped and created again "
                            f"({identity}); the rows a TRUNCATE or a DROP removes send no row event, and a rebuild "
                            "cannot be told from them: stopping without a swap; run "
                            f"`stream-osc abort --table {name}` and start again")
    settings = capture_setting_changes(conn)
    if settings:
        raise SourceChanged(f"{' and '.join(settings)} since the migration of {name} began: changes that sessions "
                            "connected since then write are logged in a form change data capture skips, and would "
                            "not reach the new table: stopping without a swap; set it back (SET GLOBAL "
                            "binlog_format='ROW', binlog_row_image='FULL'), reconnect the application's sessions (a "
                            f"session keeps the format it connected with), then run `stream-osc abort --table {name}` "
                            "and start again")
