"""Handlers of the migration commands: migrate, status, list, set, cutover, resume, pause, abort, accept-target,
worker."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import sys
import time

from cli.exit_codes import ExitCode
from cli.status import list_lines, list_rows, read_status, status_lines
from migration.checks import PreflightError
from throttle.cloudwatch_load import CloudWatchLoad
from core.db import connect
from core.logs import log_event
from throttle.replica_lag import ReplicaLag
from cli.endpoints import add_stack_option, command_endpoints
from migration.lease import coordinator_gone, live_coordinator
from migration.notify import tell_aborted
from migration.runner import Runner
from migration.teardown import Metadata, finish_swapped, tables_swapped, tear_down, verify_target
from core.spec import TARGET_OPTIONS, MigrationSpec, load_migration_file
from core.state import StateStore
from core.stages import SWAPPED_STAGES, Status
from migration.settings import SETTABLE, options_with, parse_assignments
from migration.target_failover import accept_target
from migration.worker_process import JoinedWorker, spec_of
from monitor.cloudwatch import CloudWatchPublisher
from monitor.metrics import DEFAULT_ADDRESS, MigrationMetrics
from monitor.progress import Progress
from core.options import BY_FIELD, BY_NAME
from core.endpoints import ConfigError, refuse_password_on_command_line

# The spec fields an option or the config file's [migration] section may set (each option's dest is the field).
SPEC_FIELDS = frozenset(f.name for f in dataclasses.fields(MigrationSpec)) - {"database", "table", "alter"}


log = logging.getLogger("stream_osc.cli")

# One source for every default: the spec's own (what a migration uses when no option is given).
DEFAULTS = MigrationSpec(database="db", table="t", alter="-")


def add_store_options(parser: argparse.ArgumentParser, config_help: str = "TOML file with [endpoints]") -> None:
    """--config and --metadata-schema: where the services are and which schema holds stream-osc's state."""
    parser.add_argument("--config", help=config_help + " (default: STREAM_OSC_CONFIG)")
    add_stack_option(parser)
    parser.add_argument("--metadata-schema", help=f"schema for stream-osc's state (default {DEFAULTS.metadata_schema})")


def metadata_schema(args: argparse.Namespace, fallback: str | None = None) -> str:
    """The metadata schema asked for with --metadata-schema, else `fallback`, else the default."""
    return getattr(args, "metadata_schema", None) or fallback or DEFAULTS.metadata_schema


# Spec fields a resumed migration always takes from its stored options (migration/resuming.py RESUMABLE_OPTIONS):
# `resume` and `cutover` do not offer their options (given there, they would be ignored).
STORED_ONLY = ("chunk_size", "partitions", "cutover_window_schedule", "cutover_timezone")


def add_stored_options(parser: argparse.ArgumentParser) -> None:
    """The options `migrate` alone takes: kept with the migration for its whole life."""
    parser.add_argument("--chunk-size", type=option_type("chunk-size"),
                        help=f"rows per copy chunk (default {DEFAULTS.chunk_size})")
    parser.add_argument("--partitions", type=option_type("partitions"),
                        help=f"partitions of the change topic (default {DEFAULTS.partitions})")
    parser.add_argument("--cutover-window-schedule", metavar="HH:MM-HH:MM[,…]",
                        help="swap only inside these daily windows, e.g. 02:00-04:00 (the appliers keep the new "
                             "table in sync meanwhile; `stream-osc cutover` swaps at once); kept for the whole "
                             "migration")
    parser.add_argument("--cutover-timezone", help="time zone of --cutover-window-schedule, an IANA name "
                                                   f"(default {DEFAULTS.cutover_timezone})")


class StoredOption(argparse.Action):
    """An option `resume` and `cutover` do not take (kept out of their --help): given there, one clear refusal
    instead of a value silently replaced by the stored one."""

    def __init__(self, option_strings, dest, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=None, default=None, help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string} is kept with the migration from `stream-osc migrate`; "
                     f"{parser.prog.split()[-1]} uses the stored value (start a new migration to change it)")


def refuse_stored_options(parser: argparse.ArgumentParser) -> None:
    """The options of add_stored_options, refused (for `resume` and `cutover`)."""
    for field in STORED_ONLY:
        parser.add_argument(f"--{BY_FIELD[field].name}", action=StoredOption)


