"""A moved table's AUTO_INCREMENT counter: raised on the target before the lock, only verified under it.

Why not carry it under the lock, as the one-server swap does: `ALTER TABLE … AUTO_INCREMENT` needs the target
table's exclusive metadata lock, and any open transaction that read the target table (a dump, a client in
manual-commit mode) makes it wait, while every application write to the locked source waits behind it (measured:
27.5 s). So the counter is raised before the lock, to the source's counter plus a margin for the ids handed out
until the lock, by a statement that queues at most --lock-wait-timeout; under the lock it is only read on both
servers. Read exactly: MySQL caches information_schema table statistics, the counter among them, unless the
session sets information_schema_stats_expiry=0 (each session: the target's too); MariaDB reads it live.
A source that handed out more ids than the margin since fails that attempt (the source takes writes again), and
the next raises with a margin MARGIN_GROWTH times larger.
"""
from __future__ import annotations

import math

import pymysql

from core.db import qualified, query, scalar

FIRST_MARGIN = 1_000   # ids the source may hand out between the raise and the lock (a gap in ids is harmless)
MARGIN_GROWTH = 10


def read_counter(conn: pymysql.connections.Connection, database: str, table: str, is_mariadb: bool) -> int | None:
    """The table's AUTO_INCREMENT counter as the server holds it now (None: no such column)."""
    if not is_mariadb:
        query(conn, "SET SESSION information_schema_stats_expiry = 0")
    value = scalar(conn, "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s "
                         "AND TABLE_NAME=%s", (database, table))
    return int(value) if value is not None else None


def raise_to(source: int | None, target: int | None, margin: int) -> int | None:
    """The value to raise the target's counter to before the lock, or None when there is no counter or the
    target's is already `margin` ahead of the source's."""
    if source is None or target is None or target >= source + margin:
        return None
    return source + margin


def short_of(source: int | None, target: int | None) -> bool:
    """Under the lock: whether the target would hand out an id the source already handed out."""
    return source is not None and target is not None and target < source


def raise_counter(conn: pymysql.connections.Connection, database: str, table: str, value: int, is_mariadb: bool,
                  wait_s: float) -> None:
    """ALTER TABLE … AUTO_INCREMENT = value, queueing at most `wait_s` for the table's metadata lock (MariaDB: any
    fraction; MySQL: whole seconds, at least one). The caller's session is closed after the attempt."""
    alter = f"ALTER TABLE {qualified(database, table)} AUTO_INCREMENT = {int(value)}"
    if is_mariadb:
        query(conn, f"SET STATEMENT max_statement_time={wait_s:.3f} FOR {alter}")
    else:
        query(conn, "SET SESSION lock_wait_timeout = %s", (max(1, math.ceil(wait_s)),))
        query(conn, alter)
