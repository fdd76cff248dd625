"""Settings changed while a migration runs (`stream-osc set`), like gh-ost's interactive commands.

They are kept in the migration row (options["settings"]), so they outlive the process: the coordinator
picks them up within seconds (batch sizes and load limits at once, worker counts by restarting its
workers), `worker` processes when they next start a stage's workers, and `resume` keeps them.
"""
from __future__ import annotations

from typing import Any

from core.endpoints import ConfigError
from core.options import BY_NAME
from core.spec import MigrationSpec, with_overrides
from core.state_records import Migration

SETTINGS_OPTION = "settings"

# name accepted by `set` (the long option's name) -> spec field
SETTABLE = {
    "max-load": "max_load",
    "critical-load": "critical_load",
    "cloudwatch-max-load": "cloudwatch_max_load",
    "max-replica-lag": "max_replica_lag",
    "max-redo-fill": "max_redo_fill",
    "max-lag": "max_lag_events",
    "batch-size": "batch_size",
    "target-batch-time": "target_batch_time",
    "max-app-latency": "max_app_latency",
    "apply-batch-size": "apply_batch_size",
    "copy-workers": "copy_workers",
    "apply-workers": "apply_workers",
}


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`["batch-size=2000", "max-load=Threads_running=30"]` -> {spec field: typed value}; ConfigError if not."""
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        field = SETTABLE.get(name.strip().replace("_", "-"))
        if not sep or field is None:
            raise ConfigError(f"{item!r}: use NAME=VALUE with NAME one of {', '.join(SETTABLE)}")
        option = BY_NAME[name.strip().replace("_", "-")]   # typed and range-checked as the option is
        values[field] = option.parse(text, option.name)
    check_formats(values)
    return values


def check_formats(values: dict[str, Any]) -> None:
    """ConfigError for a setting of free text the spec cannot read (`max-load=Threads_running`, a duration `5
    parsecs`), before any migration is looked up: read as the spec reads it, alone (it is checked again with the
    migration's other options when it is applied)."""
    texts = {field: value for field, value in values.items() if isinstance(value, str)}
    if texts:
        spec = MigrationSpec(database="db", table="t", alter="-", **texts)
        spec.load_limits()
        spec.cloudwatch_limits()
        spec.target_batch_s()
        spec.app_latency_target()


def settings_of(migration: Migration) -> dict[str, Any]:
    """The settings changed at run time, {spec field: value}."""
    return dict(migration.options.get(SETTINGS_OPTION, {}))


def with_settings(spec: MigrationSpec, migration: Migration) -> MigrationSpec:
    """The spec with the migration's run-time settings applied."""
    settings = settings_of(migration)
    return with_overrides(spec, **settings) if settings else spec


def options_with(migration: Migration, spec: MigrationSpec, values: dict[str, Any]) -> dict[str, Any]:
    """The migration's options with `values` added to its settings; ConfigError if the result is not a valid
    spec (checked against `spec`, the migration's own)."""
    settings = {**settings_of(migration), **values}
    with_overrides(spec, **settings)
    return {**migration.options, SETTINGS_OPTION: settings}
