"""Handlers of the migration commands: migrate, status, cutover, resume, pause, abort, worker."""
from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone

import redis

from connectors.health import describe_failure
from connectors.rest import ConnectClient, ConnectError
from migration.checks import PreflightError
from core.db import connect
from core.endpoints import Endpoints
from stack.config import StackConfig
from migration.lease import STALE_S, live_coordinator
from migration.runner import Runner
from migration.teardown import Metadata, tear_down
from core.spec import MigrationSpec, load_migration_file
from core.state import FINISHED, SWAPPED_STAGES, Migration, Stage, StateStore, Status
from migration.worker_process import JoinedWorker
from monitor.progress import Progress
from core import redis_keys
from streams.topics import TopicNames, group_lag
from core.spec import helper_table_name, parse_duration
from core.endpoints import ConfigError
from core.schedule import parse_schedule

SPEC_OPTIONS = {
    "copy_workers": int, "apply_workers": int, "chunk_size": int, "batch_size": int, "apply_batch_size": int,
    "partitions": int, "cutover_window_s": float, "cutover_attempts": int, "max_lag_events": int,
    "metadata_schema": str, "max_load": str, "critical_load": str,
    "lock_wait_s": float, "lock_tries": int, "force_kill_blockers_after_s": float, "force_kill_max_rows": int,
    "cutover_window_schedule": str, "cutover_timezone": str,
}


# One source for every default: the spec's own (what a migration uses when no option is given).
DEFAULTS = MigrationSpec(database="db", table="t", alter="-")


def add_spec_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", help="DB.TABLE to change")
    parser.add_argument("--config", help="TOML file with [endpoints] and [migration] sections")
    parser.add_argument("--copy-workers", type=int,
                        help=f"parallel bulk-copy workers (default {DEFAULTS.copy_workers})")
    parser.add_argument("--apply-workers", type=int,
                        help=f"parallel change appliers (default {DEFAULTS.apply_workers})")
    parser.add_argument("--chunk-size", type=int,
                        help=f"primary-key values per copy chunk (default {DEFAULTS.chunk_size})")
    parser.add_argument("--batch-size", type=int,
                        help=f"primary-key values per copy statement (default {DEFAULTS.batch_size})")
    parser.add_argument("--apply-batch-size", type=int,
                        help=f"change events per apply batch (default {DEFAULTS.apply_batch_size})")
    parser.add_argument("--partitions", type=int,
                        help=f"partitions of the change topic (default {DEFAULTS.partitions})")
    parser.add_argument("--cutover-window", dest="cutover_window_s", type=float,
                        help="longest time writes may be blocked at cutover, seconds "
                             f"(default {DEFAULTS.cutover_window_s})")
    parser.add_argument("--cutover-attempts", type=int,
                        help=f"cutover attempts before giving up (default {DEFAULTS.cutover_attempts})")
    parser.add_argument("--max-lag", dest="max_lag_events", type=int,
                        help="apply lag (events) under which validation and cutover start "
                             f"(default {DEFAULTS.max_lag_events})")
    parser.add_argument("--max-load", help="hold copy, apply and validation back while a global status "
                                           "variable is at or above a limit, e.g. Threads_running=25 (comma-separated)")
    parser.add_argument("--critical-load", help="stop the migration (resumable) when a global status variable "
                                                "reaches a limit, e.g. Threads_running=100")
    parser.add_argument("--metadata-schema", help=f"schema for stream-osc's state (default {DEFAULTS.metadata_schema})")
    parser.add_argument("--lock-wait-timeout", dest="lock_wait_s", type=float,
                        help="longest one lock request on the table may queue in front of application statements, "
                             f"seconds (default {DEFAULTS.lock_wait_s}; whole seconds, at least 1, on MySQL)")
    parser.add_argument("--lock-tries", type=int,
                        help=f"lock requests per cutover attempt before it backs off (default {DEFAULTS.lock_tries})")
    parser.add_argument("--force-kill-blockers-after", dest="force_kill_blockers_after_s", type=_duration,
                        metavar="DURATION", help="kill sessions that held the table up for this long, e.g. 5s "
                                                 "(default: never; wait for them)")
    parser.add_argument("--force-kill-max-rows", type=int,
                        help="never kill a transaction that changed more rows than this "
                             f"(default {DEFAULTS.force_kill_max_rows})")
    parser.add_argument("--cutover-window-schedule", metavar="HH:MM-HH:MM[,…]",
                        help="swap only inside these daily windows, e.g. 02:00-04:00 (the appliers keep the new "
                             "table in sync meanwhile; `stream-osc cutover` swaps at once); kept for the whole "
                             "migration")
    parser.add_argument("--cutover-timezone", help="time zone of --cutover-window-schedule, an IANA name "
                                                   f"(default {DEFAULTS.cutover_timezone})")
    parser.add_argument("--quiet", action="store_true", help="no progress display")


