"""The tool's connections write every statement parameter as PyMySQL writes it (core/db.py: integers take a
shortcut past PyMySQL's dispatch by type, which must not change a single literal)."""
from __future__ import annotations

import datetime
import random
from decimal import Decimal

import pymysql

from core import db


def connection() -> db._TaggedConnection:
    conn = db._TaggedConnection(defer_connect=True, charset="utf8mb4")
    conn.server_status = 0   # (read at the handshake: no NO_BACKSLASH_ESCAPES)
    return conn


def test_every_parameter_is_written_as_pymysql_writes_it():
    rng = random.Random(20261206)
    values = [rng.randint(-2**70, 2**70) for _ in range(500)] + [
        0, -1, True, False, None, 1.5, Decimal("12.30"), "it's", b"\x00'\\", "Zoë", datetime.date(2026, 12, 6),
        datetime.datetime(2026, 12, 6, 1, 2, 3, 4), datetime.timedelta(seconds=-5), (1, 2), [3, "a"], {4}]
    conn = connection()
    for value in values:
        assert conn.escape(value) == pymysql.connections.Connection.escape(conn, value), value


def test_a_key_list_is_written_as_pymysql_writes_it():
    conn = connection()
    keys = [7, -3, 2**64 - 1, True, "x"]
    sql = "SELECT 1 FROM t WHERE id IN (%s, %s, %s, %s, %s)"
    with conn.cursor() as cur:
        ours = cur.mogrify(sql, keys)
    assert ours == sql % tuple(pymysql.connections.Connection.escape(conn, k) for k in keys)
    assert ours.endswith("IN (7, -3, 18446744073709551615, 1, 'x')")
