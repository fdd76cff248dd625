"""The instant path on a large table: `stream-osc migrate` of an ALTER the server makes with ALGORITHM=INSTANT,
timed from the command's start to its exit, while one application session writes unthrottled beside it.

`python -m bench.instant_alter --rows 5M --repetitions 3` fills the table once (INSERT … SELECT from the server's
sequence tables), then adds one column per repetition. It reports each run's wall time (CLI start-up, checks, the
empty-copy try and the try on the table included) and the application's worst single-row UPDATE meanwhile.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import threading
import time

from bench.config import row_count
from core.db import connect, qualified, query
from stack.config import StackConfig

DB = "bench_instant"
TABLE = "big"
FILL_STEP = 500_000


def fill(conn, rows: int) -> None:
    """The table, `rows` rows of an id, a small integer and 60 characters."""
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, TABLE)}, {qualified(DB, TABLE + '_osc_old')}")
    query(conn, f"CREATE TABLE {qualified(DB, TABLE)} (id INT PRIMARY KEY AUTO_INCREMENT, k INT NOT NULL, "
                "c CHAR(60) NOT NULL)")
    for start in range(0, rows, FILL_STEP):
        end = min(start + FILL_STEP, rows)
        query(conn, f"INSERT INTO {qualified(DB, TABLE)} (k, c) SELECT seq % 1000, REPEAT('x', 60) "
                    f"FROM {DB}.seq_{start + 1}_to_{end}")


class Writer(threading.Thread):
    """One application session updating random rows, one autocommitted statement at a time; the worst it waited."""

    def __init__(self, dsn, rows: int) -> None:
        super().__init__(daemon=True)
        self.conn, self.rows = connect(dsn), rows
        self.stop, self.worst_s, self.writes = threading.Event(), 0.0, 0

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            began = time.monotonic()
            key = 1 + (n * 7919) % self.rows
            query(self.conn, f"UPDATE {qualified(DB, TABLE)} SET k = k + 1 WHERE id = %s", (key,))
            self.worst_s, self.writes = max(self.worst_s, time.monotonic() - began), self.writes + 1


def one_run(endpoints, rows: int, column: str) -> tuple[float, float, int, str]:
    """(wall seconds of the command, the writer's worst write in seconds, its writes, the command's last line)."""
    writer = Writer(endpoints.mysql, rows)
    writer.start()
    while writer.writes < 100:
        time.sleep(0.01)
    began = time.monotonic()
    done = subprocess.run([os.path.join(".venv", "bin", "stream-osc"), "migrate", "--table", f"{DB}.{TABLE}",
                           "--alter", f"ADD COLUMN {column} INT NULL"], capture_output=True, text=True)
    wall = time.monotonic() - began
    writer.stop.set()
    writer.join(10)
    lines = (done.stdout + done.stderr).strip().splitlines()
    if done.returncode != 0:
        raise SystemExit(f"migrate exited {done.returncode}: {lines[-1] if lines else ''}")
    return wall, writer.worst_s, writer.writes, lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=row_count, default=row_count("5M"))
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    endpoints = StackConfig().endpoints()
    conn = connect(endpoints.mysql)
    began = time.monotonic()
    fill(conn, args.rows)
    print(f"{args.rows:,} rows in {time.monotonic() - began:.1f} s")
    for number in range(1, args.repetitions + 1):
        wall, worst, writes, last = one_run(endpoints, args.rows, f"added_{number}")
        print(f"run {number}: migrate {wall:.2f} s; application writes {writes}, worst {worst * 1000:.0f} ms; {last}")


if __name__ == "__main__":
    main()
