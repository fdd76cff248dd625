"""Handlers of the migration commands: migrate, status, list, set, cutover, resume, pause, abort, accept-target,
worker, and their subcommands' parsers. The options they take are in cli/arguments.py, the spec they build in
cli/command_spec.py."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from cli.arguments import add_metrics_options, add_spec_options, add_store_options, add_stored_options, \
    metadata_schema, option_type, positive_seconds, refuse_stored_options
from cli.command_spec import given_options, spec_from_args, spec_table
from cli.exit_codes import ExitCode
from cli.status import list_lines, list_rows, read_status, status_lines
from migration.checks import PreflightError
from throttle.cloudwatch_load import CloudWatchLoad
from core.db import connect
from core.logs import log_event
from throttle.replica_lag import ReplicaLag
from cli.endpoints import command_endpoints
from migration.lease import coordinator_gone, live_coordinator
from migration.notify import tell_aborted
from migration.runner import Runner
from migration.teardown import Metadata, finish_swapped, tables_swapped, tear_down, verify_target
from core.spec import TARGET_OPTIONS, MigrationSpec
from core.state import StateStore
from core.stages import SWAPPED_STAGES, Status
from migration.settings import SETTABLE, options_with, parse_assignments
from migration.target_failover import accept_target
from migration.worker_process import JoinedWorker, spec_of
from monitor.cloudwatch import CloudWatchPublisher
from monitor.metrics import DEFAULT_ADDRESS, MigrationMetrics
from monitor.progress import Progress

log = logging.getLogger("stream_osc.cli")


def cmd_migrate(args: argparse.Namespace, cutover_now: bool = False) -> int:
    spec = spec_from_args(args, alter_required=not cutover_now and args.command == "migrate")
    endpoints = command_endpoints(args)
    if args.metrics_address is not None and args.metrics_port is None:
        raise PreflightError("--metrics-address needs --metrics-port")
    if spec.cloudwatch_limits():
        CloudWatchLoad(spec.rds_instance, spec.cloudwatch_limits()).check()
    if spec.replicas():
        ReplicaLag(endpoints.mysql, spec.replicas(), spec.max_replica_lag).check()
    metrics = MigrationMetrics(spec.qualified_name)
    # both before init: a taken port or a namespace CloudWatch refuses changes nothing
    cloudwatch = CloudWatchPublisher(metrics, args.cloudwatch_namespace) if args.cloudwatch_namespace else None
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port, args.metrics_address or DEFAULT_ADDRESS)
    try:
        if cloudwatch is not None:
            cloudwatch.start()
        return Runner(endpoints, spec, Progress(quiet=args.quiet), cutover_now=cutover_now,
                      resume_live=args.command == "resume", metrics=metrics, given=given_options(args)).run()
    finally:
        if cloudwatch is not None:
            cloudwatch.close()
        metrics.close()


def cmd_cutover(args: argparse.Namespace) -> int:
    return cmd_migrate(args, cutover_now=True)


def _with_store(args: argparse.Namespace):
    endpoints = command_endpoints(args)
    db, tbl = spec_table(args.table)
    conn = connect(endpoints.mysql)
    return endpoints, conn, StateStore(conn, metadata_schema(args)), db, tbl


def cmd_status(args: argparse.Namespace) -> int:
    """Exit 0, or STOPPED (3) when the migration is unfinished and no process runs it (it failed or was killed)."""
    endpoints, conn, store, db, tbl = _with_store(args)
    while True:
        migration = store.latest(db, tbl)
        if migration is None:
            raise PreflightError(f"no migration of {args.table} is recorded")
        doc = read_status(endpoints, store, migration)
        if args.json:
            print(json.dumps(doc, indent=None if args.watch else 2), flush=True)
        else:
            if args.watch and sys.stdout.isatty():
                print("\033[H\033[J", end="")
            print("\n".join(status_lines(doc)) + ("\n" if args.watch else ""), flush=True)
        if not args.watch or doc["state"] in ("done", "aborted", "stopped"):
            return ExitCode.STOPPED if doc["state"] == "stopped" else ExitCode.DONE
        time.sleep(args.interval)


def cmd_list(args: argparse.Namespace) -> int:
    """Every migration in the metadata schema, newest first."""
    endpoints = command_endpoints(args)
    conn = connect(endpoints.mysql)
    try:
        rows = list_rows(StateStore(conn, metadata_schema(args)), endpoints)
    finally:
        conn.close()
    print(json.dumps(rows, indent=2) if args.json else "\n".join(list_lines(rows)))
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    _, conn, store, db, tbl = _with_store(args)
    migration = store.active(db, tbl)
    if migration is None:
        raise PreflightError(f"no unfinished migration of {args.table}")
    store.update(migration.id, status=Status.PAUSED)
    print(f"migration {migration.id} of {args.table}: {Status.PAUSED}")
    return 0


def cmd_set(args: argparse.Namespace) -> int:
    """Change settings of a running migration; its coordinator takes them up within seconds."""
    values = parse_assignments(args.assignments)
    _, conn, store, db, tbl = _with_store(args)
    migration = store.active(db, tbl)
    if migration is None:
        raise PreflightError(f"no unfinished migration of {args.table}")
    store.change_options(migration.id, lambda current: options_with(current, spec_of(current, None, None), values))
    log_event(log, "settings changed", migration=migration.id, **values)
    print(f"migration {migration.id} of {args.table}: " + ", ".join(f"{k}={v}" for k, v in values.items()) +
          "; its coordinator takes them up within seconds")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue from durable state (also after a crash) in this process."""
    return cmd_migrate(args)


