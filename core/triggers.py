"""The source table's triggers: recorded at init, moved to the new table at the swap, put back wherever a move stopped.

Trigger names are unique per schema, so a trigger can only be created on the new table once the original of that name
is dropped from the source. Between the two, the source would take writes that run without it. The move therefore
first creates guard triggers on the source (BEFORE INSERT/UPDATE/DELETE, each failing the statement with SQLSTATE
45000 and a message naming the migration), then drops the originals, then creates them on the new table. All of it
runs in the cutover's lock session, which holds both tables WRITE (the only lock under which MariaDB allows trigger
DDL there), after the last drain, so the tool's own writes into the new table never fire them. A process killed at
any step leaves the source either with its complete set, or with guards that make every write fail loudly until
`settle_triggers` (resume, the next attempt's roll-back, abort, cleanup) puts exactly one complete set back on the
table under the original's name. The argument, step by step: docs/cutover.md ("Triggers move at the swap").
"""
from __future__ import annotations

import codecs
import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import pymysql

from core.db import qualified, query, quote_ident, scalar
from core.spec import MigrationSpec

TRIGGERS_OPTION = "source_triggers"   # the definitions init read, in the migration's options
GUARD_EVENTS = (("INSERT", "bi"), ("UPDATE", "bu"), ("DELETE", "bd"))
GUARD_PREFIX = "stream_osc_guard_"
MESSAGE_LIMIT = 128                   # SIGNAL's MESSAGE_TEXT
# character_set_client names whose Python codec differs (MySQL's latin1 is Windows-1252)
_CODECS = {"utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "latin1": "cp1252", "binary": "latin-1"}


@dataclass(frozen=True)
class Trigger:
    """One trigger as the server keeps it: what re-creating it elsewhere needs, and its place among its table's."""

    name: str
    timing: str                 # BEFORE / AFTER
    event: str                  # INSERT / UPDATE / DELETE
    order: int                  # ACTION_ORDER among the table's triggers of the same timing and event
    body: str
    definer: str                # user@host (a role: its name alone)
    sql_mode: str
    character_set_client: str
    collation_connection: str
    database_collation: str     # the schema's default when it was made; a new one gets the schema's current one

    def signature(self) -> str:
        """What the source check compares: timing, event, place and everything the body is run with."""
        body = hashlib.sha1(self.body.encode("utf-8", "surrogateescape")).hexdigest()[:12]
        return (f"{self.timing} {self.event} #{self.order}, definer {self.definer}, sql_mode {self.sql_mode!r}, "
                f"{self.character_set_client}/{self.collation_connection}, body {body}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_triggers(conn: pymysql.connections.Connection, database: str, table: str) -> list[Trigger]:
    """The table's triggers in firing order (per timing and event): the order they are created again in."""
    rows = query(conn, """SELECT TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, ACTION_ORDER, ACTION_STATEMENT,
            DEFINER, SQL_MODE, CHARACTER_SET_CLIENT, COLLATION_CONNECTION, DATABASE_COLLATION
            FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA=%s AND EVENT_OBJECT_TABLE=%s
            ORDER BY EVENT_MANIPULATION, ACTION_TIMING, ACTION_ORDER""", (database, table))
    return [Trigger(str(r[0]), str(r[1]), str(r[2]), int(r[3] or 0), str(r[4]), str(r[5]), str(r[6]), str(r[7]),
                    str(r[8]), str(r[9])) for r in rows]


def recorded_triggers(options: dict[str, Any]) -> list[Trigger]:
    """The triggers init recorded with the migration (none for a migration started before they were)."""
    return [Trigger(**entry) for entry in options.get(TRIGGERS_OPTION) or []]


def definer_clause(definer: str) -> str:
    """DEFINER=`user`@`host` from information_schema's user@host (a host has no '@'; a role has no host)."""
    user, at, host = definer.rpartition("@")
    if not at:
        return f"DEFINER={quote_ident(definer)}"
    return f"DEFINER={quote_ident(user)}@{quote_ident(host)}"


def encoding_of(trigger: Trigger) -> str | None:
    """The Python codec that writes the body as its character_set_client reads it; None when there is none here."""
    name = _CODECS.get(trigger.character_set_client.lower(), trigger.character_set_client.lower())
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def create_statement(trigger: Trigger, database: str, table: str, name: str | None = None) -> str:
    """CREATE TRIGGER of `trigger` on database.table (under `name`, else its own), as its definer. No FOLLOWS or
    PRECEDES: created in their order, each new one is placed last among its timing and event."""
    return (f"CREATE {definer_clause(trigger.definer)} TRIGGER {qualified(database, name or trigger.name)} "
            f"{trigger.timing} {trigger.event} ON {qualified(database, table)} FOR EACH ROW {trigger.body}")


def create_trigger(conn: pymysql.connections.Connection, trigger: Trigger, database: str, table: str,
                   name: str | None = None) -> None:
    """Create `trigger` on database.table with the sql_mode and character set it was made with (they decide how
    its body parses and compares), the session's own settings put back after."""
    saved = query(conn, "SELECT @@SESSION.sql_mode, @@SESSION.character_set_client, @@SESSION.collation_connection")[0]
    encoding = encoding_of(trigger) or "utf-8"
    query(conn, "SET SESSION sql_mode=%s, character_set_client=%s, collation_connection=%s",
          (trigger.sql_mode, trigger.character_set_client, trigger.collation_connection))
    try:
        query(conn, create_statement(trigger, database, table, name).encode(encoding))   # type: ignore[arg-type]
    finally:
        query(conn, "SET SESSION sql_mode=%s, character_set_client=%s, collation_connection=%s", saved)


def guard_names(migration_id: int) -> list[str]:
    """The guard triggers' names: schema-unique, recognisable, and far below the 64-character limit."""
    return [f"{GUARD_PREFIX}{migration_id}_{suffix}" for _, suffix in GUARD_EVENTS]


def guard_message(migration_id: int, database: str, table: str) -> str:
    """What a write to the table meets while its triggers are between the two tables."""
    text = (f"stream-osc migration {migration_id} is moving the triggers of {database}.{table}: "
            "run stream-osc resume or abort")
    return text[:MESSAGE_LIMIT]


def create_guards(conn: pymysql.connections.Connection, database: str, table: str, migration_id: int) -> None:
    """A BEFORE trigger per event that fails every write to the table, placed before its own BEFORE triggers (none
    of their effects happen first); one already there (a move tried before) is kept."""
    on_table = read_triggers(conn, database, table)
    present = {t.name for t in on_table}
    message = guard_message(migration_id, database, table).replace("\\", "\\\\").replace("'", "''")
    first = {t.event: t.name for t in reversed(on_table) if t.timing == "BEFORE"}
    for (event, _), name in zip(GUARD_EVENTS, guard_names(migration_id)):
        if name in present:
            continue
        place = f"PRECEDES {quote_ident(first[event])} " if event in first else ""
        query(conn, f"CREATE TRIGGER {qualified(database, name)} BEFORE {event} ON {qualified(database, table)} "
                    f"FOR EACH ROW {place}SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{message}'")


def drop_guards(conn: pymysql.connections.Connection, spec: MigrationSpec, migration_id: int) -> bool:
    """Drop the migration's guards from the table or the old table (which takes them at the swap); True if any was
    there."""
    guards = set(guard_names(migration_id))
    found = [name for name in placed(conn, spec) if name in guards]
    for name in found:
        query(conn, f"DROP TRIGGER {qualified(spec.database, name)}")
    return bool(found)


def placed(conn: pymysql.connections.Connection, spec: MigrationSpec) -> dict[str, str]:
    """{trigger: its table} of the triggers on the table, the new table and the old table: the only places a move
    puts one. (Read table by table: information_schema opens only the named table's triggers then.)"""
    return {t.name: name for name in (spec.table, spec.new_table, spec.old_table)
            for t in read_triggers(conn, spec.database, name)}


def reached(step: str) -> None:
    """A named step of the trigger move: nothing happens here; tests stop the process at one (a real SIGKILL)."""


def move_triggers(conn: pymysql.connections.Connection, database: str, table: str, new_table: str,
                  triggers: list[Trigger], migration_id: int) -> None:
    """Under the cutover's lock (both tables WRITE): guards on the table, the originals dropped from it, then created
    on the new table in their order. Every step is one statement that commits by itself."""
    if not triggers:
        return
    create_guards(conn, database, table, migration_id)
    reached("guarded")
    for trigger in triggers:
        query(conn, f"DROP TRIGGER {qualified(database, trigger.name)}")
        reached(f"dropped {trigger.name}")
    for trigger in triggers:
        create_trigger(conn, trigger, database, new_table)
        reached(f"created {trigger.name}")


def complete_on(conn: pymysql.connections.Connection, database: str, table: str, triggers: list[Trigger]) -> bool:
    """Whether database.table has exactly the recorded triggers, in their order (guards aside: one placed before
    them shifts their ACTION_ORDER, not their order among themselves)."""
    now = [(t.name, t.timing, t.event) for t in read_triggers(conn, database, table)
           if not t.name.startswith(GUARD_PREFIX)]
    return now == [(t.name, t.timing, t.event) for t in triggers]


SETTLE_LOCK_WAIT_S = 10   # outside the cutover's lock each trigger DDL waits at most this for the table


def settle_triggers(conn: pymysql.connections.Connection, spec: MigrationSpec, triggers: list[Trigger],
                    migration_id: int) -> bool:
    """_settle, each of its statements waiting at most SETTLE_LOCK_WAIT_S for the table's metadata lock (with
    statements of the application queued behind it), the session's own limit put back after. Nothing to do for a
    migration that recorded no trigger: it never makes a guard."""
    if not triggers:
        return False
    saved = int(query(conn, "SELECT @@SESSION.lock_wait_timeout")[0][0])
    query(conn, f"SET SESSION lock_wait_timeout = {min(saved, SETTLE_LOCK_WAIT_S)}")
    try:
        return _settle(conn, spec, triggers, migration_id)
    finally:
        query(conn, f"SET SESSION lock_wait_timeout = {saved}")


def _settle(conn: pymysql.connections.Connection, spec: MigrationSpec, triggers: list[Trigger],
            migration_id: int) -> bool:
    """Leave exactly the recorded triggers on the table named as the original (the original, or after a swap the new
    table, which took them with it) and no guard; True if anything had to change.

    Where the set is incomplete or out of order, the guards go on first (a write meanwhile fails, never runs without
    the triggers), every recorded name is dropped where a move may have left it (the table, the new table), and the
    set is created on the table in its order; the guards go last. A recorded name found on another table is not
    touched: its CREATE then fails, and the guards stay. Run under the cutover's lock by a roll-back, and outside it
    by resume, abort and cleanup."""
    database, table = spec.database, spec.table
    exists = scalar(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                    (database, table))
    if not exists or complete_on(conn, database, table, triggers):
        return drop_guards(conn, spec, migration_id)
    create_guards(conn, database, table, migration_id)
    where = placed(conn, spec)
    for trigger in triggers:
        if where.get(trigger.name) in (table, spec.new_table):
            query(conn, f"DROP TRIGGER {qualified(database, trigger.name)}")
    for trigger in triggers:
        create_trigger(conn, trigger, database, table)
    drop_guards(conn, spec, migration_id)
    return True