def add_spec_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", help="DB.TABLE to change")
    add_store_options(parser, "TOML file with [endpoints] and [migration] sections")
    parser.add_argument("--copy-workers", type=option_type("copy-workers"),
                        help=f"parallel bulk-copy workers (default {DEFAULTS.copy_workers})")
    parser.add_argument("--apply-workers", type=option_type("apply-workers"),
                        help=f"parallel change appliers (default {DEFAULTS.apply_workers})")
    parser.add_argument("--batch-size", type=option_type("batch-size"),
                        help=f"rows of the first copy statement of each worker (default {DEFAULTS.batch_size}); "
                             "later ones are sized by --target-batch-time")
    parser.add_argument("--target-batch-time", metavar="DURATION",
                        help="how long one copy statement should run, e.g. 250ms (default "
                             f"{DEFAULTS.target_batch_time}; 0: every statement copies --batch-size rows)")
    parser.add_argument("--max-app-latency", metavar="DURATION|auto|off",
                        help="application write latency above which copy and validation run fewer and shorter "
                             "statements, e.g. 10ms (default auto: twice the latency measured before the copy, "
                             "and only while other sessions run statements: an idle server's latency is the "
                             "copy's own)")
    parser.add_argument("--validate-ahead", dest="validate_ahead", action="store_true", default=None,
                        help="compare each copied chunk while the copy goes on, so that validation at the end "
                             "compares in it only the keys written since: worth it when writes fall on few rows "
                             "(off by default: docs/benchmarks.md)")
    parser.add_argument("--no-validate-ahead", dest="validate_ahead", action="store_false",
                        help="compare every range at the end only (default)")
    parser.add_argument("--apply-batch-size", type=option_type("apply-batch-size"),
                        help=f"change events per apply batch (default {DEFAULTS.apply_batch_size})")
    _add_cutover_options(parser)
    _add_throttle_options(parser)
    _add_lock_options(parser)
    parser.add_argument("--hook", dest="hook_dir", metavar="DIR", type=option_type("hook"),
                        help="run DIR's executables named after the migration's events (docs/options.md)")
    parser.add_argument("--notify-url", metavar="URL", type=option_type("notify-url"),
                        help="POST each event to URL as Slack-compatible JSON (docs/options.md)")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def _add_cutover_options(parser: argparse.ArgumentParser) -> None:
    """When the cutover may start and how often it is tried."""
    parser.add_argument("--cutover-window", dest="cutover_window_s", type=option_type("cutover-window"),
                        help="longest time writes may be blocked at cutover, seconds "
                             f"(default {DEFAULTS.cutover_window_s})")
    parser.add_argument("--cutover-attempts", type=option_type("cutover-attempts"),
                        help=f"cutover attempts before giving up (default {DEFAULTS.cutover_attempts})")
    parser.add_argument("--max-lag", dest="max_lag_events", type=option_type("max-lag"),
                        help="apply lag (events) under which validation and cutover start "
                             f"(default {DEFAULTS.max_lag_events})")


def _add_throttle_options(parser: argparse.ArgumentParser) -> None:
    """What holds the work and the cutover's locks back, or stops the migration (throttle/)."""
    parser.add_argument("--max-load", help="hold copy, apply, validation and the cutover's locks back while a global "
                                           "status variable is at or above a limit, e.g. Threads_running=25 "
                                           "(comma-separated)")
    parser.add_argument("--critical-load", help="stop the migration (resumable) when a global status variable "
                                                "reaches a limit, e.g. Threads_running=100")
    parser.add_argument("--cloudwatch-max-load",
                        help="hold copy, apply, validation and the cutover's locks back while an AWS/RDS "
                             "CloudWatch metric of --rds-instance is at or above a limit, e.g. "
                             "CPUUtilization=80,WriteIOPS=5000")
    parser.add_argument("--rds-instance", help="DB instance identifier whose CloudWatch metrics --cloudwatch-max-load "
                                               "reads (the writer)")
    parser.add_argument("--throttle-replicas", help="HOST[:PORT],… replicas (reached with the source's credentials) "
                                                    "whose replication lag holds copy, apply, validation and the "
                                                    "cutover's locks back")
    parser.add_argument("--max-replica-lag", type=option_type("max-replica-lag"),
                        help="seconds behind at which a --throttle-replicas replica holds the work back "
                             f"(default {DEFAULTS.max_replica_lag})")


def _add_lock_options(parser: argparse.ArgumentParser) -> None:
    """How the cutover may lock, whom it may kill, and in which daily windows it may swap."""
    parser.add_argument("--lock-wait-timeout", dest="lock_wait_s", type=option_type("lock-wait-timeout"),
                        help="longest one lock request on the table may queue in front of application statements, "
                             f"seconds (default {DEFAULTS.lock_wait_s}; whole seconds, at least 1, on MySQL)")
    parser.add_argument("--lock-tries", type=option_type("lock-tries"),
                        help=f"lock requests per cutover attempt before it backs off (default {DEFAULTS.lock_tries})")
    parser.add_argument("--force-kill-blockers-after", dest="force_kill_blockers_after_s",
                        type=option_type("force-kill-blockers-after"),
                        metavar="DURATION", help="kill sessions that held the table up for this long, e.g. 5s "
                                                 "(default: never; wait for them)")
    parser.add_argument("--force-kill-max-rows", type=option_type("force-kill-max-rows"),
                        help="never kill a transaction that changed more rows than this "
                             f"(default {DEFAULTS.force_kill_max_rows})")