def _duration(text: str) -> float:
    """argparse type of DURATION options ("5s", "500ms", "2m")."""
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def spec_from_args(args: argparse.Namespace, alter_required: bool = True) -> MigrationSpec:
    file_values = load_migration_file(args.config) if getattr(args, "config", None) else {}
    table = args.table or file_values.pop("table", None)
    file_values.pop("table", None)
    if not table:
        raise PreflightError("--table DB.TABLE is required")
    alter = getattr(args, "alter", None) or file_values.pop("alter", None)
    file_values.pop("alter", None)
    if alter is None:
        if alter_required:
            raise PreflightError("--alter is required")
        alter = _stored_alter(args, table, file_values.get("metadata_schema"))
    values = dict(file_values)
    for name in SPEC_OPTIONS:
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    for flag in ("cutover", "keep_old", "dry_run"):
        if getattr(args, flag, None) is not None:
            values[flag] = getattr(args, flag)
    return MigrationSpec.from_table_arg(table, alter, **values)


def _stored_alter(args: argparse.Namespace, table: str, schema: str | None) -> str:
    """The ALTER of the table's unfinished migration (for resume/cutover/abort)."""
    endpoints = StackConfig().endpoints(args.config)
    db, _, tbl = table.partition(".")
    conn = connect(endpoints.mysql)
    try:
        store_schema = getattr(args, "metadata_schema", None) or schema or DEFAULTS.metadata_schema
        migration = StateStore(conn, store_schema).active(db, tbl)
    finally:
        conn.close()
    if migration is None:
        raise PreflightError(f"no unfinished migration of {table}")
    return migration.alter_sql


def cmd_migrate(args: argparse.Namespace, cutover_now: bool = False) -> int:
    spec = spec_from_args(args, alter_required=not cutover_now and args.command == "migrate")
    endpoints = StackConfig().endpoints(args.config)
    return Runner(endpoints, spec, Progress(quiet=args.quiet), cutover_now=cutover_now,
                  resume_live=args.command == "resume").run()


def cmd_cutover(args: argparse.Namespace) -> int:
    return cmd_migrate(args, cutover_now=True)


def _with_store(args: argparse.Namespace):
    endpoints = StackConfig().endpoints(args.config)
    db, _, tbl = args.table.partition(".")
    conn = connect(endpoints.mysql)
    return endpoints, conn, StateStore(conn, args.metadata_schema or DEFAULTS.metadata_schema), db, tbl


def cmd_status(args: argparse.Namespace) -> int:
    endpoints, conn, store, db, tbl = _with_store(args)
    migration = store.latest(db, tbl)
    if migration is None:
        raise PreflightError(f"no migration of {args.table} is recorded")
    rows, chunks_done, chunks = store.copy_progress(migration.id)
    doc = {
        "migration": migration.id, "table": args.table, "alter": migration.alter_sql,
        "stage": migration.stage, "status": migration.status,
        "copy": {"rows": rows, "chunks_done": chunks_done, "chunks": chunks},
        "validation_diffs": migration.validation_diffs, "cutover_blocked_ms": migration.cutover_blocked_ms,
        "connector": migration.connector, "error": migration.error,
    }
    if migration.status not in FINISHED:
        doc["coordinator"] = _coordinator_line(store, migration.id)
        doc["connector_state"] = _connector_line(endpoints, migration, args.table)
        doc["throttled"] = _throttle_line(endpoints, migration)
        doc["blockers"] = _blockers(endpoints, migration)
        if migration.options.get("cutover_window_schedule"):
            doc["cutover_window"] = _window_line(migration)
    if migration.stage in (Stage.APPLY, Stage.VALIDATE, Stage.CUTOVER):
        names = TopicNames(migration.prefix, db, tbl)
        try:
            doc["apply_lag_events"] = group_lag(endpoints.kafka_bootstrap, migration.group_id, names.changes,
                                                int(migration.options.get("partitions", 8)))
        except Exception as exc:  # noqa: BLE001 - status still shows the rest
            doc["apply_lag_events"] = f"unknown ({exc})"
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        for key, value in doc.items():
            print(f"{key:>20}: {_blockers_text(value) if key == 'blockers' else value}")
    return 0


