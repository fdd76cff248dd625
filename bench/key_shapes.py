"""Copy speed by primary-key shape: the same rows under an integer, a composite and a string key.

`python -m bench.key_shapes --rows 1M --repetitions 2` migrates three tables of the same rows and
columns, idle, interleaving the shapes in each repetition, and reports each shape's time as a ratio
to the integer key's (measured in the same repetition) and to the server's own `INSERT … SELECT`
copy of that table. The tables are filled with MariaDB's sequence engine (`seq_1_to_N`).
"""
from __future__ import annotations

import argparse
import logging
import statistics
import time
from dataclasses import dataclass

from bench.config import row_count
from core.db import connect, qualified, query
from core.spec import MigrationSpec, helper_table_name
from migration.runner import Runner
from monitor.progress import Progress
from stack.config import StackConfig

DB = "bench_keys"
ALTER = "ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'new'"
COLUMNS = "k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL"
VALUES = "seq % 100000, REPEAT(CHAR(97 + seq % 26), 120), REPEAT(CHAR(65 + seq % 26), 60)"


@dataclass(frozen=True)
class KeyShape:
    name: str
    key_ddl: str
    key_values: str   # SQL over `seq`


SHAPES = (
    KeyShape("integer", "id BIGINT NOT NULL, PRIMARY KEY (id)", "seq"),
    KeyShape("composite", "tenant INT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (tenant, seq)", "seq % 97, seq"),
    KeyShape("string", "uid VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL, PRIMARY KEY (uid)",
             "CONCAT(MD5(seq), '-', seq)"),
)


def fill(conn, shape: KeyShape, rows: int) -> None:
    table = qualified(DB, f"keys_{shape.name}")
    name = f"keys_{shape.name}"
    for leftover in (name, helper_table_name(name, "new"), helper_table_name(name, "old"), f"{name}_copy"):
        query(conn, f"DROP TABLE IF EXISTS {qualified(DB, leftover)}")
    query(conn, f"CREATE TABLE {table} ({shape.key_ddl}, {COLUMNS}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
    numbers = qualified(DB, f"seq_1_to_{rows}")
    query(conn, f"INSERT INTO {table} SELECT {shape.key_values}, {VALUES} FROM {numbers}")


def server_copy_seconds(conn, shape: KeyShape) -> float:
    """The server's own copy of the table into its new definition: the floor for any online copy."""
    table, copy = f"keys_{shape.name}", f"keys_{shape.name}_copy"
    query(conn, f"CREATE TABLE {qualified(DB, copy)} LIKE {qualified(DB, table)}")
    query(conn, f"ALTER TABLE {qualified(DB, copy)} {ALTER}")
    started = time.monotonic()
    query(conn, f"INSERT INTO {qualified(DB, copy)} SELECT *, 'new' FROM {qualified(DB, table)}")
    seconds = time.monotonic() - started
    query(conn, f"DROP TABLE {qualified(DB, copy)}")
    return seconds


class StageClock(logging.Handler):
    """When each stage was entered, from the runner's own `stage` log events."""

    def __init__(self) -> None:
        super().__init__()
        self.entered: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        stage = getattr(record, "fields", {}).get("stage") if record.getMessage().startswith("stage") else None
        if stage is not None:
            self.entered.setdefault(str(stage), record.created)


def migrate_seconds(endpoints, shape: KeyShape) -> tuple[float, float]:
    """(whole migration, copy stage) in seconds."""
    spec = MigrationSpec(database=DB, table=f"keys_{shape.name}", alter=ALTER, keep_old=False,
                         algorithm="copy").validate()   # the server would add the column instantly: time the copy
    clock = StageClock()
    logger = logging.getLogger("stream_osc.state")
    logger.addHandler(clock)
    logger.setLevel(logging.INFO)
    started = time.monotonic()
    try:
        if Runner(endpoints, spec, Progress(quiet=True)).run() != 0:
            raise RuntimeError(f"the migration of {spec.qualified_name} failed")
    finally:
        logger.removeHandler(clock)
    return time.monotonic() - started, clock.entered["apply"] - clock.entered["copy"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.key_shapes", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=row_count, default=1_000_000, help="rows per table (default 1M)")
    parser.add_argument("--repetitions", type=int, default=2)
    args = parser.parse_args(argv)
    endpoints = StackConfig().endpoints(None)
    conn = connect(endpoints.mysql)
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    seconds: dict[str, list[float]] = {s.name: [] for s in SHAPES}
    copying: dict[str, list[float]] = {s.name: [] for s in SHAPES}
    floor: dict[str, list[float]] = {s.name: [] for s in SHAPES}
    for rep in range(args.repetitions):
        order = SHAPES[rep % len(SHAPES):] + SHAPES[:rep % len(SHAPES)]
        for shape in order:
            fill(conn, shape, args.rows)
            floor[shape.name].append(server_copy_seconds(conn, shape))
            whole, copy_stage = migrate_seconds(endpoints, shape)
            seconds[shape.name].append(whole)
            copying[shape.name].append(copy_stage)
            print(f"rep {rep + 1} {shape.name:<9} stream-osc {whole:6.1f} s (copy stage {copy_stage:5.1f} s)  "
                  f"server copy {floor[shape.name][-1]:5.1f} s", flush=True)
    base, base_copy = statistics.median(seconds["integer"]), statistics.median(copying["integer"])
    print("\n| key | migration s (median) | × integer key | copy stage s | × integer key | server copy s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for shape in SHAPES:
        own, stage = statistics.median(seconds[shape.name]), statistics.median(copying[shape.name])
        print(f"| {shape.name} | {own:.1f} | {own / base:.2f} | {stage:.1f} | {stage / base_copy:.2f} | "
              f"{statistics.median(floor[shape.name]):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
