"""The benchmark server sized as a production server is for the tables a run touches: a buffer pool that holds
them, and a redo log that a copy of the table does not fill.

Debian's default redo log is 96 MiB (the embedded server has 1 GiB). A copy of the 1M-row table writes about
twice that, and through a whole invocation under the heavy load the checkpoint age was at least 75% of its limit
in 308 of 318 samples taken every 2 s: InnoDB then flushes pages synchronously and every write waits, whichever
tool is copying. The server-side copy's application p99 was 47-55 ms with it and 6-13 ms with a 1 GiB log
(docs/benchmarks.md)."""
from __future__ import annotations

import os
import time
from collections.abc import Callable

import pymysql

from bench.sysbench import BenchError
from core.db import query, scalar

GIB = 2 ** 30
TABLE_COPIES = 3          # the original, the new (or shadow) table, and the one being restored from
MEMORY_SHARE = 0.5        # never more than this share of the machine's memory
RESIZE_TIMEOUT_S = 300.0
REDO_LOG_MIN = GIB        # the least a server taking a table's copy and an application's writes is given here
REDO_LOG_MAX = 4 * GIB


def wanted_buffer_pool(table_bytes: int, memory_bytes: int, current_bytes: int) -> int:
    """Whole GiB holding TABLE_COPIES of the table, within MEMORY_SHARE of memory; never below the current size."""
    want = -(-table_bytes * TABLE_COPIES // GIB) * GIB
    cap = int(memory_bytes * MEMORY_SHARE) // GIB * GIB
    return max(current_bytes, min(want, cap))


def fit_buffer_pool(conn: pymysql.connections.Connection, database: str, template: str) -> int:
    """Grow innodb_buffer_pool_size (online) so the template's table and its copies fit; returns the size."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return _grow(conn, "innodb_buffer_pool_size", "the buffer pool",
                 lambda current: wanted_buffer_pool(_table_bytes(conn, database, template), memory, current),
                 lambda: _resizing(conn))


def wanted_redo_log(table_bytes: int, current_bytes: int) -> int:
    """Whole GiB holding the table once (its copy writes every row through the redo log), at least REDO_LOG_MIN
    and at most REDO_LOG_MAX; never below the current size."""
    want = min(max(-(-table_bytes // GIB) * GIB, REDO_LOG_MIN), REDO_LOG_MAX)
    return max(current_bytes, want)


def fit_redo_log(conn: pymysql.connections.Connection, database: str, template: str) -> int:
    """Grow innodb_log_file_size (online, MariaDB 10.11) to wanted_redo_log for the template's table; returns it."""
    return _grow(conn, "innodb_log_file_size", "the redo log",
                 lambda current: wanted_redo_log(_table_bytes(conn, database, template), current), lambda: False)


def _table_bytes(conn: pymysql.connections.Connection, database: str, template: str) -> int:
    return int(scalar(conn, "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES "
                            "WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (database, template)) or 0)


def _grow(conn: pymysql.connections.Connection, variable: str, what: str, wanted_for: Callable[[int], int],
          still_resizing: Callable[[], bool]) -> int:
    """Set the global `variable` to wanted_for(its current value) if that differs, and wait until the server
    reports the new size (and `still_resizing()` is false); returns the size."""
    current = int(scalar(conn, f"SELECT @@{variable}"))
    wanted = wanted_for(current)
    if wanted == current:
        return current
    query(conn, f"SET GLOBAL {variable} = %s", (wanted,))
    deadline = time.monotonic() + RESIZE_TIMEOUT_S
    while int(scalar(conn, f"SELECT @@{variable}")) != wanted or still_resizing():
        if time.monotonic() > deadline:
            raise BenchError(f"{what} did not grow to {wanted // GIB} GiB within {RESIZE_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
    return wanted


def _resizing(conn: pymysql.connections.Connection) -> bool:
    status = query(conn, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_resize_status'")
    text = status[0][1] if status else ""
    return bool(text) and "ompleted" not in text
