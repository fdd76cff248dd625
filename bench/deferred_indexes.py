"""Copy with every index kept up to date, or indexes built after it: the same table with and without
`--defer-indexes`.

`python -m bench.deferred_indexes --rows 300k --repetitions 2` fills one template table with five non-unique
secondary indexes (composite, prefix, descending) and a UNIQUE key, then migrates a fresh copy of it with and
without the option, alternating which goes first in each repetition, idle. It reports, per variant, the copy
plus index time (stage copy entered → stage apply entered, so the index build is counted where it happens) and
the whole migration's time, each as the median and as the ratio deferred ÷ kept of the same repetition.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

from bench.config import row_count
from bench.key_shapes import StageClock
from core.db import connect, qualified, query
from core.spec import MigrationSpec, helper_table_name
from migration.runner import Runner
from monitor.progress import Progress
from stack.config import StackConfig

DB = "bench_defer"
TEMPLATE = "indexed_template"
TABLE = "indexed"
ALTER = "ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'new'"
DDL = """CREATE TABLE {name} (
  id BIGINT NOT NULL PRIMARY KEY,
  k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL,
  email VARCHAR(64) NOT NULL, created DATETIME NOT NULL,
  UNIQUE KEY email (email),
  KEY k (k), KEY k_created (k, created), KEY c_prefix (c(20)), KEY created_desc (created DESC),
  KEY pad_k (pad(10), k)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""
VALUES = ("seq, (seq * 7919) % 100000, MD5(seq * 31), REPEAT(CHAR(65 + seq % 26), 60), CONCAT('u', seq, '@x.org'), "
          "TIMESTAMP'2026-01-01 00:00:00' + INTERVAL (seq * 7) % 31536000 SECOND")
VARIANTS = ("kept", "deferred")


def fill_template(conn, rows: int) -> None:
    query(conn, f"CREATE DATABASE IF NOT EXISTS {DB}")
    query(conn, f"DROP TABLE IF EXISTS {qualified(DB, TEMPLATE)}")
    query(conn, DDL.format(name=qualified(DB, TEMPLATE)))
    query(conn, f"INSERT INTO {qualified(DB, TEMPLATE)} SELECT {VALUES} FROM {qualified(DB, f'seq_1_to_{rows}')}")


def fresh_table(conn) -> None:
    """The table to migrate: a copy of the template, so that every run starts from the same rows."""
    for name in (TABLE, helper_table_name(TABLE, "new"), helper_table_name(TABLE, "old")):
        query(conn, f"DROP TABLE IF EXISTS {qualified(DB, name)}")
    query(conn, f"CREATE TABLE {qualified(DB, TABLE)} LIKE {qualified(DB, TEMPLATE)}")
    query(conn, f"INSERT INTO {qualified(DB, TABLE)} SELECT * FROM {qualified(DB, TEMPLATE)}")


def migrate_seconds(endpoints, defer: bool) -> tuple[float, float, float]:
    """(whole migration, copy plus index build, index build) in seconds."""
    spec = MigrationSpec(database=DB, table=TABLE, alter=ALTER, keep_old=False, defer_indexes=defer,
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
    built = clock.entered["apply"] - clock.entered.get("indexes", clock.entered["apply"])
    return time.monotonic() - started, clock.entered["apply"] - clock.entered["copy"], built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deferred_indexes", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=row_count, default=300_000, help="rows of the table (default 300k)")
    parser.add_argument("--repetitions", type=int, default=2)
    args = parser.parse_args(argv)
    endpoints = StackConfig().endpoints(None)
    conn = connect(endpoints.mysql)
    fill_template(conn, args.rows)
    print(f"load average at start: {' '.join(f'{v:.1f}' for v in os.getloadavg())}", flush=True)
    whole: dict[str, list[float]] = {v: [] for v in VARIANTS}
    copying: dict[str, list[float]] = {v: [] for v in VARIANTS}
    building: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rep in range(args.repetitions):
        for variant in (VARIANTS if rep % 2 == 0 else VARIANTS[::-1]):
            fresh_table(conn)
            total, copy_and_index, built = migrate_seconds(endpoints, variant == "deferred")
            whole[variant].append(total)
            copying[variant].append(copy_and_index)
            building[variant].append(built)
            print(f"rep {rep + 1} {variant:<8} migration {total:6.1f} s  copy + indexes {copy_and_index:6.1f} s "
                  f"(index build {built:5.1f} s)  load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"load average at end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    copy_ratio = [d / k for d, k in zip(copying["deferred"], copying["kept"])]
    whole_ratio = [d / k for d, k in zip(whole["deferred"], whole["kept"])]
    print("\n| indexes | copy + indexes s (median) | of which the index build s | migration s (median) |")
    print("| --- | ---: | ---: | ---: |")
    for variant in VARIANTS:
        print(f"| {variant} | {statistics.median(copying[variant]):.1f} | {statistics.median(building[variant]):.1f} | "
              f"{statistics.median(whole[variant]):.1f} |")
    print(f"| deferred ÷ kept (median of each repetition's ratio) | {statistics.median(copy_ratio):.2f} | – | "
          f"{statistics.median(whole_ratio):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
