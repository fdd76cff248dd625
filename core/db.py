"""Database connections and server facts (MariaDB vs MySQL)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import pymysql
import pymysql.cursors

from core.endpoints import MySQLAddress


class DatabaseUnreachable(Exception):
    """The server cannot be reached or refused the login."""

    user_facing = True


def connect(addr: MySQLAddress, database: str | None = None, autocommit: bool = True,
            read_timeout: float | None = None) -> pymysql.connections.Connection:
    """Open a connection; errors name host:port, never the password."""
    try:
        conn = pymysql.connect(
            host=addr.host, port=addr.port, user=addr.user, password=addr.password,
            database=database, autocommit=autocommit, charset="utf8mb4",
            connect_timeout=10, read_timeout=read_timeout,
        )
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else "?"
        raise DatabaseUnreachable(
            f"cannot connect to MySQL at {addr.where()} as {addr.user!r} (error {code})") from None
    for statement in SESSION_SETUP:
        query(conn, statement)
    return conn


# Every session of the tool:
# - READ COMMITTED: a locking read locks only the rows it returns (no gap or next-key locks that
#   application writes would queue behind, or deadlock with), and INSERT/REPLACE … SELECT reads the
#   source without locks (the copy is made right by the appliers; the appliers lock first, see
#   applier/README.md). Sessions that need a snapshot set REPEATABLE READ themselves.
# - strict mode: a value the new table cannot hold is an error, as in the server's own ALTER, never a
#   silent truncation; NO_AUTO_VALUE_ON_ZERO: a row whose AUTO_INCREMENT key is 0 is copied as 0.
# - UTC: a TIMESTAMP key read back or taken from a change event (Debezium sends UTC) names one instant;
#   in a zone with daylight saving an hour of local times is ambiguous. (Like gh-ost's sessions, so an
#   ALTER turning TIMESTAMP into DATETIME writes the UTC time.)
SESSION_SETUP = (
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@GLOBAL.sql_mode, ''), 'STRICT_ALL_TABLES', "
    "'NO_AUTO_VALUE_ON_ZERO')",
    "SET SESSION time_zone = '+00:00'",
)


def quote_ident(name: str) -> str:
    """Backtick-quote an identifier."""
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    """`db`.`table`."""
    return f"{quote_ident(db)}.{quote_ident(table)}"


def query(conn: pymysql.connections.Connection, sql: str, args: Iterable[Any] | None = None) -> list[tuple]:
    """Run a statement and return all rows."""
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def query_count(conn: pymysql.connections.Connection, sql: str, args: Iterable[Any] | None = None) -> int:
    """Run a statement and return the number of rows it changed."""
    with conn.cursor() as cur:
        return cur.execute(sql, args)


def scalar(conn: pymysql.connections.Connection, sql: str, args: Iterable[Any] | None = None) -> Any:
    """First column of the first row, or None."""
    rows = query(conn, sql, args)
    return rows[0][0] if rows else None


@dataclass(frozen=True)
class ServerInfo:
    """What kind of server this is and the settings that matter to a migration."""

    version: str
    is_mariadb: bool
    binlog_format: str
    binlog_row_image: str
    log_bin: bool
    autoinc_lock_mode: int

    @property
    def flavor(self) -> str:
        return "mariadb" if self.is_mariadb else "mysql"

    @classmethod
    def read(cls, conn: pymysql.connections.Connection) -> "ServerInfo":
        version = scalar(conn, "SELECT VERSION()")
        variables = dict(query(conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                                     "('binlog_format','binlog_row_image','log_bin','innodb_autoinc_lock_mode')"))
        return cls(
            version=version,
            is_mariadb="mariadb" in version.lower(),
            binlog_format=variables.get("binlog_format", ""),
            binlog_row_image=variables.get("binlog_row_image", ""),
            log_bin=variables.get("log_bin", "OFF") == "ON",
            autoinc_lock_mode=int(variables.get("innodb_autoinc_lock_mode", 1)),
        )
