"""Durable migration state in the metadata schema: the migration row, its chunks, its fence table."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pymysql

from core.db import qualified, query, query_count, quote_ident
from core.logs import log_event

log = logging.getLogger("stream_osc.state")


class Stage(StrEnum):
    """Where a migration is; entered only through StateStore.enter_stage (durable, then logged)."""

    INIT = "init"
    COPY = "copy"
    APPLY = "apply"
    VALIDATE = "validate"
    CUTOVER = "cutover"
    CLEANUP = "cleanup"
    DONE = "done"


class Status(StrEnum):
    """Whether work on a migration proceeds."""

    RUNNING = "running"
    PAUSED = "paused"       # an operator's pause: no writes until resume
    WAITING = "waiting"     # in sync, waiting for `stream-osc cutover` (--cutover manual)
    DONE = "done"
    ABORTED = "aborted"


FINISHED = (Status.DONE, Status.ABORTED)
WORKING_STAGES = (Stage.COPY, Stage.APPLY, Stage.VALIDATE, Stage.CUTOVER)   # a new table exists, no swap yet
SWAPPED_STAGES = (Stage.CLEANUP, Stage.DONE)


@dataclass(frozen=True)
class Chunk:
    """One planned key range of the bulk copy and how far it got."""

    number: int
    start_pk: int
    end_pk: int
    next_pk: int
    rows_copied: int
    done: bool


FENCE_KEY_COLUMN = "__stream_osc_fence"   # the fence table's key column; its change keys carry it


@dataclass
class Migration:
    """One row of `<metadata>.migrations`."""

    id: int
    database: str
    table: str
    alter_sql: str
    stage: Stage
    status: Status
    prefix: str
    pk_column: str
    min_pk: int | None
    max_pk: int | None
    error: str | None
    validation_diffs: int
    cutover_blocked_ms: int | None
    cutover_at: float | None     # wall-clock time (epoch s) when the swap's lock was taken
    options: dict[str, Any]

    @property
    def connector(self) -> str:
        return self.prefix.replace("_", "-")

    @property
    def fence_table(self) -> str:
        return f"fence_{self.id}"

    @property
    def group_id(self) -> str:
        return f"{self.prefix}.appliers"


# columns added after the first release of the metadata schema: name -> definition
LATER_COLUMNS = {"coordinator": "VARCHAR(200) NULL", "heartbeat_at": "TIMESTAMP(6) NULL"}

# Key positions are DECIMAL(20,0): signed BIGINT keys down to -2^63 and unsigned ones up to 2^64-1 fit, and
# so does a chunk's next_pk one past the largest key. Metadata schemas made as BIGINT are widened in place.
KEY_TYPE = "DECIMAL(20,0)"
WIDENED_COLUMNS = {
    "migrations": {"min_pk": f"{KEY_TYPE} NULL", "max_pk": f"{KEY_TYPE} NULL"},
    "chunks": {"start_pk": f"{KEY_TYPE} NOT NULL", "end_pk": f"{KEY_TYPE} NOT NULL", "next_pk": f"{KEY_TYPE} NOT NULL"},
}

# The source's definition recorded at init, in the migration's options (absent in migrations started earlier).
DEFINITION_OPTION = "source_definition"

_COLUMNS = ("id, db, tbl, alter_sql, stage, status, prefix, pk_column, min_pk, max_pk, error, "
            "validation_diffs, cutover_blocked_ms, cutover_at, options")


class StateStore:
    """Reads and writes the metadata schema; every write is a committed transaction."""

    def __init__(self, conn: pymysql.connections.Connection, schema: str) -> None:
        self.conn = conn
        self.schema = schema

    def t(self, name: str) -> str:
        return qualified(self.schema, name)

    def ensure_schema(self) -> None:
        """Create the metadata schema and its tables if missing."""
        query(self.conn, f"CREATE DATABASE IF NOT EXISTS {quote_ident(self.schema)}")
        query(self.conn, f"""CREATE TABLE IF NOT EXISTS {self.t('migrations')} (
            id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
            db VARCHAR(64) NOT NULL, tbl VARCHAR(64) NOT NULL,
            alter_sql TEXT NOT NULL,
            stage VARCHAR(16) NOT NULL, status VARCHAR(16) NOT NULL,
            prefix VARCHAR(100) NOT NULL, pk_column VARCHAR(64) NOT NULL,
            min_pk {KEY_TYPE} NULL, max_pk {KEY_TYPE} NULL,
            error TEXT NULL, validation_diffs BIGINT NOT NULL DEFAULT 0,
            cutover_blocked_ms INT NULL, cutover_at DOUBLE NULL,
            options TEXT NOT NULL,
            active_key VARCHAR(140) NULL,
            coordinator VARCHAR(200) NULL, heartbeat_at TIMESTAMP(6) NULL,
            created_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
            updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
            UNIQUE KEY active_key (active_key)) ENGINE=InnoDB""")
        present = {r[0] for r in query(self.conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
                                                   "WHERE TABLE_SCHEMA=%s AND TABLE_NAME='migrations'", (self.schema,))}
        for column, definition in LATER_COLUMNS.items():   # metadata schemas made by earlier versions
            if column not in present:
                query(self.conn, f"ALTER TABLE {self.t('migrations')} ADD COLUMN {quote_ident(column)} {definition}")
        query(self.conn, f"""CREATE TABLE IF NOT EXISTS {self.t('chunks')} (
            migration_id BIGINT NOT NULL, chunk_no INT NOT NULL,
            start_pk {KEY_TYPE} NOT NULL, end_pk {KEY_TYPE} NOT NULL, next_pk {KEY_TYPE} NOT NULL,
            rows_copied BIGINT NOT NULL DEFAULT 0, done TINYINT NOT NULL DEFAULT 0,
            PRIMARY KEY (migration_id, chunk_no)) ENGINE=InnoDB""")
        for table, columns in WIDENED_COLUMNS.items():   # BIGINT in metadata schemas made by earlier versions
            narrow = [r[0] for r in query(self.conn, "SELECT COLUMN_NAME FROM information_schema.COLUMNS "
                                                      "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s AND DATA_TYPE='bigint'",
                                          (self.schema, table)) if r[0] in columns]
            if narrow:
                query(self.conn, f"ALTER TABLE {self.t(table)} " +
                      ", ".join(f"MODIFY {quote_ident(c)} {columns[c]}" for c in narrow))

    def _row(self, row: tuple) -> Migration:
        (mid, db, tbl, alter_sql, stage, status, prefix, pk_column, min_pk, max_pk, error,
         diffs, blocked, cutover_at, options) = row
        return Migration(mid, db, tbl, alter_sql, Stage(stage), Status(status), prefix, pk_column,
                         _key(min_pk), _key(max_pk), error, diffs, blocked, cutover_at, json.loads(options or "{}"))

    def schema_exists(self) -> bool:
        return bool(query(self.conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                                     "AND TABLE_NAME='migrations'", (self.schema,)))

    def active(self, database: str, table: str) -> Migration | None:
        """The unfinished migration of this table, if any."""
        if not self.schema_exists():
            return None
        rows = query(self.conn, f"SELECT {_COLUMNS} FROM {self.t('migrations')} WHERE active_key=%s",
                     (f"{database}.{table}",))
        return self._row(rows[0]) if rows else None

    def latest(self, database: str, table: str) -> Migration | None:
        """The most recent migration of this table, finished or not."""
        if not self.schema_exists():
            return None
        rows = query(self.conn, f"SELECT {_COLUMNS} FROM {self.t('migrations')} WHERE db=%s AND tbl=%s "
                                "ORDER BY id DESC LIMIT 1", (database, table))
        return self._row(rows[0]) if rows else None

    def exists(self, migration_id: int) -> bool:
        return bool(query(self.conn, f"SELECT 1 FROM {self.t('migrations')} WHERE id=%s", (migration_id,)))

    def get(self, migration_id: int) -> Migration:
        migration = self.find(migration_id)
        if migration is None:
            raise LookupError(f"migration {migration_id} is not recorded in {self.schema}.migrations")
        return migration

    def find(self, migration_id: int) -> Migration | None:
        rows = query(self.conn, f"SELECT {_COLUMNS} FROM {self.t('migrations')} WHERE id=%s", (migration_id,))
        return self._row(rows[0]) if rows else None

    def create(self, database: str, table: str, alter_sql: str, prefix: str, pk_column: str,
               options: dict[str, Any], coordinator: str | None = None) -> Migration:
        """Insert the migration row (stage init), owned by `coordinator` if given."""
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {self.t('migrations')} (db, tbl, alter_sql, stage, status, prefix, pk_column, "
                        "options, active_key, coordinator, heartbeat_at) "
                        "VALUES (%s,%s,%s,'init','running',%s,%s,%s,%s,%s,NOW(6))",
                        (database, table, alter_sql, prefix, pk_column, json.dumps(options), f"{database}.{table}",
                         coordinator))
            return self.get(cur.lastrowid)

    # coordinator lease ----------------------------------------------------------------------------
    def claim_coordinator(self, migration_id: int, owner: str, stale_s: float, dead_owner: str | None = None) -> bool:
        """Become (or stay) the migration's coordinator unless another one's heartbeat is fresh.

        `dead_owner` names a coordinator known to be dead, whose fresh heartbeat does not count.
        """
        return bool(query_count(self.conn, f"UPDATE {self.t('migrations')} SET coordinator=%s, heartbeat_at=NOW(6) "
                                           "WHERE id=%s AND (coordinator IS NULL OR coordinator=%s OR coordinator=%s "
                                           "OR heartbeat_at IS NULL OR heartbeat_at < NOW(6) - INTERVAL %s SECOND)",
                                (owner, migration_id, owner, dead_owner, stale_s)))

    def heartbeat(self, migration_id: int, owner: str) -> bool:
        """Renew our lease; False if another coordinator has taken over."""
        return bool(query_count(self.conn, f"UPDATE {self.t('migrations')} SET heartbeat_at=NOW(6) "
                                           "WHERE id=%s AND coordinator=%s", (migration_id, owner)))

    def release_coordinator(self, migration_id: int, owner: str) -> None:
        query(self.conn, f"UPDATE {self.t('migrations')} SET coordinator=NULL WHERE id=%s AND coordinator=%s",
              (migration_id, owner))

    def live_coordinator(self, migration_id: int, stale_s: float) -> tuple[str, float] | None:
        """(owner, seconds since its heartbeat) of a coordinator whose heartbeat is fresh, else None."""
        rows = query(self.conn, f"SELECT coordinator, TIMESTAMPDIFF(MICROSECOND, heartbeat_at, NOW(6)) / 1e6 "
                                f"FROM {self.t('migrations')} WHERE id=%s AND coordinator IS NOT NULL "
                                "AND heartbeat_at >= NOW(6) - INTERVAL %s SECOND", (migration_id, stale_s))
        return (rows[0][0], float(rows[0][1])) if rows else None

    def update(self, migration_id: int, **values: Any) -> None:
        """Set columns of the migration row (stage, status, error, ...)."""
        if "options" in values:
            values["options"] = json.dumps(values["options"])
        if values.get("status") in FINISHED:
            values["active_key"] = None
        sets = ", ".join(f"{quote_ident(k)}=%s" for k in values)
        query(self.conn, f"UPDATE {self.t('migrations')} SET {sets} WHERE id=%s", (*values.values(), migration_id))

    def enter_stage(self, migration_id: int, stage: Stage, **values: Any) -> None:
        """The one way into a stage: recorded with `values` in one committed update, then logged."""
        self.update(migration_id, stage=stage, **values)
        log_event(log, "stage", migration=migration_id, stage=str(stage))

    def delete(self, migration_id: int) -> None:
        """Remove every metadata row of a migration (used when init fails: nothing is left)."""
        self.delete_work(migration_id)
        query(self.conn, f"DELETE FROM {self.t('migrations')} WHERE id=%s", (migration_id,))

    def delete_work(self, migration_id: int) -> None:
        """Remove the chunk plan and fence table of a migration, keeping its row as history."""
        query(self.conn, f"DELETE FROM {self.t('chunks')} WHERE migration_id=%s", (migration_id,))
        query(self.conn, f"DROP TABLE IF EXISTS {self.t(f'fence_{migration_id}')}")

    # chunks -------------------------------------------------------------------------------------
    def add_chunks(self, migration_id: int, ranges: list[tuple[int, int]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT IGNORE INTO {self.t('chunks')} "
                            "(migration_id, chunk_no, start_pk, end_pk, next_pk) VALUES (%s,%s,%s,%s,%s)",
                            [(migration_id, n, lo, hi, lo) for n, (lo, hi) in enumerate(ranges)])

    def chunks(self, migration_id: int) -> list[Chunk]:
        """Every chunk of the migration's copy plan, in key order."""
        return [Chunk(n, int(start), int(end), int(next_pk), int(rows), bool(done))
                for n, start, end, next_pk, rows, done in
                query(self.conn, f"SELECT chunk_no, start_pk, end_pk, next_pk, rows_copied, done "
                                 f"FROM {self.t('chunks')} WHERE migration_id=%s ORDER BY chunk_no", (migration_id,))]

    def copy_progress(self, migration_id: int) -> tuple[int, int, int]:
        """(rows copied, chunks done, chunks total)."""
        row = query(self.conn, f"SELECT COALESCE(SUM(rows_copied),0), COALESCE(SUM(done),0), COUNT(*) "
                               f"FROM {self.t('chunks')} WHERE migration_id=%s", (migration_id,))[0]
        return int(row[0]), int(row[1]), int(row[2])

    # fence ----------------------------------------------------------------------------------------
    def create_fence_table(self, migration_id: int, fence_ids: list[int]) -> None:
        """The table whose rows, captured with the source table, mark positions in every partition."""
        table = self.t(f"fence_{migration_id}")
        query(self.conn, f"CREATE TABLE IF NOT EXISTS {table} ({quote_ident(FENCE_KEY_COLUMN)} BIGINT NOT NULL "
                         "PRIMARY KEY, token VARCHAR(64) NOT NULL) ENGINE=InnoDB")
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT IGNORE INTO {table} VALUES (%s, '')", [(i,) for i in fence_ids])

    def fence_ids(self, migration_id: int) -> list[int]:
        return [r[0] for r in query(self.conn, f"SELECT {quote_ident(FENCE_KEY_COLUMN)} FROM "
                                               f"{self.t(f'fence_{migration_id}')} ORDER BY 1")]

    def write_fence(self, migration_id: int, token: str) -> None:
        """Stamp every fence row with `token` in one autocommitted statement."""
        query(self.conn, f"UPDATE {self.t(f'fence_{migration_id}')} SET token=%s", (token,))


