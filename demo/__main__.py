"""`python -m demo` (`make demo`): a real online schema change of a generated table under write traffic."""
from __future__ import annotations

import argparse
import sys
import time

from cli.endpoints import refuse_other_servers
from cli.exit_codes import exit_code_for
from core.db import connect
from core.endpoints import Endpoints
from stack import cli as stack_cli
from stack.config import StackConfig
from migration.runner import Runner
from core.spec import MigrationSpec, helper_table_name
from core.state import StateStore
from demo.traffic import Traffic, create_sample_table
from monitor.progress import Progress

DEMO_ALTER = ("MODIFY k BIGINT NOT NULL DEFAULT 0, ADD COLUMN status VARCHAR(16) NOT NULL DEFAULT 'new', "
              "ADD INDEX idx_updated (updated_at)")


def demo_endpoints() -> Endpoints:
    """The embedded stack's endpoints and nothing else: the demo creates and writes to a table, so it never
    follows STREAM_OSC_* variables or a STREAM_OSC_CONFIG file that name another server (a shell set up for
    production); it refuses them instead. Settings that are not addresses are not read either."""
    refuse_other_servers("the demo", otherwise=" (the demo creates stream_osc_demo.orders and writes to it)")
    stack = StackConfig()
    return Endpoints.load(environ={}, defaults={**stack.env(), "STREAM_OSC_CONNECTOR_SECRETS_DIR":
                                                str(stack.connect_secrets_dir)})


def cmd_demo(args: argparse.Namespace) -> int:
    endpoints = demo_endpoints()   # refused before anything starts
    if not args.no_stack_up:
        stack_cli.cmd_up(argparse.Namespace(services=[], target_server=False))
    progress = Progress()
    conn = connect(endpoints.mysql)
    db, table = "stream_osc_demo", "orders"
    for leftover in (helper_table_name(table, 'old'), helper_table_name(table, 'new')):
        conn.cursor().execute(f"DROP TABLE IF EXISTS `{db}`.`{leftover}`")
    progress.say(f"demo: creating {db}.{table} with {args.rows:,} rows")
    original = create_sample_table(conn, db, table, args.rows, seed=args.seed)
    traffic = Traffic(endpoints.mysql, db, table, original, seed=args.seed, writers=args.writers,
                      rate=args.rate or None)
    traffic.start()
    pace = f"~{args.rate:.0f} writes/s" if args.rate else "as fast as they can"
    progress.say(f"demo: application traffic running ({args.writers} sessions, {pace}: inserts, updates, deletes, "
                 f"primary-key changes, delete+reinsert, UNIQUE swaps, REPLACE; seed {args.seed})")
    progress.say(f"demo: stream-osc migrate --table {db}.{table} --alter \"{DEMO_ALTER}\"")
    spec = MigrationSpec(database=db, table=table, alter=DEMO_ALTER, chunk_size=50_000).validate()
    started = time.monotonic()
    try:
        code = Runner(endpoints, spec, progress).run()
        if code == 0:
            traffic.wait_for_writes(100)   # the application goes on writing after the swap; those writes count too
    finally:
        stats = traffic.stop()
    migration = StateStore(conn, spec.metadata_schema).latest(db, table)
    check = traffic.check(conn)
    p99 = sorted(stats.latencies_ms)[int(len(stats.latencies_ms) * 0.99)] if stats.latencies_ms else 0
    progress.say(f"demo: finished in {time.monotonic() - started:.1f} s; {check.rows:,} rows; "
                 f"writes blocked at cutover {migration.cutover_blocked_ms} ms")
    progress.say(f"demo: application made {stats.writes:,} writes, {len(stats.failures)} failed, "
                 f"{sum(1 for r in stats.refused if r[0] == 1213)} deadlock victims and "
                 f"{sum(1 for r in stats.refused if r[0] == 1205)} lock-wait timeouts (not retried), "
                 f"p99 latency {p99:.1f} ms")
    progress.say(f"demo: final table vs the application's record of acknowledged writes (every write, before, "
                 f"during and after the swap; nothing left out): {check.keys_written:,} keys written, "
                 f"{check.uncertain} writes of unknown outcome, {len(check.mismatches)} mismatches")
    for mismatch in check.mismatches[:5]:
        progress.say(f"demo:   {mismatch}")
    return 0 if code == 0 and check.ok and not stats.failures else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo",
                                     description="a real migration of a generated table under write traffic")
    parser.add_argument("--rows", type=int, default=300_000, help="rows in the generated table (default 300000)")
    parser.add_argument("--rate", type=float, default=300.0,
                        help="application writes per second in all (default 300; 0: as fast as they can)")
    parser.add_argument("--writers", type=int, default=4, help="application sessions writing (default 4)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the traffic generator")
    parser.add_argument("--no-stack-up", action="store_true",
                        help="do not start the embedded stack first (it runs already)")
    try:
        return cmd_demo(parser.parse_args(argv))
    except Exception as exc:
        if not getattr(exc, "user_facing", False):
            raise
        print(f"demo: error: {exc}", file=sys.stderr)
        return exit_code_for(exc)


if __name__ == "__main__":
    sys.exit(main())
