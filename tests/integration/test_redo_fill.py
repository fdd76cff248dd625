"""--max-redo-fill against the real server: the redo log's fill is read from the server's own status (MariaDB's
checkpoint age and its limit), and writes that fill it past the limit hold the work back, naming the option;
0 turns it off."""
from __future__ import annotations

import pytest

from core.db import query
from throttle.load import LoadThrottle, read_status
from throttle.redo_fill import STATUS_NAMES, redo_fill_percent

pytestmark = pytest.mark.integration

DB = "osc_redo_fill"
ROUNDS = 200   # of about 1 MiB of redo each: 1% of the stack's 1 GiB redo log is about 9 MiB


def test_writes_filling_the_redo_log_past_the_limit_hold_the_work_back(conn):
    fill = redo_fill_percent(read_status(conn, list(STATUS_NAMES)), None)
    assert fill is not None and 0 <= fill <= 100, "the server's redo log fill was not read"
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {DB}.filler")
    query(conn, f"CREATE TABLE {DB}.filler (id INT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(1000) NOT NULL)")
    held, off = LoadThrottle({}, {}, max_redo_fill=1), LoadThrottle({}, {}, max_redo_fill=0)
    reason = None
    try:
        for _ in range(ROUNDS):
            query(conn, f"INSERT INTO {DB}.filler (pad) SELECT REPEAT('x', 1000) FROM {DB}.seq_1_to_1000")
            assert off.reason(conn, fresh=True) is None
            reason = held.reason(conn, fresh=True)
            if reason is not None:
                break
    finally:
        query(conn, f"DROP DATABASE {DB}")
    assert reason is not None, f"{ROUNDS} MiB written and the redo log never read as 1% full"
    assert reason.startswith("redo log ") and reason.endswith("of its checkpoint limit (--max-redo-fill)")
    assert LoadThrottle({}, {}, max_redo_fill=99).reason(conn, fresh=True) is None
