"""The migration spec: what to change and how hard to work at it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from core.config_file import config_section
from core.endpoints import ConfigError, dsn_parts
from core.options import BY_FIELD, check_spec_values, option_named, parse_duration, toml_type
from core.throttle_options import parse_cloudwatch_thresholds, parse_replicas, parse_thresholds
from core.schedule import CutoverSchedule, parse_schedule
from core.state import HEARTBEAT_S, STALE_S

_TABLE_PART = re.compile(r"`((?:[^`]|``)+)`|([^.`]+)")
MAX_NAME_CHARS = 64
# kept with a migration to another server and restored by every later command (resume, cutover, abort)
TARGET_OPTIONS = ("target_server", "target_dsn", "target_table", "where")
HELPER_SUFFIX = "_osc_"        # <table>_osc_new, <table>_osc_old
LONG_NAME_MARK = "~"           # sorts after every character of an unquoted ASCII identifier


def helper_table_name(table: str, role: str) -> str:
    """The name of the migration's `role` ("new" or "old") table: one that sorts AFTER `table`.

    Why: the server takes a statement's metadata locks in (schema, name) byte order. The swap's
    RENAME must queue on the original table itself; a helper that sorts first (`_orders_new`) makes
    it wait on the helper instead, and at UNLOCK the application's waiting writes are granted the
    original first and land in the old table (docs/cutover.md). `<table>_osc_<role>` extends the name,
    so it sorts after it (the shorter key ends first), whatever the case folding. A name too long for
    the suffix keeps a prefix and replaces the next character with one that sorts higher ('~' above
    every ASCII identifier character), within 64 characters.
    """
    suffix = f"{HELPER_SUFFIX}{role}"
    if len(table) + len(suffix) <= MAX_NAME_CHARS:
        return table + suffix
    tail = f"{LONG_NAME_MARK}{role}"
    for cut in range(MAX_NAME_CHARS - len(tail), -1, -1):
        if cut < len(table) and table[cut].isascii() and table[cut] < LONG_NAME_MARK:
            return table[:cut] + tail
    raise ConfigError(f"table name {table!r}: no helper table name of at most {MAX_NAME_CHARS} characters "
                      "sorts after it; rename the table first")


def check_name(name: str) -> None:
    """ConfigError for a name no server accepts: empty, over 64 characters, a NUL, a trailing space, or a
    character outside the Basic Multilingual Plane. Anything else (spaces, hyphens, dots, backticks,
    any letter) is quoted wherever it is used."""
    problem = ("is empty" if not name else
               f"is {len(name)} characters long (at most {MAX_NAME_CHARS})" if len(name) > MAX_NAME_CHARS else
               "holds a NUL character" if "\0" in name else
               "ends with a space" if name.endswith(" ") else
               "holds a character outside the Basic Multilingual Plane" if any(ord(c) > 0xFFFF for c in name) else
               None)
    if problem:
        raise ConfigError(f"the name {name!r} {problem}: MySQL and MariaDB accept no such identifier")


def split_table_arg(text: str) -> tuple[str, str]:
    """`DB.TABLE` -> (database, table). A name holding a dot or a backtick is written in backticks, a
    backtick in it doubled, as in SQL: `my.db`.`t`; names are otherwise taken as written."""
    parts: list[str] = []
    position = 0
    while True:
        found = _TABLE_PART.match(text, position)
        if found is None:
            break
        parts.append(found.group(1).replace("``", "`") if found.group(1) is not None else found.group(2))
        position = found.end()
        if position == len(text) or text[position] != ".":
            break
        position += 1
    if len(parts) != 2 or position != len(text):
        raise ConfigError(f"--table must be DB.TABLE, got {text!r} (write a name that holds a dot in backticks: "
                          "`my.db`.`my.table`)")
    return parts[0], parts[1]


@dataclass(frozen=True)
class MigrationSpec:
    """One online schema change of one table."""

    database: str
    table: str
    alter: str
    copy_workers: int = 4
    apply_workers: int = 2
    chunk_size: int = 100_000
    batch_size: int = 5_000          # rows of the first copy batch; later ones are sized by target_batch_time
    target_batch_time: str = "250ms"  # how long one copy batch should run ("0": every batch is batch_size rows)
    max_app_latency: str = "auto"     # application write latency above which copy and validation yield
    validate_ahead: bool = False      # copied chunks compared during the copy (cutover/validate_ahead.py)
    apply_batch_size: int = 2_000
    partitions: int = 8
    cutover: str = "auto"            # auto | manual
    keep_old: bool = True
    cutover_window_s: float = 3.0
    cutover_attempts: int = 10
    max_lag_events: int = 1_000      # cutover starts only below this consumer lag
    max_load: str = ""               # e.g. "Threads_running=25": workers hold back at or above it
    critical_load: str = ""          # e.g. "Threads_running=100": the migration stops at or above it
    metadata_schema: str = "stream_osc"
    dry_run: bool = False
    cloudwatch_max_load: str = ""    # e.g. "CPUUtilization=80": hold back while an AWS/RDS metric is at or above it
    rds_instance: str = ""           # the DB instance whose CloudWatch metrics --cloudwatch-max-load reads
    throttle_replicas: str = ""      # e.g. "replica-1:3306,replica-2": hold back while one lags max_replica_lag s
    max_replica_lag: int = 5         # seconds (Seconds_Behind_Master) at which a replica holds the work back
    max_redo_fill: int = 0           # percent of the redo log's checkpoint limit at which the work holds back (0: off)
    lock_wait_s: float = 0.5         # longest one lock request may queue in front of application statements
    lock_tries: int = 5              # lock requests per cutover attempt (and validation snapshot)
    force_kill_blockers_after_s: float | None = None   # kill sessions holding the table up this long (opt-in)
    force_kill_max_rows: int = 10_000   # never kill a transaction that changed more rows than this
    cutover_window_schedule: str = ""   # e.g. "02:00-04:00,13:00-13:30": cut over only inside these windows
    cutover_timezone: str = "UTC"       # the schedule's time zone (IANA name)
    target_server: bool = False      # the new table lives on another server (docs/move.md)
    target_dsn: str = ""             # that server's address, without a password ("": STREAM_OSC_TARGET_DSN)
    target_table: str = ""           # DB2.T2 on that server ("": the same names)
    where: str = ""                  # only rows matching this predicate are copied and kept in sync (another server)
    defer_indexes: bool = False         # non-unique secondary indexes added after the copy (migration/index_stage.py)
    hook_dir: str = ""               # executables named after the migration's events run here (migration/notify.py)
    notify_url: str = field(default="", repr=False)   # a JSON POST at each event; its user:password never shown
    algorithm: str = "auto"          # auto: the ALTER tried as ALGORITHM=INSTANT first (core/instant.py) | copy
    alter_foreign_keys_method: str = "none"   # rebuild: children's constraints rebuilt on the new table (foreign keys)

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def new_table(self) -> str:
        """The table the copy fills: a helper beside the original, or the target table on another server."""
        return self.target_names[1] if self.target_server else helper_table_name(self.table, "new")

    @property
    def target_database(self) -> str:
        """The schema of the table the copy fills."""
        return self.target_names[0] if self.target_server else self.database

    @property
    def target_names(self) -> tuple[str, str]:
        """(schema, table) on the target server: --target-table, else the original's names."""
        return split_table_arg(self.target_table) if self.target_table else (self.database, self.table)

    @property
    def old_table(self) -> str:
        return helper_table_name(self.table, "old")

    def validate(self) -> "MigrationSpec":
        """Raise ConfigError on a spec that cannot be right."""
        for name in (self.database, self.table, self.metadata_schema):
            check_name(name)
        helper_table_name(self.table, "new")   # ConfigError if no helper name sorts after the table's
        if not self.alter.strip() and not self.target_server:
            raise ConfigError("--alter is empty")
        self.check_target()
        if self.cutover not in ("auto", "manual"):
            raise ConfigError("--cutover must be auto or manual")
        if self.algorithm not in ("auto", "copy"):
            raise ConfigError(f"--algorithm must be auto or copy, not {self.algorithm!r}")
        if self.alter_foreign_keys_method not in ("none", "rebuild"):
            raise ConfigError("--alter-foreign-keys-method must be none or rebuild, not "
                              f"{self.alter_foreign_keys_method!r}")
        for name in ("copy_workers", "apply_workers", "chunk_size", "batch_size", "apply_batch_size", "partitions"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be at least 1")
        if self.cutover_window_s <= 0:
            raise ConfigError("cutover window must be positive")
        self.check_lock_options()
        self.target_batch_s()
        self.app_latency_target()
        self.schedule()
        self.load_limits()
        if self.cloudwatch_limits() and not self.rds_instance:
            raise ConfigError("--cloudwatch-max-load needs --rds-instance (the DB instance identifier to watch)")
        self.replicas()
        if self.max_replica_lag < 1:
            raise ConfigError("--max-replica-lag must be at least 1 second")
        if not 0 <= self.max_redo_fill <= 99:
            raise ConfigError(f"--max-redo-fill must be a percentage from 1 to 99, or 0 to turn it off, "
                              f"not {self.max_redo_fill}")
        check_spec_values({f.name: getattr(self, f.name) for f in fields(self)})   # every range, nan and inf
        return self

    def check_target(self) -> None:
        """ConfigError for target options that cannot be right."""
        if not self.target_server:
            for value, flag in ((self.target_table, "--target-table"), (self.target_dsn, "--target-dsn DSN"),
                                (self.where, "--where")):
                if value:
                    raise ConfigError(f"{flag} needs --target-dsn: on the same server"
                                      + (", a table holding only some rows would replace the original"
                                         if flag == "--where" else " the new table replaces the original"))
            return
        for name in self.target_names:
            check_name(name)
        if ";" in self.where:
            raise ConfigError("--where must be one predicate (no ';')")

    def check_lock_options(self) -> None:
        """ConfigError on a lock option that cannot be right."""
        if self.lock_wait_s <= 0:
            raise ConfigError("--lock-wait-timeout must be positive")
        if self.lock_tries < 1:
            raise ConfigError("--lock-tries must be at least 1")
        if self.force_kill_blockers_after_s is not None and self.force_kill_blockers_after_s < 0:
            raise ConfigError("--force-kill-blockers-after must not be negative")
        if self.force_kill_max_rows < 0:
            raise ConfigError("--force-kill-max-rows must not be negative")
        locked_s = self.cutover_window_s + self.lock_wait_s
        if locked_s >= STALE_S - 2 * HEARTBEAT_S:
            # the cutover holds the metadata table READ-locked (docs/cutover.md, "One coordinator"): every
            # coordinator's heartbeat waits behind one lock try and the window, and one silent for STALE_S is
            # taken for dead (between tries the lock request is withdrawn, so heartbeats get through)
            raise ConfigError(f"--cutover-window plus --lock-wait-timeout is {locked_s:g} s; it must stay under "
                              f"{STALE_S - 2 * HEARTBEAT_S:g} s, or coordinators' heartbeats would stall long "
                              "enough to be taken for dead")

    def target_batch_s(self) -> float:
        """--target-batch-time in seconds (0: batches of --batch-size rows); ConfigError if malformed."""
        try:
            return parse_duration(self.target_batch_time)
        except ConfigError:
            raise ConfigError(f"--target-batch-time: {self.target_batch_time!r} is not a duration such as 250ms "
                              "(0 keeps every batch at --batch-size rows)") from None

    def app_latency_target(self) -> float | str | None:
        """--max-app-latency as milliseconds, "auto" or None (off); ConfigError if malformed."""
        value = self.max_app_latency.strip().lower()
        if value in ("auto", "off"):
            return None if value == "off" else "auto"
        try:
            milliseconds = parse_duration(value) * 1000
        except ConfigError:
            milliseconds = 0.0
        if milliseconds <= 0:
            raise ConfigError(f"--max-app-latency: {self.max_app_latency!r} is not auto, off or a positive "
                              "duration such as 10ms")
        return milliseconds

    def schedule(self) -> CutoverSchedule | None:
        """The cutover windows, or None when the cutover may run at any time; ConfigError if malformed."""
        return parse_schedule(self.cutover_window_schedule, self.cutover_timezone)

    def load_limits(self) -> tuple[dict[str, int], dict[str, int]]:
        """(--max-load, --critical-load) as {status variable: limit}; ConfigError if malformed."""
        return (parse_thresholds(self.max_load, "--max-load"),
                parse_thresholds(self.critical_load, "--critical-load"))

    def cloudwatch_limits(self) -> dict[str, float]:
        """--cloudwatch-max-load as {AWS/RDS metric: limit}; ConfigError if malformed."""
        return parse_cloudwatch_thresholds(self.cloudwatch_max_load)

    def replicas(self) -> list[tuple[str, int]]:
        """--throttle-replicas as [(host, port)]; ConfigError if malformed."""
        return parse_replicas(self.throttle_replicas)

    @classmethod
    def from_table_arg(cls, table_arg: str, alter: str, **options: Any) -> "MigrationSpec":
        """Build from `DB.TABLE` and option values (None means default)."""
        database, table = split_table_arg(table_arg)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in options.items() if v is not None and k in known}
        return cls(database=database, table=table, alter=alter, **values).validate()