def cmd_abort(args: argparse.Namespace) -> int:
    """Remove everything the migration created and keep the original table, or, if the tables were already
    swapped (even if the metadata does not say so yet), say so and finish the cleanup instead."""
    endpoints, conn, store, db, tbl = _with_store(args)
    migration = store.active(db, tbl)
    if migration is None:
        raise PreflightError(f"no unfinished migration of {args.table}")
    spec = MigrationSpec(database=db, table=tbl, alter=migration.alter_sql, metadata_schema=metadata_schema(args),
                         **{k: migration.options[k] for k in TARGET_OPTIONS if k in migration.options})
    verify_target(conn, endpoints, spec, migration)   # the DROP below must never reach another server's table
    coordinator = None
    if migration.stage in SWAPPED_STAGES:
        live = live_coordinator(store, migration.id)
        if live is not None:
            raise PreflightError(f"migration {migration.id} already swapped the tables; its coordinator {live[0]} "
                                 "is finishing the cleanup, nothing to abort")
    else:
        coordinator = live_coordinator(store, migration.id)
        store.update(migration.id, status=Status.ABORTED)
        if not coordinator_gone(store, migration.id):
            raise PreflightError(f"the coordinator of migration {migration.id} did not stop; try the abort again")
    migration = store.get(migration.id)
    if migration.stage in SWAPPED_STAGES or tables_swapped(conn, spec):
        finish_swapped(conn, endpoints, spec, migration)
        if spec.target_server:
            done = (f"could not be aborted: the table had already been moved. It lives on the target server as "
                    f"{spec.target_database}.{spec.new_table}, which holds every acknowledged write: switch the "
                    f"application to it (writes to {args.table} fail)")
        else:
            done = (f"could not be aborted: the tables had already been swapped. {args.table} has the new schema "
                    "and receives the writes")
        print(f"migration {migration.id} of {args.table} {done}; the original table is kept as {db}.{spec.old_table} "
              "(without the writes made since the swap). The unfinished cleanup is done (connector and topics "
              "removed) and the migration is recorded as done.")
        return ExitCode.ALREADY_SWAPPED
    tear_down(conn, endpoints, spec, migration, drop_new_table=True, metadata=Metadata.WORK)   # a sentry too
    if coordinator is None:   # (a coordinator that ran told of the abort itself)
        tell_aborted(endpoints, migration)
    new = f"{spec.target_database}.{spec.new_table} on the target server" if spec.target_server else spec.new_table
    print(f"migration {migration.id} of {args.table} aborted; connector, topics, {new} and its copy plan "
          f"removed (its row stays, marked aborted); {args.table} is the original table")
    return 0


