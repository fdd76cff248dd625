"""Re-copy rows by primary key: make the new table match the source's current state (invariant 2)."""
from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import TypeVar

import pymysql

from applier.table import TablePair
from migration.db import query

T = TypeVar("T")
RETRYABLE = {1205, 1213}   # lock wait timeout, deadlock


def recopy_keys(conn: pymysql.connections.Connection, pair: TablePair, pks: Collection[int],
                in_transaction: bool = True) -> tuple[int, int]:
    """Upsert present rows (REPLACE, locking read) and delete absent ones; returns (upserted, deleted).

    The locking read comes first and alone: it waits for any writer of these keys to commit (a change
    reaches the binlog before a plain read can see it) and locks exactly the rows it returns (the
    session is READ COMMITTED). The REPLACE … SELECT then reads those locked rows without locking
    again: a second, differently-moded lock request on a row an application UPDATE already waits for
    would deadlock with it, and the application's statement would be the victim.

    With in_transaction=False the statements run one by one (for the session that holds LOCK TABLES,
    where BEGIN would release the locks).
    """
    if not pks:
        return 0, 0
    keys = sorted(set(pks))
    marks = ", ".join(["%s"] * len(keys))
    if in_transaction:
        conn.begin()
    try:
        present = {r[0] for r in query(conn, f"SELECT {pair.pk_ident} FROM {pair.source_name} "
                                             f"WHERE {pair.pk_ident} IN ({marks}) LOCK IN SHARE MODE", keys)}
        upserted = deleted = 0
        if present:
            pmarks = ", ".join(["%s"] * len(present))
            with conn.cursor() as cur:
                cur.execute(f"REPLACE INTO {pair.target_name} ({pair.target_column_list}) SELECT {pair.source_column_list} "
                            f"FROM {pair.source_name} WHERE {pair.pk_ident} IN ({pmarks})",
                            sorted(present))
            upserted = len(present)
        absent = [k for k in keys if k not in present]
        if absent:
            amarks = ", ".join(["%s"] * len(absent))
            with conn.cursor() as cur:
                deleted = cur.execute(f"DELETE FROM {pair.target_name} WHERE {pair.pk_ident} IN ({amarks})", absent)
        if in_transaction:
            conn.commit()
        return upserted, deleted
    except BaseException:
        if in_transaction:
            conn.rollback()
        raise


def with_retry(action: Callable[[], T], attempts: int = 20) -> T:
    """Run a DB action, retrying on deadlock / lock wait timeout with a short backoff."""
    for attempt in range(attempts):
        try:
            return action()
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in RETRYABLE or attempt == attempts - 1:
                raise
            time.sleep(min(0.05 * 2 ** attempt, 2.0))
    raise AssertionError("unreachable")