def _window_line(migration: Migration) -> str:
    """The migration's cutover windows and whether one is open now."""
    options = migration.options
    schedule = parse_schedule(options["cutover_window_schedule"], options.get("cutover_timezone", "UTC"))
    now = datetime.now(timezone.utc)
    when = "open now" if schedule.is_open(now) else f"next at {schedule.next_opening(now):%Y-%m-%d %H:%M %Z}"
    return f"{schedule.describe()}, {when}"


def _blockers(endpoints: Endpoints, migration: Migration) -> list[dict] | str:
    """The sessions holding the table that the migration waits for before locking it, as last seen."""
    try:
        raw = redis.Redis.from_url(endpoints.redis_url, socket_timeout=5).get(redis_keys.blockers_note(migration.id))
    except redis.RedisError as exc:
        return f"unknown (Redis: {type(exc).__name__})"
    return json.loads(raw) if raw else []


def _blockers_text(blockers: list[dict] | str) -> str:
    if isinstance(blockers, str) or not blockers:
        return blockers or "none"
    return "; ".join(f"connection {b['connection_id']} ({b['user']}@{b['host']}, {b['seconds']:.0f} s): "
                     f"{b['statement'] or 'idle in transaction'}" for b in blockers)


def _throttle_line(endpoints: Endpoints, migration: Migration) -> str:
    """Why the workers hold back (--max-load), or "no"."""
    try:
        note = redis.Redis.from_url(endpoints.redis_url, socket_timeout=5).get(redis_keys.throttle_note(migration.id))
    except redis.RedisError as exc:
        return f"unknown (Redis: {type(exc).__name__})"
    return f"yes: {note.decode()} (--max-load)" if note else "no"


def _coordinator_line(store: StateStore, migration_id: int) -> str:
    live = live_coordinator(store, migration_id)
    return f"{live[0]} (heartbeat {live[1]:.1f} s ago)" if live else "none running"


def _connector_line(endpoints: Endpoints, migration: Migration, table: str) -> str:
    try:
        state = ConnectClient(endpoints.connect_url).state(migration.connector)
    except ConnectError as exc:
        return f"unknown ({exc})"
    if state is None:
        return "missing from Kafka Connect"
    if state.failed:
        return "FAILED: " + describe_failure(migration.connector, state, table)
    return f"{state.connector} (tasks: {', '.join(state.tasks) or 'none'})"