def _key(value: Any) -> int | None:
    """A key position as read from the metadata schema (DECIMAL) as an int."""
    return None if value is None else int(value)


# the source table's definition ------------------------------------------------------------------
class SourceChanged(Exception):
    """The source table's definition changed since init: the new table no longer means the ALTER of it."""

    user_facing = True


def table_definition(conn: pymysql.connections.Connection, database: str,
                     table: str) -> dict[str, dict[str, str]]:
    """Columns (type, nullability, default, extra, collation, generation), keys and triggers of a table.

    Recorded at init and compared until the swap: a column added to the source during the migration
    would not exist in the new table, a dropped or retyped one would break or bend the copy, a trigger
    would stay behind on the original.
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
    triggers = {name: f"{timing} {event}" for name, timing, event in query(conn, """
            SELECT TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION FROM information_schema.TRIGGERS
            WHERE EVENT_OBJECT_SCHEMA=%s AND EVENT_OBJECT_TABLE=%s ORDER BY TRIGGER_NAME""", (database, table))}
    return {"columns": columns,
            "keys": {name: ("UNIQUE " if k["unique"] else "") + f"({', '.join(k['columns'])})"
                     for name, k in keys.items()},
            "triggers": triggers}


def definition_changes(recorded: dict[str, dict[str, str]], current: dict[str, dict[str, str]]) -> list[str]:
    """What differs between two table definitions, one phrase per column or key."""
    if not current["columns"]:
        return ["the table is gone"]
    changes = []
    for kind in ("columns", "keys", "triggers"):
        before, now = recorded.get(kind, {}), current.get(kind, {})
        noun = kind[:-1]
        changes += [f"{noun} {n} added ({now[n]})" for n in now if n not in before]
        changes += [f"{noun} {n} dropped" for n in before if n not in now]
        changes += [f"{noun} {n} changed from {before[n]} to {now[n]}" for n in now
                    if n in before and before[n] != now[n]]
    return changes


def check_definition(conn: pymysql.connections.Connection, migration: Migration) -> None:
    """Raise SourceChanged if the source table's definition differs from the one recorded at init."""
    recorded = migration.options.get(DEFINITION_OPTION)
    if recorded is None:   # a migration started before definitions were recorded
        return
    changes = definition_changes(recorded, table_definition(conn, migration.database, migration.table))
    if changes:
        name = f"{migration.database}.{migration.table}"
        raise SourceChanged(f"table {name} was altered during the migration ({'; '.join(changes)}): stopping with "
                            f"the original table untouched; run `stream-osc abort --table {name}` and start "
                            "again against its new definition")
