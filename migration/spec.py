"""The migration spec: what to change and how hard to work at it."""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from migration.endpoints import ConfigError
from monitor.throttle import parse_thresholds

IDENT = re.compile(r"^[A-Za-z0-9_$]{1,64}$")


@dataclass(frozen=True)
class MigrationSpec:
    """One online schema change of one table."""

    database: str
    table: str
    alter: str
    copy_workers: int = 4
    apply_workers: int = 2
    chunk_size: int = 100_000
    batch_size: int = 5_000
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

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def new_table(self) -> str:
        return f"_{self.table}_new"

    @property
    def old_table(self) -> str:
        return f"_{self.table}_old"

    def validate(self) -> "MigrationSpec":
        """Raise ConfigError on a spec that cannot be right."""
        for name in (self.database, self.table, self.metadata_schema):
            if not IDENT.match(name):
                raise ConfigError(f"unsupported identifier {name!r}: use letters, digits, _ and $ (max 64)")
        if len(self.table) > 58:
            raise ConfigError(f"table name {self.table!r} is too long to add the _..._new suffix")
        if not self.alter.strip():
            raise ConfigError("--alter is empty")
        if self.cutover not in ("auto", "manual"):
            raise ConfigError("--cutover must be auto or manual")
        for name in ("copy_workers", "apply_workers", "chunk_size", "batch_size", "apply_batch_size", "partitions"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be at least 1")
        if self.cutover_window_s <= 0:
            raise ConfigError("cutover window must be positive")
        self.load_limits()
        return self

    def load_limits(self) -> tuple[dict[str, int], dict[str, int]]:
        """(--max-load, --critical-load) as {status variable: limit}; ConfigError if malformed."""
        return (parse_thresholds(self.max_load, "--max-load"),
                parse_thresholds(self.critical_load, "--critical-load"))

    @classmethod
    def from_table_arg(cls, table_arg: str, alter: str, **options: Any) -> "MigrationSpec":
        """Build from `DB.TABLE` and option values (None means default)."""
        if table_arg.count(".") != 1:
            raise ConfigError(f"--table must be DB.TABLE, got {table_arg!r}")
        database, table = table_arg.split(".")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in options.items() if v is not None and k in known}
        return cls(database=database, table=table, alter=alter, **values).validate()


def load_migration_file(path: str | Path) -> dict[str, Any]:
    """Read the `[migration]` section of a TOML config file (keys as the long option names)."""
    try:
        with open(path, "rb") as fh:
            section = tomllib.load(fh).get("migration", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    known = {f.name for f in fields(MigrationSpec)} | {"table"}
    normalized = {k.replace("-", "_"): v for k, v in section.items()}
    unknown = set(normalized) - known
    if unknown:
        raise ConfigError(f"unknown keys in [migration] of {path}: {', '.join(sorted(unknown))}")
    return normalized


def with_overrides(spec: MigrationSpec, **values: Any) -> MigrationSpec:
    """A copy of the spec with some fields changed."""
    return replace(spec, **values).validate()
