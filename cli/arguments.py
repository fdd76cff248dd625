"""The arguments of the migration commands: each option's argparse type (checked by core/options.py's schema, so an
impossible value is a usage error), help text and default (the spec's own), and the options `migrate` alone takes.

Apart from the handlers (cli/commands.py), which only read the parsed values."""
from __future__ import annotations

import argparse
import math

from cli.endpoints import add_stack_option
from core.endpoints import ConfigError
from core.options import BY_FIELD, BY_NAME
from core.spec import MigrationSpec
from monitor.metrics import DEFAULT_ADDRESS

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


SEVERAL_TABLES = ("--table given more than once: a migration changes one table; run one `stream-osc migrate` per "
                  "table. Several tables are not swapped in one step because on MariaDB that is not safe: a RENAME of "
                  "several tables waits in one table's metadata-lock queue at a time, in name order, so at the unlock "
                  "the application's writes already waiting on the other tables would run on the tables it is about "
                  "to replace, and be lost")


class OneTable(argparse.Action):
    """--table, given once: a second one is refused (argparse would keep the last silently)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(SEVERAL_TABLES)
        setattr(namespace, self.dest, values)


def add_spec_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", action=OneTable, help="DB.TABLE to change (one)")
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
    parser.add_argument("--max-redo-fill", type=option_type("max-redo-fill"),
                        help="percent of the redo log's checkpoint limit at which copy, apply and validation hold "
                             "back, before the server stalls every write to flush (default 0: off; see "
                             "docs/throttling.md before choosing one)")


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