# keys of a [migration] section that are not options of `migrate`'s spec: what `--table` and `--alter` give
FILE_ONLY_KEYS = ("table", "alter")


def load_migration_file(path: str | Path) -> dict[str, Any]:
    """The `[migration]` section of a TOML config file as {spec field: value} (plus `table` and `alter`).

    Its keys are the long options' names, with dashes or underscores (`max_lag`, `cutover-window`,
    `drop_old`); each value is typed as the option takes it (core/options.py): a value of another type, or out
    of the option's range, is one ConfigError naming the key and the file.
    """
    section = config_section(path, "migration")
    values: dict[str, Any] = {}
    unknown = []
    for key, value in section.items():
        label = f"{key} in [migration] of {path}"
        if key.replace("-", "_") in FILE_ONLY_KEYS:
            if not isinstance(value, str):
                raise ConfigError(f"{label} must be a string, not {toml_type(value)}")
            values[key.replace("-", "_")] = value
            continue
        option = option_named(key) if not key.startswith("-") else None
        if option is None:
            unknown.append(key)
            continue
        value = option.spec_value(option.typed(value, label))
        if option.field in values and values[option.field] != value:
            raise ConfigError(f"{label} contradicts another key of [migration] of {path} (keep_old, drop_old)")
        values[option.field] = value
        if option.field == "target_dsn":   # as --target-dsn: a move, and never a password (kept with the migration)
            if value and dsn_parts(value, label).password:
                raise ConfigError(f"{label} holds a password: a migration's options are kept in its metadata; put "
                                  "the password in STREAM_OSC_TARGET_PASSWORD, a Secrets Manager secret "
                                  "(STREAM_OSC_TARGET_SECRET_ID), or the whole DSN in STREAM_OSC_TARGET_DSN")
            values["target_server"] = True
    if unknown:
        hints = [f"{key} (the option is {BY_FIELD[key].key})" if key in BY_FIELD else key for key in sorted(unknown)]
        raise ConfigError(f"unknown keys in [migration] of {path}: {', '.join(hints)}; the keys are the long "
                          f"options' names, e.g. max_lag, cutover_window, drop_old (docs/options.md)")
    return values


def with_overrides(spec: MigrationSpec, **values: Any) -> MigrationSpec:
    """A copy of the spec with some fields changed."""
    return replace(spec, **values).validate()