def option_type(name: str):
    """The argparse type of option `name`: its value parsed and checked by the options' schema (core/options.py),
    so an impossible value is a usage error (exit 2) before anything else happens."""
    option = BY_NAME[name]

    def parse(text: str) -> object:
        try:
            return option.parse(text, f"--{name}")
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--{name}").lstrip(": ")) from None
    parse.__name__ = name   # argparse names the type in some of its messages
    return parse


def config_file(args: argparse.Namespace) -> str | None:
    """The config file of this command: --config, else STREAM_OSC_CONFIG, else none."""
    return getattr(args, "config", None) or os.environ.get("STREAM_OSC_CONFIG") or None


def spec_from_args(args: argparse.Namespace, alter_required: bool = True) -> MigrationSpec:
    path = config_file(args)
    file_values = load_migration_file(path) if path else {}
    table = args.table or file_values.pop("table", None)
    file_values.pop("table", None)
    if not table:
        raise PreflightError("--table DB.TABLE is required")
    alter = getattr(args, "alter", None) or file_values.pop("alter", None)
    file_values.pop("alter", None)
    values = dict(file_values)
    if alter is None and (getattr(args, "target_dsn", None) is not None or file_values.get("target_server")):
        alter = ""   # a move to another server may leave the table's definition as it is
    if alter is None:
        if alter_required:
            raise PreflightError("--alter is required")
        alter, stored = _stored_migration(args, table, file_values.get("metadata_schema"))
        values.update({k: stored[k] for k in TARGET_OPTIONS if k in stored})
        for field in STORED_ONLY:   # said once: a config file shared with `migrate` may hold them
            if field in file_values and field in stored and file_values[field] != stored[field]:
                print(f"stream-osc: {BY_FIELD[field].key} = {file_values[field]!r} in [migration] of {path} is "
                      f"not used: the migration keeps {stored[field]!r} from `stream-osc migrate`", file=sys.stderr)
    for name in SPEC_FIELDS:   # --cutover, --keep-old/--drop-old and --dry-run (migrate only) included
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    if getattr(args, "target_dsn", None) is not None:
        if args.target_dsn:
            refuse_password_on_command_line(args.target_dsn)
        values["target_server"] = True
    return MigrationSpec.from_table_arg(table, alter, **values)


def given_options(args: argparse.Namespace) -> frozenset[str]:
    """Spec fields set for this run, on the command line or in the config file: on `resume` they replace the
    values stored with the migration where that is allowed (migration/resuming.py, KEPT_UNLESS_GIVEN)."""
    path = config_file(args)
    file_keys = set(load_migration_file(path)) if path else set()
    return frozenset(file_keys | {name for name in SPEC_FIELDS if getattr(args, name, None) is not None})


def _stored_migration(args: argparse.Namespace, table: str, schema: str | None) -> tuple[str, dict]:
    """The ALTER and options of the table's unfinished migration (for resume/cutover/abort)."""
    endpoints = command_endpoints(args)
    db, tbl = spec_table(table)
    conn = connect(endpoints.mysql)
    try:
        migration = StateStore(conn, metadata_schema(args, schema)).active(db, tbl)
    finally:
        conn.close()
    if migration is None:
        raise PreflightError(f"no unfinished migration of {table}")
    return migration.alter_sql, migration.options


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


def port_number(text: str) -> int:
    """A TCP port for argparse: 1 to 65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def add_metrics_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metrics-port", type=port_number,
                        help="serve Prometheus metrics on http://ADDRESS:PORT/metrics while this process runs")
    parser.add_argument("--metrics-address",
                        help=f"address of the metrics endpoint (default {DEFAULT_ADDRESS}; 0.0.0.0: every interface)")
    parser.add_argument("--cloudwatch-namespace",
                        help="also publish the metrics to CloudWatch under this namespace every 60 s "
                             "(AWS credentials and region from the environment, as boto3 finds them)")


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


def spec_table(table: str) -> tuple[str, str]:
    """DB.TABLE -> (db, table), with the same error as migrate."""
    spec = MigrationSpec.from_table_arg(table, "-")
    return spec.database, spec.table


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
                              "ALTER after the bulk copy, before the changes are applied (PRIMARY, UNIQUE and "
                              "foreign-key indexes stay); refused when there is none to defer")
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
