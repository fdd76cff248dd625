"""Helpers for integration tests: connections, leftovers, waiting on conditions."""
from __future__ import annotations

import time
from collections.abc import Callable

from connectors.rest import ConnectClient
from migration.db import connect, query
from migration.endpoints import Endpoints
from streams.topics import existing_topics


def db_conn(endpoints: Endpoints):
    return connect(endpoints.mysql)


def wait_for(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    """Poll until `condition()` is truthy; fail the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def leftovers(endpoints: Endpoints, db: str, table: str) -> list[str]:
    """Everything a migration of db.table could have left behind (finished metadata rows excepted)."""
    found: list[str] = []
    conn = db_conn(endpoints)
    try:
        for name in (f"_{table}_new", f"_{table}_old"):
            if query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                     (db, name)):
                found.append(f"table {db}.{name}")
        if query(conn, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA='stream_osc' "
                       "AND TABLE_NAME='migrations'"):
            rows = query(conn, "SELECT id, stage, status FROM stream_osc.migrations WHERE db=%s AND tbl=%s "
                               "AND status <> 'done'", (db, table))
            found += [f"metadata row {r}" for r in rows]
    finally:
        conn.close()
    marker = f"streamosc_{table}_"
    found += [f"connector {c}" for c in ConnectClient(endpoints.connect_url)._call("GET", "/connectors")
              if c.startswith(marker.replace("_", "-"))]
    found += [f"topic {t}" for t in existing_topics(endpoints.kafka_bootstrap) if marker in t]
    return found
