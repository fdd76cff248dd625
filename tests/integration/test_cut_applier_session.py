"""An applier whose link to the database is cut while its locking read waits for an application transaction
leaves its server session behind: the server notices a vanished client only when it next reads from it, not while
a statement waits for a lock. That orphaned session keeps the share locks its read already took on the
application's rows, and the application's writes to them wait until its own lock wait ends."""
from __future__ import annotations

import dataclasses
import threading
import time

import pymysql
import pytest

from applier.apply import APPLIER_LOCK_WAIT_S, applier_session
from applier.recopy import recopy_keys
from core.db import connect, query
from core.endpoints import MySQLAddress
from core.table import load_pair
from stack.process import free_ports
from tests.integration.helpers import wait_for
from tests.integration.tcp_relay import TcpRelay

pytestmark = pytest.mark.integration

DB = "cut_applier"
APPLICATION_LOCK_WAIT_S = 20   # the application's own patience: the server's default (50 s) is longer


@dataclasses.dataclass
class RelayedContext:
    """Stands in for a RunContext whose database is reached through the relay."""

    mysql: MySQLAddress

    def db(self, autocommit: bool = True) -> pymysql.connections.Connection:
        return connect(self.mysql, autocommit=autocommit)


def waiting_for_a_row_lock(conn, thread_id: int) -> bool:
    return bool(query(conn, "SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id=%s "
                            "AND trx_state='LOCK WAIT'", (thread_id,)))


def test_applier_cut_while_waiting_for_a_row_lock_releases_the_applications_rows_within_seconds(endpoints, conn):
    query(conn, f"DROP TABLE IF EXISTS {DB}.t, {DB}.t_osc_new")
    query(conn, f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v INT NOT NULL)")
    query(conn, f"INSERT INTO {DB}.t VALUES " + ", ".join(f"({i}, 0)" for i in range(1, 11)))
    query(conn, f"CREATE TABLE {DB}.t_osc_new LIKE {DB}.t")
    pair = load_pair(conn, DB, "t", "t_osc_new")
    relay = TcpRelay(free_ports(1)[0], (endpoints.mysql.host, endpoints.mysql.port))
    relay.restore()
    holder = connect(endpoints.mysql, autocommit=False)
    writer = connect(endpoints.mysql)
    try:
        applier = applier_session(RelayedContext(dataclasses.replace(endpoints.mysql, port=relay.port)))
        applier_id = query(applier, "SELECT CONNECTION_ID()")[0][0]
        query(holder, f"UPDATE {DB}.t SET v = v + 1 WHERE id = 5")   # an application transaction, still open
        errors: list[BaseException] = []

        def recopy() -> None:
            try:
                recopy_keys(applier, pair, [(k,) for k in range(1, 11)])
            except pymysql.err.Error as exc:
                errors.append(exc)
        thread = threading.Thread(target=recopy, daemon=True)
        thread.start()
        # the locking read holds keys 1-4 and waits for key 5
        wait_for(lambda: waiting_for_a_row_lock(conn, applier_id), 30, "the re-copy to wait for key 5")
        relay.cut()
        thread.join(10)
        assert errors, "the applier saw its link cut"

        query(writer, "SET SESSION innodb_lock_wait_timeout = %s", (APPLICATION_LOCK_WAIT_S,))
        started = time.monotonic()
        query(writer, f"UPDATE {DB}.t SET v = v + 1 WHERE id = 1")   # 1205 while the orphan holds key 1
        waited = time.monotonic() - started
        assert waited < APPLIER_LOCK_WAIT_S + 5, f"the application's write waited {waited:.1f} s"
    finally:
        holder.rollback()
        holder.close()
        writer.close()
        relay.cut()