def cmd_accept_target(args: argparse.Namespace) -> int:
    """Take the server the target DSN reaches now, holding the move's token, as its target after a failover."""
    endpoints, conn, store, db, tbl = _with_store(args)
    migration = store.active(db, tbl)
    if migration is None:
        raise PreflightError(f"no unfinished migration of {args.table}")
    spec = MigrationSpec(database=db, table=tbl, alter=migration.alter_sql, metadata_schema=metadata_schema(args),
                         **{k: migration.options[k] for k in TARGET_OPTIONS if k in migration.options})
    print(accept_target(conn, endpoints, spec, store, migration))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Join a running migration with more copy workers and appliers."""
    endpoints = command_endpoints(args)
    db, tbl = spec_table(args.table)
    return JoinedWorker(endpoints, db, tbl, metadata_schema(args),
                        Progress(quiet=args.quiet), args.copy_workers, args.apply_workers).run()


def _register_migrate(sub: argparse._SubParsersAction) -> None:
    migrate = sub.add_parser("migrate", help="change a table's schema online")
    add_spec_options(migrate)
    add_stored_options(migrate)
    migrate.add_argument("--alter", help='the ALTER clauses, e.g. "ADD COLUMN c INT, ADD INDEX (c)"')
    migrate.add_argument("--cutover", choices=["auto", "manual"], help="swap when in sync (auto) or wait (manual)")
    migrate.add_argument("--keep-old", dest="keep_old", action="store_true", default=None,
                         help="keep the original table as <table>_osc_old (default)")
    migrate.add_argument("--drop-old", dest="keep_old", action="store_false", help="drop the original table after")
    migrate.add_argument("--dry-run", action="store_true", default=None, help="run every check, change nothing")
    migrate.add_argument("--target-dsn", nargs="?", const="", metavar="DSN",
                         help="move the table to another server: copy and keep it in sync there, then rename the "
                              "original away at the cutover (docs/move.md). DSN without a password "
                              "(mysql://user@host:port/); alone, the server of STREAM_OSC_TARGET_DSN")
    migrate.add_argument("--target-table", metavar="DB.TABLE",
                         help="the table's name on the target server (default: the same)")
    migrate.add_argument("--where", metavar="PREDICATE",
                         help="with --target-dsn: copy and keep in sync only the rows matching this SQL predicate")
    migrate.add_argument("--defer-indexes", action="store_true", default=None,
                         help="create the new table without its non-unique secondary indexes and add them in one "
                              "ALTER after the bulk copy, before the changes are applied (PRIMARY and UNIQUE keys "
                              "stay); refused when there is none to defer")
    migrate.add_argument("--algorithm", metavar="auto|copy", type=option_type("algorithm"),
                         help="auto (default): first try the ALTER on the table itself as ALGORITHM=INSTANT, which "
                              "the server refuses at once when it cannot (then the copy runs) and otherwise is the "
                              "change; copy: always copy (docs/options.md)")
    migrate.add_argument("--alter-foreign-keys-method", metavar="none|rebuild",
                         type=option_type("alter-foreign-keys-method"),
                         help="none (default): refuse a table other tables' foreign keys reference; rebuild: "
                              "rebuild those constraints to reference the new table right after the swap "
                              "(docs/foreign-keys.md)")
    add_metrics_options(migrate)
    migrate.set_defaults(func=cmd_migrate)


def register(sub: argparse._SubParsersAction) -> None:
    _register_migrate(sub)

    for name, func, text in (("resume", cmd_resume, "continue an unfinished migration"),
                             ("cutover", cmd_cutover, "swap the tables of a migration waiting for cutover")):
        parser = sub.add_parser(name, help=text)
        add_spec_options(parser)
        refuse_stored_options(parser)
        add_metrics_options(parser)
        parser.set_defaults(func=func)

    worker = sub.add_parser("worker", help="add copy workers and appliers to a running migration (any machine)")
    worker.add_argument("--table", required=True, help="DB.TABLE of the running migration")
    add_store_options(worker)
    worker.add_argument("--copy-workers", type=option_type("copy-workers"),
                        help="copy threads in this process (default: the migration's)")
    worker.add_argument("--apply-workers", type=option_type("apply-workers"),
                        help="applier threads in this process (default: the migration's)")
    worker.add_argument("--quiet", action="store_true", help="no progress lines")
    worker.set_defaults(func=cmd_worker)

    for name, func, text in (("status", cmd_status, "show stage, progress and lag"),
                             ("pause", cmd_pause, "stop all copy and apply writes until resume"),
                             ("abort", cmd_abort, "remove everything a migration created"),
                             ("accept-target", cmd_accept_target, "after a failover of a move's target server: take "
                              "the server the target DSN reaches now, holding the move's token, as its target "
                              "(validated again before the cutover; docs/move.md)")):
        parser = sub.add_parser(name, help=text)
        parser.add_argument("--table", required=True, help="DB.TABLE")
        add_store_options(parser)
        if name == "status":
            parser.add_argument("--json", action="store_true",
                                help="one JSON document (docs/status.md); with --watch one per line")
            parser.add_argument("--watch", action="store_true",
                                help="show again every --interval seconds until the migration ends or stops")
            parser.add_argument("--interval", type=positive_seconds, default=2.0,
                                help="seconds between --watch refreshes (default 2)")
        parser.set_defaults(func=func)

    setting = sub.add_parser("set", help="change settings of a running migration (logged, shown in status)")
    setting.add_argument("--table", required=True, help="DB.TABLE")
    add_store_options(setting)
    setting.add_argument("assignments", nargs="+", metavar="NAME=VALUE",
                         help=f"NAME one of {', '.join(SETTABLE)}, e.g. max-load=Threads_running=30 batch-size=2000")
    setting.set_defaults(func=cmd_set)

    listing = sub.add_parser("list", help="every migration recorded: table, stage, state, progress, ETA, lag, age")
    add_store_options(listing)
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(func=cmd_list)