def cmd_pause(args: argparse.Namespace, status: Status = Status.PAUSED) -> int:
    _, conn, store, db, tbl = _with_store(args)
    migration = store.active(db, tbl)
    if migration is None:
        raise PreflightError(f"no unfinished migration of {args.table}")
    store.update(migration.id, status=status)
    print(f"migration {migration.id} of {args.table}: {status}")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue from durable state (also after a crash) in this process."""
    return cmd_migrate(args)


def cmd_abort(args: argparse.Namespace) -> int:
    """Remove everything the migration created; the original table is untouched."""
    endpoints, conn, store, db, tbl = _with_store(args)
    migration = store.active(db, tbl)
    if migration is None:
        raise PreflightError(f"no unfinished migration of {args.table}")
    if migration.stage in SWAPPED_STAGES:
        raise PreflightError(f"migration {migration.id} already swapped the tables; nothing to abort")
    store.update(migration.id, status=Status.ABORTED)
    _wait_for_coordinator_exit(store, migration.id)
    if store.get(migration.id).stage in SWAPPED_STAGES:
        raise PreflightError(f"migration {migration.id} swapped the tables before the abort took effect; "
                             f"the new table is in place and the original is {db}.{helper_table_name(tbl, 'old')}")
    spec = MigrationSpec(database=db, table=tbl, alter=migration.alter_sql,
                         metadata_schema=args.metadata_schema or DEFAULTS.metadata_schema)
    tear_down(conn, endpoints, spec, migration, drop_new_table=True, metadata=Metadata.WORK)   # a sentry too
    print(f"migration {migration.id} of {args.table} aborted; connector, topics, {spec.new_table} and its copy plan "
          "removed (its row stays, marked aborted)")
    return 0


def _wait_for_coordinator_exit(store: StateStore, migration_id: int) -> None:
    """Give a live coordinator the time to see the abort and stop (it checks every few seconds)."""
    deadline = time.monotonic() + 2 * STALE_S
    while live_coordinator(store, migration_id) is not None:
        if time.monotonic() > deadline:
            raise PreflightError(f"the coordinator of migration {migration_id} did not stop; try the abort again")
        time.sleep(0.5)


def cmd_worker(args: argparse.Namespace) -> int:
    """Join a running migration with more copy workers and appliers."""
    endpoints = StackConfig().endpoints(args.config)
    db, tbl = spec_table(args.table)
    return JoinedWorker(endpoints, db, tbl, args.metadata_schema or DEFAULTS.metadata_schema,
                        Progress(quiet=args.quiet), args.copy_workers, args.apply_workers).run()


def spec_table(table: str) -> tuple[str, str]:
    """DB.TABLE -> (db, table), with the same error as migrate."""
    spec = MigrationSpec.from_table_arg(table, "-")
    return spec.database, spec.table


def register(sub: argparse._SubParsersAction) -> None:
    migrate = sub.add_parser("migrate", help="change a table's schema online")
    add_spec_options(migrate)
    migrate.add_argument("--alter", help='the ALTER clauses, e.g. "ADD COLUMN c INT, ADD INDEX (c)"')
    migrate.add_argument("--cutover", choices=["auto", "manual"], help="swap when in sync (auto) or wait (manual)")
    migrate.add_argument("--keep-old", dest="keep_old", action="store_true", default=None,
                         help="keep the original table as <table>_osc_old (default)")
    migrate.add_argument("--drop-old", dest="keep_old", action="store_false", help="drop the original table after")
    migrate.add_argument("--dry-run", action="store_true", default=None, help="run every check, change nothing")
    migrate.set_defaults(func=cmd_migrate)

    for name, func, text in (("resume", cmd_resume, "continue an unfinished migration"),
                             ("cutover", cmd_cutover, "swap the tables of a migration waiting for cutover")):
        parser = sub.add_parser(name, help=text)
        add_spec_options(parser)
        parser.set_defaults(func=func)

    worker = sub.add_parser("worker", help="add copy workers and appliers to a running migration (any machine)")
    worker.add_argument("--table", required=True, help="DB.TABLE of the running migration")
    worker.add_argument("--config", help="TOML file with [endpoints]")
    worker.add_argument("--metadata-schema", help=f"schema for stream-osc's state (default {DEFAULTS.metadata_schema})")
    worker.add_argument("--copy-workers", type=int, help="copy threads in this process (default: the migration's)")
    worker.add_argument("--apply-workers", type=int, help="applier threads in this process (default: the migration's)")
    worker.add_argument("--quiet", action="store_true", help="no progress lines")
    worker.set_defaults(func=cmd_worker)

    for name, func, text in (("status", cmd_status, "show stage, progress and lag"),
                             ("pause", cmd_pause, "stop all copy and apply writes until resume"),
                             ("abort", cmd_abort, "remove everything a migration created")):
        parser = sub.add_parser(name, help=text)
        parser.add_argument("--table", required=True, help="DB.TABLE")
        parser.add_argument("--config", help="TOML file with [endpoints]")
        parser.add_argument("--metadata-schema",
                            help=f"schema for stream-osc's state (default {DEFAULTS.metadata_schema})")
        if name == "status":
            parser.add_argument("--json", action="store_true", help="machine-readable output")
        parser.set_defaults(func=func)
