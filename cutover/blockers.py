"""Sessions that hold, or would hold up, the metadata lock of a table: looked for before the tool asks for it.

A lock request that queues behind a long transaction blocks every later statement on the table,
although the tool "only waits" (docs/cutover.md, "Look before locking"). So the tool asks the
server who holds the table first, and asks for the lock only when nobody has held it for long.

Where it looks, best first:
- MariaDB with the `metadata_lock_info` plugin: `information_schema.METADATA_LOCK_INFO`, the granted
  metadata locks on the table (exact);
- MySQL: `performance_schema.metadata_locks` (exact while the `wait/lock/metadata/sql/mdl` instrument
  is enabled, the default in 8.0);
- otherwise open InnoDB transactions (`INNODB_TRX` with `PROCESSLIST`). A transaction does not say
  which tables it read, so a transaction open for a while is a suspect when its running statement
  names the table or its session's default schema is the table's schema; a running statement that
  names the table is one too. Sessions elsewhere are not suspects: a missed blocker costs only one
  short lock try (cutover/short_lock.py), a false one would hold the cutover up for nothing.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

import pymysql

from core.db import query, scalar
from core.sql_names import names_table

MIN_AGE_S = 1.0            # an application statement holds the lock for milliseconds; a second is a long holder
TRX_START_RESOLUTION_S = 1.0   # INNODB_TRX.trx_started is a DATETIME: whole seconds
STATEMENT_CHARS = 200      # of a blocker's statement kept for logs and `status`
IGNORED_USERS = ("system user", "event_scheduler")
IGNORED_COMMANDS = ("Binlog Dump", "Binlog Dump GTID", "Daemon", "Killed")
SOURCE, TARGET = "source", "target"   # the server a holder is on


class Detection(StrEnum):
    """Where the blockers are read from."""

    METADATA_LOCK_INFO = "metadata_lock_info"    # MariaDB plugin
    PERFORMANCE_SCHEMA = "performance_schema"    # MySQL
    TRANSACTIONS = "transactions"                # INNODB_TRX + PROCESSLIST, either server


@dataclass(frozen=True)
class Blocker:
    """A session holding (or suspected of holding) the table's metadata lock for `seconds`."""

    connection_id: int
    user: str
    host: str
    seconds: float
    statement: str | None        # the running statement; None when idle inside a transaction
    rows_modified: int | None    # INNODB_TRX.trx_rows_modified of its open transaction, if it has one
    transaction: str | None = None   # that transaction as "trx_id@trx_started" (a read-only one's id may be 0)
    server: str = SOURCE             # SOURCE, or TARGET: the new table's server on a move

    @property
    def identity(self) -> tuple[int, str | None, str]:
        """The same holder across looks: its connection and its transaction (a new transaction of the same
        connection is a new holder), on its server (connection ids repeat across servers)."""
        return self.connection_id, self.transaction, self.server

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line for progress output: id, user@host, age, statement."""
        what = f'"{self.statement}"' if self.statement else "idle in transaction"
        where = " on the target server" if self.server == TARGET else ""
        return f"connection {self.connection_id}{where} ({self.user}@{self.host}, {self.seconds:.0f} s): {what}"


def detection(conn: pymysql.connections.Connection, is_mariadb: bool) -> Detection:
    """The best source this server offers (checked each time: a plugin may be loaded meanwhile)."""
    if is_mariadb:
        loaded = scalar(conn, "SELECT PLUGIN_STATUS FROM information_schema.PLUGINS "
                              "WHERE PLUGIN_NAME='METADATA_LOCK_INFO'")
        return Detection.METADATA_LOCK_INFO if loaded == "ACTIVE" else Detection.TRANSACTIONS
    try:
        enabled = scalar(conn, "SELECT ENABLED FROM performance_schema.setup_instruments "
                               "WHERE NAME='wait/lock/metadata/sql/mdl'")
    except pymysql.err.MySQLError:   # performance_schema off or not readable
        enabled = None
    return Detection.PERFORMANCE_SCHEMA if enabled == "YES" else Detection.TRANSACTIONS


def find_blockers(conn: pymysql.connections.Connection, database: str, table: str, is_mariadb: bool,
                  method: Detection | None = None, server: str = SOURCE) -> list[Blocker]:
    """Sessions (other than `conn`'s) that have held the table's metadata lock for at least MIN_AGE_S,
    oldest first, named as on `server`; `method` overrides the best available source (tests)."""
    method = method or detection(conn, is_mariadb)
    if method == Detection.METADATA_LOCK_INFO:
        rows = _metadata_lock_info(conn, database, table)
    elif method == Detection.PERFORMANCE_SCHEMA:
        rows = _performance_schema(conn, database, table)
    else:
        rows = [r for r in _transactions(conn, is_mariadb) if suspected(r, database, table)]
    found: dict[int, Blocker] = {}
    for blocker in (_blocker(r, server) for r in rows if _counts(r)):   # a session may hold several locks
        known = found.get(blocker.connection_id)
        if known is None or blocker.seconds > known.seconds:
            found[blocker.connection_id] = blocker
    return sorted(found.values(), key=lambda b: -b.seconds)


@dataclass(frozen=True)
class Session:
    """What the server says about one session that may hold the table."""

    connection_id: int
    user: str
    host: str
    command: str
    seconds: float
    statement: str | None
    schema: str | None
    in_transaction: bool
    rows_modified: int | None
    transaction: str | None = None


def suspected(session: Session, database: str, table: str) -> bool:
    """The fallback's rule: a running statement naming the table, or an open transaction whose statement
    names the table or whose session works in the table's schema."""
    if names_table(session.statement, database, table, session.schema):
        return True
    return session.in_transaction and (session.schema or "").lower() == database.lower()


def _counts(session: Session) -> bool:
    return (session.seconds >= MIN_AGE_S and session.user not in IGNORED_USERS
            and session.command not in IGNORED_COMMANDS)


def _blocker(session: Session, server: str) -> Blocker:
    statement = " ".join(session.statement.split())[:STATEMENT_CHARS] if session.statement else None
    return Blocker(session.connection_id, session.user or "", session.host or "", round(session.seconds, 1),
                   statement if session.command != "Sleep" else None, session.rows_modified, session.transaction,
                   server)


def _age(command_s: float | None, transaction_s: float | None) -> float:
    """At least how long a session has held what it holds: its current command (a running statement, or
    the idle time since its last one), or its open transaction, whose start the server keeps in whole
    seconds (so a second is taken off: a transaction begun 10 ms before a second boundary is not 1 s old)."""
    return max(float(command_s or 0), float(transaction_s or 0) - TRX_START_RESOLUTION_S, 0.0)


# The open transaction of a session (INNODB_TRX as x): its age in seconds, rows changed, identity.
TRX_COLUMNS = ("TIMESTAMPDIFF(MICROSECOND, x.trx_started, NOW(6)) / 1e6, x.trx_rows_modified, "
               "CONCAT(x.trx_id, '@', x.trx_started)")


def _session(connection_id: object, user: str, host: str, command: str | None, command_s: float | None,
             info: str | None, db: str | None, trx_s: float | None, modified: object, trx: object) -> Session:
    """A Session from a row of PROCESSLIST-like columns followed by TRX_COLUMNS."""
    return Session(int(connection_id), user, host, command or "", _age(command_s, trx_s), info, db,
                   trx_s is not None, _int(modified), _text(trx))


def _metadata_lock_info(conn: pymysql.connections.Connection, database: str, table: str) -> list[Session]:
    rows = query(conn, f"""
        SELECT p.ID, p.USER, p.HOST, p.COMMAND, m.LOCK_TIME_MS / 1000, p.TIME_MS / 1000, p.INFO, p.DB,
               {TRX_COLUMNS}
        FROM information_schema.METADATA_LOCK_INFO m
        JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID
        LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = m.THREAD_ID
        WHERE m.LOCK_TYPE = 'Table metadata lock' AND m.TABLE_SCHEMA = %s AND m.TABLE_NAME = %s
          AND m.THREAD_ID <> CONNECTION_ID()""", (database, table))
    return [Session(int(i), user, host, command,
                    float(held) if held is not None else _age(command_s, trx_s),
                    info, db, trx_s is not None, _int(modified), _text(trx))
            for i, user, host, command, held, command_s, info, db, trx_s, modified, trx in rows]


def _performance_schema(conn: pymysql.connections.Connection, database: str, table: str) -> list[Session]:
    rows = query(conn, f"""
        SELECT t.PROCESSLIST_ID, t.PROCESSLIST_USER, t.PROCESSLIST_HOST, t.PROCESSLIST_COMMAND,
               t.PROCESSLIST_TIME, t.PROCESSLIST_INFO, t.PROCESSLIST_DB,
               {TRX_COLUMNS}
        FROM performance_schema.metadata_locks m
        JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID
        LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = t.PROCESSLIST_ID
        WHERE m.OBJECT_TYPE = 'TABLE' AND m.OBJECT_SCHEMA = %s AND m.OBJECT_NAME = %s
          AND m.LOCK_STATUS = 'GRANTED' AND t.PROCESSLIST_ID IS NOT NULL AND t.PROCESSLIST_ID <> CONNECTION_ID()""",
        (database, table))
    return [_session(*row) for row in rows]


def _transactions(conn: pymysql.connections.Connection, is_mariadb: bool) -> list[Session]:
    command_age = "p.TIME_MS / 1000" if is_mariadb else "p.TIME"
    rows = query(conn, f"""
        SELECT p.ID, p.USER, p.HOST, p.COMMAND, {command_age}, p.INFO, p.DB,
               {TRX_COLUMNS}
        FROM information_schema.PROCESSLIST p
        LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID
        WHERE p.ID <> CONNECTION_ID() AND (x.trx_id IS NOT NULL OR p.COMMAND <> 'Sleep')""")
    return [_session(*row) for row in rows]


def _int(value: object) -> int | None:
    return int(value) if value is not None else None


def _text(value: object) -> str | None:
    return str(value) if value is not None else None
