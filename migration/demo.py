"""`stream-osc demo`: a real online schema change of a generated table under write traffic."""
from __future__ import annotations

import argparse
import time

from cutover.compare import compare_tables
from migration.db import connect, scalar
from migration.endpoints import Endpoints
from migration.runner import Runner
from migration.spec import MigrationSpec
from migration.state import StateStore
from migration.traffic import Traffic, create_sample_table
from monitor.progress import Progress
from migration.spec import helper_table_name

DEMO_ALTER = ("MODIFY k BIGINT NOT NULL DEFAULT 0, ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'new', "
              "ADD INDEX idx_updated (updated_at)")


def cmd_demo(args: argparse.Namespace) -> int:
    endpoints = Endpoints.load(args.config)
    progress = Progress()
    conn = connect(endpoints.mysql)
    db, table = "stream_osc_demo", "orders"
    for leftover in (helper_table_name(table, 'old'), helper_table_name(table, 'new')):
        conn.cursor().execute(f"DROP TABLE IF EXISTS `{db}`.`{leftover}`")
    progress.say(f"demo: creating {db}.{table} with {args.rows:,} rows")
    create_sample_table(conn, db, table, args.rows, seed=args.seed)
    traffic = Traffic(endpoints.mysql, db, table, seed=args.seed, rate=args.rate)
    traffic.start()
    progress.say(f"demo: application traffic running (~{args.rate:.0f} writes/s: inserts, updates, deletes, "
                 f"primary-key changes, delete+reinsert, UNIQUE swaps; seed {args.seed})")
    progress.say(f"demo: stream-osc migrate --table {db}.{table} --alter \"{DEMO_ALTER}\"")
    spec = MigrationSpec(database=db, table=table, alter=DEMO_ALTER, chunk_size=50_000).validate()
    started = time.monotonic()
    try:
        Runner(endpoints, spec, progress).run()
    finally:
        stats = traffic.stop()
    migration = StateStore(conn, spec.metadata_schema).latest(db, table)
    written_after_swap = stats.keys_written_since(migration.cutover_at or 0)
    result = compare_tables(conn, db, spec.old_table, table, migration.pk_column, written_after_swap)
    rows = scalar(conn, f"SELECT COUNT(*) FROM `{db}`.`{table}`")
    p99 = sorted(stats.latencies_ms)[int(len(stats.latencies_ms) * 0.99)] if stats.latencies_ms else 0
    progress.say(f"demo: finished in {time.monotonic() - started:.1f} s; {rows:,} rows; "
                 f"writes blocked at cutover {migration.cutover_blocked_ms} ms")
    progress.say(f"demo: application made {stats.writes:,} writes, {len(stats.failures)} failed, "
                 f"{stats.retried} retried after deadlock/lock wait, p99 latency {p99:.1f} ms")
    progress.say(f"demo: new table vs original at the swap: {result.compared:,} rows compared, "
                 f"{len(result.different)} differ, {len(result.only_left)} missing, {len(result.only_right)} extra")
    return 0 if result.equal and not stats.failures else 1


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="run a real migration of a generated table under traffic")
    demo.add_argument("--rows", type=int, default=300_000, help="rows in the generated table (default 300000)")
    demo.add_argument("--rate", type=float, default=300.0, help="application writes per second (default 300)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the traffic generator")
    demo.add_argument("--config", help="TOML file with [endpoints]")
    demo.set_defaults(func=cmd_demo)
